package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// gpuSel selects the GPUs picked in the instance and gpu variables. The
// labels are dcgm-exporter's, so the same panels work on its series.
const gpuSel = `instance=~"$instance", gpu=~"$gpu"`

const gpuLegend = "{{instance}} GPU {{gpu}}"

// gpuOverview is the per-node, per-GPU view of dcgm-exporter's metrics:
// what the source document asks to watch on a GPU (utilisation and memory
// level first, then temperature, power, clocks, PCIe and errors).
func gpuOverview() *dashboard.DashboardBuilder {
	return newDashboard(UIDGPUOverview, "gpuscope / GPU overview",
		"Per node and GPU: utilisation, framebuffer, temperature, power, clocks, PCIe, XID errors and throttling. Thresholds are the alert rules'.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(DCGM_FI_DEV_GPU_TEMP, instance)`)).
		WithVariable(labelVariable("gpu", "GPU", `label_values(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance"}, gpu)`)).
		WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(statPanel("GPUs", "GPUs reporting.", unitCount,
			target(`count(DCGM_FI_DEV_GPU_TEMP{`+gpuSel+`})`, "GPUs"))).
		WithPanel(statPanel("Mean utilisation", "Mean GPU utilisation of the selected GPUs.", unitPercent,
			target(`avg(DCGM_FI_DEV_GPU_UTIL{`+gpuSel+`})`, "utilisation")).
			Thresholds(thresholds(95)).Min(0).Max(100)).
		WithPanel(statPanel("Power", "Total power draw of the selected GPUs.", unitWatt,
			target(`sum(DCGM_FI_DEV_POWER_USAGE{`+gpuSel+`})`, "power"))).
		WithPanel(statPanel("Hottest GPU", "Highest GPU temperature; the alert fires above 85 °C for 10 minutes.", unitCelsius,
			target(`max(DCGM_FI_DEV_GPU_TEMP{`+gpuSel+`})`, "temperature")).
			Thresholds(thresholds(85))).
		WithRow(dashboard.NewRowBuilder("Utilisation and memory")).
		WithPanel(timeseriesPanel("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL: share of time a kernel ran. Above 95% for 5 minutes raises GPUSMUtilizationHigh.", unitPercent,
			target(`DCGM_FI_DEV_GPU_UTIL{`+gpuSel+`}`, gpuLegend)).
			Min(0).Max(100).Thresholds(thresholds(95))).
		WithPanel(timeseriesPanel("Framebuffer used", "Share of GPU memory in use. Above 90% for 10 minutes raises GPUMemoryAlmostFull; a staircase here is the memory-leak pattern.", unitPercentUnit,
			target(`gpu:dcgm_fi_dev_fb_used:ratio{`+gpuSel+`}`, gpuLegend)).
			Min(0).Max(1).Thresholds(thresholds(0.9))).
		WithPanel(timeseriesPanel("Framebuffer used vs total", "DCGM_FI_DEV_FB_USED against DCGM_FI_DEV_FB_TOTAL, in MiB as DCGM reports them.", unitMiB,
			target(`DCGM_FI_DEV_FB_USED{`+gpuSel+`}`, "used "+gpuLegend),
			target(`DCGM_FI_DEV_FB_TOTAL{`+gpuSel+`}`, "total "+gpuLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("Memory bandwidth", "DCGM_FI_DEV_MEM_COPY_UTIL: share of time the memory was being read or written.", unitPercent,
			target(`DCGM_FI_DEV_MEM_COPY_UTIL{`+gpuSel+`}`, gpuLegend)).
			Min(0).Max(100)).
		WithRow(dashboard.NewRowBuilder("Thermal, power and clocks")).
		WithPanel(timeseriesPanel("Temperature", "GPU and memory temperature. Above 85 °C for 10 minutes raises GPUTemperatureHigh.", unitCelsius,
			target(`DCGM_FI_DEV_GPU_TEMP{`+gpuSel+`}`, "GPU "+gpuLegend),
			target(`DCGM_FI_DEV_MEMORY_TEMP{`+gpuSel+`}`, "memory "+gpuLegend)).
			Thresholds(thresholds(85))).
		WithPanel(timeseriesPanel("Power draw", "DCGM_FI_DEV_POWER_USAGE.", unitWatt,
			target(`DCGM_FI_DEV_POWER_USAGE{`+gpuSel+`}`, gpuLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("Clocks", "SM and memory clocks (DCGM reports MHz).", unitHertz,
			target(`DCGM_FI_DEV_SM_CLOCK{`+gpuSel+`} * 1e6`, "SM "+gpuLegend),
			target(`DCGM_FI_DEV_MEM_CLOCK{`+gpuSel+`} * 1e6`, "memory "+gpuLegend))).
		WithPanel(timeseriesPanel("Throttle reasons", "Clock event reasons active on each GPU (1 = active): power cap, thermal slowdown, sync boost and others.", unitCount,
			target(`gpuscope_gpu_clock_event_active{`+gpuSel+`}`, "{{reason}} "+gpuLegend)).
			Min(0).Max(1)).
		WithRow(dashboard.NewRowBuilder("PCIe, NVLink and errors")).
		WithPanel(timeseriesPanel("PCIe throughput", "Bytes per second each way, against the link's theoretical maximum.", unitBytesPerSec,
			target(`gpuscope_gpu_pcie_tx_bytes_per_second{`+gpuSel+`}`, "tx "+gpuLegend),
			target(`gpuscope_gpu_pcie_rx_bytes_per_second{`+gpuSel+`}`, "rx "+gpuLegend),
			target(`gpuscope_gpu_pcie_max_bandwidth_bytes_per_second{`+gpuSel+`}`, "max "+gpuLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("PCIe utilisation", "Busier direction over the theoretical maximum. Above 90% raises PCIeBandwidthNearLimit.", unitPercentUnit,
			target(`max by (instance, gpu) (
    label_replace(gpuscope_gpu_pcie_tx_bytes_per_second{`+gpuSel+`}, "dir", "tx", "", "")
  or
    label_replace(gpuscope_gpu_pcie_rx_bytes_per_second{`+gpuSel+`}, "dir", "rx", "", "")
)
/ on (instance, gpu)
max by (instance, gpu) (gpuscope_gpu_pcie_max_bandwidth_bytes_per_second{`+gpuSel+`})`, gpuLegend)).
			Min(0).Max(1).Thresholds(thresholds(0.9))).
		WithPanel(timeseriesPanel("NVLink bandwidth", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, summed over links (MB/s as DCGM computes it).", unitCount,
			target(`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{`+gpuSel+`}`, gpuLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("XID errors", "Last XID code per GPU (0 = none since start) and XID events per second. XID 79 means the GPU fell off the bus.", unitCount,
			target(`DCGM_FI_DEV_XID_ERRORS{`+gpuSel+`}`, "last code "+gpuLegend),
			target(`sum by (instance, gpu) (rate(gpuscope_gpu_xid_errors_total{`+gpuSel+`}[$__rate_interval]))`, "events/s "+gpuLegend)).
			Min(0)).
		WithRow(dashboard.NewRowBuilder("Profiling (Hopper and newer)")).
		WithPanel(timeseriesPanel("Tensor core activity", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: share of cycles the tensor pipes were busy. From NVML GPM; absent on GPUs older than Hopper.", unitPercentUnit,
			target(`DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{`+gpuSel+`}`, gpuLegend)).
			Min(0).Max(1)).
		WithPanel(timeseriesPanel("DRAM activity", "DCGM_FI_PROF_DRAM_ACTIVE: share of cycles the memory interface was busy. High with low utilisation means memory-bound.", unitPercentUnit,
			target(`DCGM_FI_PROF_DRAM_ACTIVE{`+gpuSel+`}`, gpuLegend)).
			Min(0).Max(1))
}

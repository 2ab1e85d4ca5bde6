package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// gpuSel selects the GPUs picked in the instance and gpu variables. The
// labels are dcgm-exporter's, so the same panels work on its series.
const gpuSel = `instance=~"$instance", gpu=~"$gpu"`

// nodeSel selects the nodes picked in the instance variable. The fleet row
// reads per-node series, which have no gpu label: the gpu variable picks
// GPUs in the per-GPU rows only.
const nodeSel = `instance=~"$instance"`

// fleetPoints is the fleet graphs' maxDataPoints: a day of one line per
// node at a point per two minutes, about one per two pixels of a
// half-width panel, where Grafana's default (the panel's width in pixels)
// may ask for one a minute. At 64 nodes that halves what a day's load
// encodes and sends (BENCHMARKS.md).
const fleetPoints = 500

const gpuLegend = "{{instance}} GPU {{gpu}}"

const nodeLegend = "{{instance}}"

// gpuInstanceLegend is the legend of series that a GPU in MIG mode has once
// per GPU instance (framebuffer, DCGM_FI_PROF_*, utilisation): it adds the
// instance's profile and GPU_I_ID, which Grafana renders empty for a whole
// GPU. Series a MIG GPU has once (temperature, power, clocks, PCIe, XID)
// keep gpuLegend.
const gpuInstanceLegend = gpuLegend + " {{GPU_I_PROFILE}} {{GPU_I_ID}}"

// gpuOverview is the per-node, per-GPU view of dcgm-exporter's metrics:
// what the source document asks to watch on a GPU (utilisation and memory
// level first, then temperature, power, clocks, PCIe and errors). Panels
// read the one-minute aggregates of the gpuscope.dashboard rules (the
// series' minute average, or maximum for temperatures and throttling), so
// a day of 128 GPUs loads from a quarter of the samples.
//
// The dashboard opens on the fleet: one line per node, whatever the
// number of GPUs, from the per-node rules of gpuscope.dashboard. The per-GPU panels sit in collapsed rows, which Grafana
// queries only once opened: drawn for every GPU of a 64-node cluster they
// would be 512 lines each, unreadable, and a day of them 24 queries of
// 737,000 points, seconds to load (BENCHMARKS.md, issue 18).
func gpuOverview() *dashboard.DashboardBuilder {
	return newDashboard(UIDGPUOverview, "gpuscope / GPU overview",
		"Per node and GPU: utilisation, framebuffer, temperature, power, clocks, PCIe, XID errors and throttling. Thresholds are the alert rules'. The fleet row shows one line per node (the GPU variable applies to the per-GPU rows only); open a per-GPU row to see each GPU, picking the nodes first on a large cluster.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(DCGM_FI_DEV_GPU_TEMP, instance)`)).
		WithVariable(labelVariable("gpu", "GPU", `label_values(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance"}, gpu)`)).
		WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(nowStatPanel("GPUs", "GPUs reporting on the selected nodes now.", unitCount,
			`sum(instance:dcgm_fi_dev_gpu_temp:count1m{`+nodeSel+`})`, "GPUs")).
		WithPanel(nowStatPanel("Mean utilisation", "Mean GPU utilisation of the selected nodes' GPUs now. A GPU in MIG mode counts once, as the mean of its instances' engine activity.", unitPercent,
			`sum(instance:dcgm_fi_dev_gpu_util:avg1m{`+nodeSel+`} * instance:dcgm_fi_dev_gpu_util:count1m{`+nodeSel+`}) / sum(instance:dcgm_fi_dev_gpu_util:count1m{`+nodeSel+`})`, "utilisation").
			Thresholds(thresholds(95)).Min(0).Max(100)).
		WithPanel(nowStatPanel("Power", "Total power draw of the selected nodes' GPUs now.", unitWatt,
			`sum(instance:dcgm_fi_dev_power_usage:avg1m{`+nodeSel+`})`, "power")).
		WithPanel(nowStatPanel("Hottest GPU", "Highest GPU temperature on the selected nodes now; the alert fires above 85 °C for 10 minutes.", unitCelsius,
			`max(instance:dcgm_fi_dev_gpu_temp:max1m{`+nodeSel+`})`, "temperature").
			Thresholds(thresholds(85))).
		WithPanel(timeseriesPanel("Utilisation by node", "Mean GPU utilisation of each node's GPUs (a GPU in MIG mode counts once, as the mean of its instances' engine activity). Open \"Utilisation and memory per GPU\" for each GPU.", unitPercent,
			target(`instance:dcgm_fi_dev_gpu_util:avg1m{`+nodeSel+`}`, nodeLegend)).
			Min(0).Max(100).Thresholds(thresholds(95)).
			MaxDataPoints(fleetPoints)).
		WithPanel(timeseriesPanel("Fullest GPU framebuffer by node", "Share of memory in use on each node's fullest GPU (or MIG instance). Above 90% for 10 minutes on a GPU raises GPUMemoryAlmostFull.", unitPercentUnit,
			target(`instance:dcgm_fi_dev_fb_used:max_ratio_avg1m{`+nodeSel+`}`, nodeLegend)).
			Min(0).Max(1).Thresholds(thresholds(0.9)).
			MaxDataPoints(fleetPoints)).
		WithPanel(timeseriesPanel("Hottest GPU by node", "Temperature of each node's hottest GPU. Above 85 °C for 10 minutes on a GPU raises GPUTemperatureHigh.", unitCelsius,
			target(`instance:dcgm_fi_dev_gpu_temp:max1m{`+nodeSel+`}`, nodeLegend)).
			Thresholds(thresholds(85)).
			MaxDataPoints(fleetPoints)).
		WithPanel(timeseriesPanel("Power by node", "Power draw of each node's GPUs together.", unitWatt,
			target(`instance:dcgm_fi_dev_power_usage:avg1m{`+nodeSel+`}`, nodeLegend)).
			Min(0).
			MaxDataPoints(fleetPoints)).
		WithRow(dashboard.NewRowBuilder("Utilisation and memory per GPU").
			WithPanel(timeseriesPanel("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL: share of time a kernel ran. Above 95% for 5 minutes raises GPUSMUtilizationHigh. A GPU in MIG mode has no GPU_UTIL: each of its instances shows its graphics engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE).", unitPercent,
				target(`gpu:dcgm_fi_dev_gpu_util:avg1m{`+gpuSel+`}`, gpuInstanceLegend)).
				Min(0).Max(100).Thresholds(thresholds(95))).
			WithPanel(timeseriesPanel("Framebuffer used", "Share of GPU memory in use (of each MIG instance's memory on a GPU in MIG mode). Above 90% for 10 minutes raises GPUMemoryAlmostFull; a staircase here is the memory-leak pattern.", unitPercentUnit,
				target(`gpu:dcgm_fi_dev_fb_used:ratio_avg1m{`+gpuSel+`}`, gpuInstanceLegend)).
				Min(0).Max(1).Thresholds(thresholds(0.9))).
			WithPanel(timeseriesPanel("Framebuffer used vs total", "DCGM_FI_DEV_FB_USED against DCGM_FI_DEV_FB_TOTAL, in MiB as DCGM reports them (per MIG instance on a GPU in MIG mode).", unitMiB,
				target(`gpu:dcgm_fi_dev_fb_used:avg1m{`+gpuSel+`}`, "used "+gpuInstanceLegend),
				target(`gpu:dcgm_fi_dev_fb_total:max1m{`+gpuSel+`}`, "total "+gpuInstanceLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("Memory bandwidth", "DCGM_FI_DEV_MEM_COPY_UTIL: share of time the memory was being read or written. Absent in MIG mode: see DRAM activity per instance.", unitPercent,
				target(`gpu:dcgm_fi_dev_mem_copy_util:avg1m{`+gpuSel+`}`, gpuLegend)).
				Min(0).Max(100))).
		WithRow(dashboard.NewRowBuilder("Thermal, power and clocks per GPU").
			WithPanel(timeseriesPanel("Temperature", "GPU and memory temperature. Above 85 °C for 10 minutes raises GPUTemperatureHigh.", unitCelsius,
				target(`gpu:dcgm_fi_dev_gpu_temp:max1m{`+gpuSel+`}`, "GPU "+gpuLegend),
				target(`gpu:dcgm_fi_dev_memory_temp:max1m{`+gpuSel+`}`, "memory "+gpuLegend)).
				Thresholds(thresholds(85))).
			WithPanel(timeseriesPanel("Power draw", "DCGM_FI_DEV_POWER_USAGE.", unitWatt,
				target(`gpu:dcgm_fi_dev_power_usage:avg1m{`+gpuSel+`}`, gpuLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("Clocks", "SM and memory clocks (DCGM_FI_DEV_SM_CLOCK and DCGM_FI_DEV_MEM_CLOCK, which DCGM reports in MHz).", unitHertz,
				target(`gpu:dcgm_fi_dev_sm_clock_hertz:avg1m{`+gpuSel+`}`, "SM "+gpuLegend),
				target(`gpu:dcgm_fi_dev_mem_clock_hertz:avg1m{`+gpuSel+`}`, "memory "+gpuLegend))).
			WithPanel(timeseriesPanel("Throttle reasons", "Clock event reasons active on each GPU: a point at 1 for each minute the reason (power cap, thermal slowdown, sync boost and others) was active, nothing while none was.", unitCount,
				target(`gpu:gpuscope_gpu_clock_event_active:max1m{`+gpuSel+`}`, "{{reason}} "+gpuLegend)).
				Min(0).Max(1))).
		WithRow(dashboard.NewRowBuilder("PCIe, NVLink and errors per GPU").
			WithPanel(timeseriesPanel("PCIe throughput", "Bytes per second each way, against the link's theoretical maximum.", unitBytesPerSec,
				target(`gpu:gpuscope_gpu_pcie_tx_bytes_per_second:avg1m{`+gpuSel+`}`, "tx "+gpuLegend),
				target(`gpu:gpuscope_gpu_pcie_rx_bytes_per_second:avg1m{`+gpuSel+`}`, "rx "+gpuLegend),
				target(`gpu:gpuscope_gpu_pcie_max_bandwidth_bytes_per_second:max1m{`+gpuSel+`}`, "max "+gpuLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("PCIe utilisation", "Busier direction over the theoretical maximum. Above 90% raises PCIeBandwidthNearLimit.", unitPercentUnit,
				target(`gpu:pcie_utilization:ratio_avg1m{`+gpuSel+`}`, gpuLegend)).
				Min(0).Max(1).Thresholds(thresholds(0.9))).
			WithPanel(timeseriesPanel("NVLink bandwidth", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, summed over links (MB/s as DCGM computes it).", unitCount,
				target(`gpu:dcgm_fi_dev_nvlink_bandwidth_total:avg1m{`+gpuSel+`}`, gpuLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("XID errors", "Last XID code per GPU (0 = none since start) and XID events per second. XID 79 means the GPU fell off the bus.", unitCount,
				target(`gpu:dcgm_fi_dev_xid_errors:max1m{`+gpuSel+`}`, "last code "+gpuLegend),
				target(`sum by (instance, gpu) (rate(gpuscope_gpu_xid_errors_total{`+gpuSel+`}[$__rate_interval]))`, "events/s "+gpuLegend)).
				Min(0))).
		WithRow(dashboard.NewRowBuilder("Profiling per GPU (Hopper and newer)").
			WithPanel(timeseriesPanel("Tensor core activity", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: share of cycles the tensor pipes were busy. From NVML GPM; absent on GPUs older than Hopper.", unitPercentUnit,
				target(`gpu:dcgm_fi_prof_pipe_tensor_active:avg1m{`+gpuSel+`}`, gpuInstanceLegend)).
				Min(0).Max(1)).
			WithPanel(timeseriesPanel("DRAM activity", "DCGM_FI_PROF_DRAM_ACTIVE: share of cycles the memory interface was busy. High with low utilisation means memory-bound.", unitPercentUnit,
				target(`gpu:dcgm_fi_prof_dram_active:avg1m{`+gpuSel+`}`, gpuInstanceLegend)).
				Min(0).Max(1)))
}

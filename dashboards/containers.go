package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// containerSel selects the containers picked in the instance and container
// variables; `id` is cAdvisor's container id, the cgroup path.
const containerSel = `instance=~"$instance", id=~"$container"`

const containerLegend = "{{instance}} {{id}}"

// containers is cAdvisor's view with the source document's emphasis: CPU
// saturation against the limit (not raw usage), memory working set against
// the limit, and each container's share of the GPUs. Graphs read the
// built-in rules' per-minute series, so a day of every container loads
// fast.
func containers() *dashboard.DashboardBuilder {
	return newDashboard(UIDContainers, "gpuscope / Containers",
		"Per container (cgroup): CPU use against its limit and saturation, memory working set against its limit, network, disk I/O, and its GPU memory and SM share. Thresholds are the alert rules'.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(container_cpu_usage_seconds_total, instance)`)).
		WithVariable(labelVariable("container", "Container", `label_values(container_cpu_usage_seconds_total{instance=~"$instance"}, id)`)).
		WithRow(dashboard.NewRowBuilder("CPU")).
		WithPanel(timeseriesPanel("CPU used vs limit", "Cores used (5-minute rate, recorded) and the limit: the CFS quota, or the host's cores where there is none.", unitCores,
			target(`instance_id:container_cpu_usage_seconds:rate5m{`+containerSel+`}`, "used "+containerLegend),
			target(`instance_id:container_cpu_limit:cores{`+containerSel+`}`, "limit "+containerLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("CPU saturation", "Share of its limit each container uses. Above 80% for 5 minutes raises ContainerCPUSaturated; next to an idle GPU it means input-bound.", unitPercentUnit,
			target(`instance_id:container_cpu_saturation:ratio{`+containerSel+`}`, containerLegend)).
			Min(0).Thresholds(thresholds(0.8))).
		WithPanel(timeseriesPanel("CPU throttling", "Share of CFS periods in which the container was throttled.", unitPercentUnit,
			target(`instance_id:container_cpu_cfs_throttled_periods:ratio_rate5m{`+containerSel+`}`, containerLegend)).
			Min(0).Max(1)).
		WithRow(dashboard.NewRowBuilder("Memory")).
		WithPanel(timeseriesPanel("Memory working set vs limit", "Working set (what the kernel will not reclaim) against the memory limit, where there is one.", unitBytes,
			target(`instance_id:container_memory_working_set_bytes:avg1m{`+containerSel+`}`, "working set "+containerLegend),
			target(`instance_id:container_spec_memory_limit_bytes:max1m{`+containerSel+`}`, "limit "+containerLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("Memory near limit", "Working set over the limit. Above 90% for 5 minutes raises ContainerMemoryNearLimit.", unitPercentUnit,
			target(`instance_id:container_memory_working_set:ratio{`+containerSel+`}`, containerLegend)).
			Min(0).Max(1).Thresholds(thresholds(0.9))).
		WithRow(dashboard.NewRowBuilder("Network and disk")).
		WithPanel(timeseriesPanel("Network", "Bytes per second received and transmitted (containers with their own network namespace, and the host).", unitBytesPerSec,
			target(`instance_id:container_network_receive_bytes:rate2m{`+containerSel+`}`, "rx "+containerLegend),
			target(`instance_id:container_network_transmit_bytes:rate2m{`+containerSel+`}`, "tx "+containerLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("Disk I/O", "Bytes per second read and written to block devices (blkio; absent where the kernel keeps no per-cgroup block I/O statistics).", unitBytesPerSec,
			target(`instance_id:container_fs_reads_bytes:rate2m{`+containerSel+`}`, "read "+containerLegend),
			target(`instance_id:container_fs_writes_bytes:rate2m{`+containerSel+`}`, "write "+containerLegend)).
			Min(0)).
		WithPanel(timeseriesPanel("I/O pressure", "Share of time tasks of the container waited on I/O (PSI). A data loader starved by storage shows here before the GPU goes idle.", unitPercentUnit,
			target(`instance_id:container_pressure_io_waiting_seconds:rate2m{`+containerSel+`}`, containerLegend)).
			Min(0)).
		WithRow(dashboard.NewRowBuilder("GPU share")).
		WithPanel(timeseriesPanel("GPU memory per container", "Framebuffer memory held by the container's processes, per GPU (per MIG instance on a GPU in MIG mode).", unitBytes,
			target(`gpu:gpuscope_gpu_container_memory_used_bytes:avg1m{`+containerSel+`}`, containerLegend+" GPU {{gpu}} {{GPU_I_PROFILE}} {{GPU_I_ID}}")).
			Min(0)).
		WithPanel(timeseriesPanel("SM share per container", "SM utilisation of the container's processes, per GPU (NVML process utilisation).", unitPercent,
			target(`gpu:gpuscope_gpu_container_sm_utilization_percent:avg1m{`+containerSel+`}`, containerLegend+" GPU {{gpu}} {{GPU_I_PROFILE}} {{GPU_I_ID}}")).
			Min(0).Max(100)).
		WithPanel(tablePanel("Containers on GPUs", "Each container with a GPU process: GPU memory, SM share and its CPU saturation side by side, one row per GPU (per MIG instance on a GPU in MIG mode).", unitCount,
			instantTarget(`sum by (instance, id, gpu, GPU_I_ID, GPU_I_PROFILE) (gpuscope_gpu_container_memory_used_bytes{`+containerSel+`})`, "GPU memory").RefId("A"),
			instantTarget(`sum by (instance, id, gpu, GPU_I_ID, GPU_I_PROFILE) (gpuscope_gpu_container_sm_utilization_percent{`+containerSel+`})`, "SM %").RefId("B"),
			instantTarget(`max by (instance, id) (instance_id:container_cpu_saturation:ratio{`+containerSel+`}) and on (instance, id) gpuscope_gpu_container_memory_used_bytes`, "CPU saturation").RefId("C")).
			Span(24))
}

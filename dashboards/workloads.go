package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
)

// workloadSel selects the workloads picked in the instance, runtime and
// workload variables. workload and runtime are gpuscope's workload labels
// on cAdvisor's series and the per-container GPU series (package
// workload); the built-in rules keep them.
const workloadSel = `instance=~"$instance", runtime=~"$runtime", workload=~"$workload"`

// workloadLegend names a series by its workload (the container name,
// compose project/service, Slurm job or cgroup path), not its cgroup id.
const workloadLegend = "{{workload}} on {{instance}}"

// workloadGPULegend adds the GPU (and MIG instance) to workloadLegend.
const workloadGPULegend = workloadLegend + " GPU {{gpu}} {{GPU_I_PROFILE}} {{GPU_I_ID}}"

// workloadsOnGPUs is the row key of the "Workloads on GPUs" table: one row
// per workload and GPU (MIG instance) it has a process on, with the GPU's
// bottleneck class. Every query of the table returns exactly these labels,
// so Grafana's merge transformation joins them into one row.
const workloadsOnGPUs = `max by (instance, id, workload, image, slurm_job_id, gpu, GPU_I_ID, GPU_I_PROFILE, class) (gpu_workload:bottleneck:class{` + workloadSel + `})`

// workloads is cAdvisor's view by workload, with the source document's
// emphasis: which workloads hold the GPUs and whether their CPU starves
// them, CPU saturation against the limit (not raw usage), memory working
// set against the limit, and each workload's share of the GPUs. Graphs
// read the built-in rules' per-minute series. It opens on the table of the
// workloads on GPUs now; the run report and the graphs sit in collapsed
// rows, queried once opened: a day of a 64-node cluster's 640 workloads is
// 30 MB of JSON per graph, seconds for the whole dashboard (BENCHMARKS.md).
//
// Its uid stays gpuscope-containers, the Containers dashboard's: links and
// bookmarks keep working, and provisioning replaces the old dashboard
// instead of adding a second one beside it.
func workloads() *dashboard.DashboardBuilder {
	return newDashboard(UIDWorkloads, "gpuscope / Workloads",
		"Per workload (Docker or Podman container, compose service, Slurm job, systemd unit, else cgroup): which GPUs it uses and their bottleneck class, CPU use against its limit and saturation, memory working set against its limit, network, disk I/O, and its GPU memory and SM share. Thresholds are the alert rules'.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(container_cpu_usage_seconds_total, instance)`)).
		WithVariable(labelVariable("runtime", "Runtime", `label_values(container_cpu_usage_seconds_total{instance=~"$instance"}, runtime)`).
			AllValue(".*")).
		WithVariable(labelVariable("workload", "Workload", `label_values(container_cpu_usage_seconds_total{instance=~"$instance", runtime=~"$runtime"}, workload)`).
			AllValue(".*")).
		WithRow(dashboard.NewRowBuilder("GPUs")).
		WithPanel(workloadsOnGPUsPanel()).
		WithRow(dashboard.NewRowBuilder("Runs").
			WithPanel(runsPanel())).
		WithRow(dashboard.NewRowBuilder("CPU per workload").
			WithPanel(timeseriesPanel("CPU used vs limit", "Cores used (5-minute rate, recorded) and the limit: the CFS quota, or the host's cores where there is none.", unitCores,
				target(`instance_id:container_cpu_usage_seconds:rate5m{`+workloadSel+`}`, "used "+workloadLegend),
				target(`instance_id:container_cpu_limit:cores{`+workloadSel+`}`, "limit "+workloadLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("CPU saturation", "Share of its limit each workload uses. Above 80% for 5 minutes raises ContainerCPUSaturated; next to an idle GPU it means input-bound.", unitPercentUnit,
				target(`instance_id:container_cpu_saturation:ratio{`+workloadSel+`}`, workloadLegend)).
				Min(0).Thresholds(thresholds(0.8))).
			WithPanel(timeseriesPanel("CPU throttling", "Share of CFS periods in which the workload was throttled.", unitPercentUnit,
				target(`instance_id:container_cpu_cfs_throttled_periods:ratio_rate5m{`+workloadSel+`}`, workloadLegend)).
				Min(0).Max(1))).
		WithRow(dashboard.NewRowBuilder("Memory per workload").
			WithPanel(timeseriesPanel("Memory working set vs limit", "Working set (what the kernel will not reclaim) against the memory limit, where there is one.", unitBytes,
				target(`instance_id:container_memory_working_set_bytes:avg1m{`+workloadSel+`}`, "working set "+workloadLegend),
				target(`instance_id:container_spec_memory_limit_bytes:max1m{`+workloadSel+`}`, "limit "+workloadLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("Memory near limit", "Working set over the limit. Above 90% for 5 minutes raises ContainerMemoryNearLimit.", unitPercentUnit,
				target(`instance_id:container_memory_working_set:ratio{`+workloadSel+`}`, workloadLegend)).
				Min(0).Max(1).Thresholds(thresholds(0.9)))).
		WithRow(dashboard.NewRowBuilder("Network and disk per workload").
			WithPanel(timeseriesPanel("Network", "Bytes per second received and transmitted (workloads with their own network namespace, and the host).", unitBytesPerSec,
				target(`instance_id:container_network_receive_bytes:rate2m{`+workloadSel+`}`, "rx "+workloadLegend),
				target(`instance_id:container_network_transmit_bytes:rate2m{`+workloadSel+`}`, "tx "+workloadLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("Disk I/O", "Bytes per second read and written to block devices (blkio; absent where the kernel keeps no per-cgroup block I/O statistics).", unitBytesPerSec,
				target(`instance_id:container_fs_reads_bytes:rate2m{`+workloadSel+`}`, "read "+workloadLegend),
				target(`instance_id:container_fs_writes_bytes:rate2m{`+workloadSel+`}`, "write "+workloadLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("I/O pressure", "Share of time tasks of the workload waited on I/O (PSI). A data loader starved by storage shows here before the GPU goes idle.", unitPercentUnit,
				target(`instance_id:container_pressure_io_waiting_seconds:rate2m{`+workloadSel+`}`, workloadLegend)).
				Min(0))).
		WithRow(dashboard.NewRowBuilder("GPU share per workload").
			WithPanel(timeseriesPanel("GPU memory per workload", "Framebuffer memory held by the workload's processes, per GPU (per MIG instance on a GPU in MIG mode).", unitBytes,
				target(`gpu:gpuscope_gpu_container_memory_used_bytes:avg1m{`+workloadSel+`}`, workloadGPULegend)).
				Min(0)).
			WithPanel(timeseriesPanel("SM share per workload", "SM utilisation of the workload's processes, per GPU (NVML process utilisation).", unitPercent,
				target(`gpu:gpuscope_gpu_container_sm_utilization_percent:avg1m{`+workloadSel+`}`, workloadGPULegend)).
				Min(0).Max(100)))
}

// workloadsOnGPUsPanel is one row per workload and GPU it uses: the
// workload's name, image or Slurm job, the GPU, how many GPUs the
// workload holds, its GPU memory and SM share there, its CPU saturation
// and the GPU's bottleneck class. Each column is an instant query on the
// same labels (workloadsOnGPUs), merged into rows by Grafana.
func workloadsOnGPUsPanel() *table.PanelBuilder {
	on := func(expr string) string {
		return workloadsOnGPUs + ` * on (instance, id, gpu, GPU_I_ID) group_left () max by (instance, id, gpu, GPU_I_ID) (` + expr + `)`
	}
	onContainer := func(expr string) string {
		return workloadsOnGPUs + ` * on (instance, id) group_left () ` + expr
	}
	unit := func(u string) []dashboard.DynamicConfigValue {
		return []dashboard.DynamicConfigValue{{Id: "unit", Value: u}}
	}
	return tablePanel("Workloads on GPUs", "One row per workload and GPU it has a process on (per MIG instance on a GPU in MIG mode): the workload's name, image or Slurm job, the GPU, how many GPUs the workload holds, its GPU memory and SM share there, its CPU saturation (above 80% next to a GPU under 50% is input-bound: GPUStarvedByCPU) and the GPU's bottleneck class (gpu:bottleneck:class).", unitCount,
		instantTarget(onContainer(`count by (instance, id) (max by (instance, id, gpu, GPU_I_ID) (gpuscope_gpu_container_memory_used_bytes))`), "GPUs").RefId("A"),
		instantTarget(on(`gpuscope_gpu_container_memory_used_bytes`), "GPU memory").RefId("B"),
		instantTarget(on(`gpuscope_gpu_container_sm_utilization_percent`), "SM share").RefId("C"),
		instantTarget(onContainer(`max by (instance, id) (instance_id:container_cpu_saturation:ratio)`), "CPU saturation").RefId("D")).
		Span(24).
		Height(9).
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]any{"Time": true, "id": true},
			"indexByName": map[string]any{
				"workload": 0, "image": 1, "slurm_job_id": 2, "instance": 3, "gpu": 4, "GPU_I_PROFILE": 5, "GPU_I_ID": 6,
				"Value #A": 7, "Value #B": 8, "Value #C": 9, "Value #D": 10, "class": 11,
			},
			"renameByName": map[string]any{
				"workload": "Workload", "image": "Image", "slurm_job_id": "Slurm job", "instance": "Node", "gpu": "GPU",
				"GPU_I_PROFILE": "MIG profile", "GPU_I_ID": "MIG instance",
				"Value #A": "GPUs", "Value #B": "GPU memory", "Value #C": "SM share", "Value #D": "CPU saturation", "class": "Bottleneck",
			},
		}}).
		OverrideByName("GPU memory", unit(unitBytes)).
		OverrideByName("SM share", unit(unitPercent)).
		OverrideByName("CPU saturation", append(unit(unitPercentUnit), dashboard.DynamicConfigValue{Id: "thresholds", Value: thresholdsValue(0.8)}, dashboard.DynamicConfigValue{Id: "custom.cellOptions", Value: map[string]any{"type": "color-text"}})).
		SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName("GPU memory").Desc(true)})
}

// runs is the row key of the "Runs" table: one row per run (a workload's
// cgroup on a node, package accounting) seen in the dashboard's range: every
// cgroup that held a GPU, and every container and Slurm job. Every query of
// the table returns these labels, so merge joins a run's columns.
const runs = `group by (instance, id, workload, runtime, image, slurm_job_id) (last_over_time(gpu_workload:gpu_held:present{` + workloadSel + `}[$__range]))
or
group by (instance, id, workload, runtime, image, slurm_job_id) (last_over_time(workload:cpu_usage_cores:rate1m{` + workloadSel + `, runtime=~"docker|podman|containerd|slurm"}[$__range]))`

// accountingInterval is the gpuscope.accounting group's interval in
// seconds: each of its samples stands for that long. Not $__interval: the
// group records once a minute whatever the panel's step.
const accountingInterval = "60"

// runsPanel is the run report (`gpuscope workloads`, /api/v1/workloads)
// over the dashboard's range, one row per run: its workload, node, image
// or Slurm job, GPU-hours, average SM share, peak GPU memory, energy and
// CPU core-seconds, each the gpuscope.accounting group's samples
// integrated over $__range as the report does.
func runsPanel() *table.PanelBuilder {
	column := func(expr string) string {
		return "(\n" + runs + "\n)\n  * on (instance, id) group_left ()\n(\n  " + expr + "\n)"
	}
	unit := func(u string, decimals float64) []dashboard.DynamicConfigValue {
		return []dashboard.DynamicConfigValue{{Id: "unit", Value: u}, {Id: "decimals", Value: decimals}}
	}
	return tablePanel("Runs", "One row per run (a workload's cgroup on a node) seen in the dashboard's time range: every cgroup that held a GPU, and every container and Slurm job. GPU-hours: the GPUs it had a process on, summed over the range; SM share: its average across its GPUs; GPU memory: the most it held; kWh: its part of its GPUs' energy (a GPU's whole power, idle included, goes to the workloads holding it each minute, split by SM share, evenly where none computes); CPU: core-seconds used. Integrated from the gpuscope.accounting rules' per-minute samples (each counts for 60 s), ±1 minute at each end of a run. Under rules.builtin.time_scale (the demo, tests) the group records more often than once a minute and these figures read too high; gpuscope workloads, which uses the scaled interval, does not. gpuscope workloads prints the same report with start, end, alerts and XIDs.", unitCount,
		instantTarget(column(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_held:present{`+workloadSel+`}[$__range])) * `+accountingInterval+` / 3600`), "GPU-hours").RefId("A"),
		instantTarget(column(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_sm_share:ratio{`+workloadSel+`}[$__range])) / sum by (instance, id) (count_over_time(gpu_workload:gpu_sm_share:ratio{`+workloadSel+`}[$__range]))`), "SM share").RefId("B"),
		instantTarget(column(`max by (instance, id) (max_over_time(gpu_workload:gpu_memory_used_bytes:max1m{`+workloadSel+`}[$__range]))`), "GPU memory").RefId("C"),
		instantTarget(column(`sum by (instance, id) (sum_over_time(gpu_workload:gpu_power_watts:apportioned{`+workloadSel+`}[$__range])) * `+accountingInterval+` / 3.6e6`), "kWh").RefId("D"),
		instantTarget(column(`sum by (instance, id) (sum_over_time(workload:cpu_usage_cores:rate1m{`+workloadSel+`}[$__range])) * `+accountingInterval), "CPU core-seconds").RefId("E")).
		Span(24).
		Height(9).
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]any{"Time": true, "id": true},
			"indexByName": map[string]any{
				"workload": 0, "runtime": 1, "image": 2, "slurm_job_id": 3, "instance": 4,
				"Value #A": 5, "Value #B": 6, "Value #C": 7, "Value #D": 8, "Value #E": 9,
			},
			"renameByName": map[string]any{
				"workload": "Workload", "runtime": "Runtime", "image": "Image", "slurm_job_id": "Slurm job", "instance": "Node",
				"Value #A": "GPU-hours", "Value #B": "SM share (avg)", "Value #C": "GPU memory (peak)", "Value #D": "kWh", "Value #E": "CPU core-seconds",
			},
		}}).
		OverrideByName("GPU-hours", unit(unitCount, 2)).
		OverrideByName("SM share (avg)", unit(unitPercentUnit, 0)).
		OverrideByName("GPU memory (peak)", unit(unitBytes, 1)).
		OverrideByName("kWh", unit(unitCount, 3)).
		OverrideByName("CPU core-seconds", unit(unitCount, 0)).
		SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName("GPU-hours").Desc(true)})
}

// thresholdsValue is thresholds(steps...) as a field override's value.
func thresholdsValue(steps ...float64) dashboard.ThresholdsConfig {
	t, err := thresholds(steps...).Build()
	if err != nil {
		panic(fmt.Sprintf("thresholds %v: %v", steps, err)) // constant input: a programming error
	}
	return t
}

package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// triage puts the source document's method on one page: which GPUs are
// compute-, memory- or input-bound (or idle), whether the CPU starves them,
// whether memory climbs in a staircase, and what is alerting now. It reads
// the recording rules of the built-in pack, so a 24-hour view stays fast.
// It opens on what holds for any number of GPUs (the classes now and their
// counts per node, the workloads on GPUs, the alerts); the per-GPU history
// sits in collapsed rows, queried once opened, as on the GPU overview.
func triage() *dashboard.DashboardBuilder {
	return newDashboard(UIDTriage, "gpuscope / AI workload triage",
		"The bottleneck method on one page: compute-bound (SM busy, memory bandwidth to spare), memory-bound (memory full or its bandwidth saturated, SM idle), input-bound (CPU saturated, GPU idle); the framebuffer staircase of a memory leak; the active alerts.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(DCGM_FI_DEV_GPU_TEMP, instance)`)).
		WithVariable(labelVariable("gpu", "GPU", `label_values(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance"}, gpu)`)).
		WithRow(dashboard.NewRowBuilder("Bottleneck")).
		WithPanel(tablePanel("Bottleneck now", "Each GPU's class from gpu:bottleneck:class (each MIG instance's, for a GPU in MIG mode: columns GPU_I_PROFILE and GPU_I_ID): compute-bound, memory-bound, input-bound, idle, or other (busy 5–50% with nothing gpuscope sees saturated: look at disk, network, synchronisation).", unitCount,
			instantTarget(`gpu:bottleneck:class{`+gpuSel+`}`, "{{class}}"))).
		WithPanel(timeseriesPanel("GPUs per class", "How many of the selected nodes' GPUs are in each class over time (all their GPUs: the GPU variable picks GPUs in the other panels); on a GPU in MIG mode each MIG instance has a class of its own and counts once.", unitCount,
			target(`sum by (class) (instance:gpu_bottleneck_class:count{`+nodeSel+`})`, "{{class}}")).
			Min(0).Stacking(stackingNormal())).
		WithRow(dashboard.NewRowBuilder("Workloads and alerts")).
		WithPanel(tablePanel("Workloads on GPUs", "Per workload (container, compose service, Slurm job; its cgroup where unnamed) with a process on a GPU (on a MIG instance, for a GPU in MIG mode): the GPU's (instance's) utilisation and the workload's CPU saturation. The Workloads dashboard has its GPU memory, SM share and the GPU's class.", unitPercentUnit,
			instantTarget(`max by (instance, gpu, GPU_I_ID, GPU_I_PROFILE, id, workload) (gpuscope_gpu_container_memory_used_bytes{`+gpuSel+`}) * 0 + on (instance, gpu, GPU_I_ID) group_left () max by (instance, gpu, GPU_I_ID) (gpu:dcgm_fi_dev_gpu_util:avg5m{`+gpuSel+`}) / 100`, "GPU utilisation").RefId("A"),
			instantTarget(`max by (instance, gpu, GPU_I_ID, GPU_I_PROFILE, id, workload) (gpuscope_gpu_container_memory_used_bytes{`+gpuSel+`}) * 0 + on (instance, id) group_left () max by (instance, id) (instance_id:container_cpu_saturation:ratio)`, "CPU saturation").RefId("B")).
			WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
			WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
				"excludeByName": map[string]any{"Time": true, "id": true},
				"indexByName":   map[string]any{"workload": 0, "instance": 1, "gpu": 2, "GPU_I_PROFILE": 3, "GPU_I_ID": 4, "Value #A": 5, "Value #B": 6},
				"renameByName": map[string]any{
					"workload": "Workload", "instance": "Node", "gpu": "GPU", "GPU_I_PROFILE": "MIG profile", "GPU_I_ID": "MIG instance",
					"Value #A": "GPU utilisation", "Value #B": "CPU saturation",
				},
			}})).
		WithPanel(tablePanel("Active alerts", "Alerts pending or firing now, from the built-in rule pack and your rule files (the ALERTS series).", unitCount,
			instantTarget(`ALERTS`, "{{alertname}}"))).
		WithRow(dashboard.NewRowBuilder("CPU next to GPU, per GPU").
			WithPanel(timeseriesPanel("GPU utilisation and the CPU saturation of its containers", "A GPU under 50% while a container using it runs above 80% of its CPU limit is input-bound (GPUStarvedByCPU): the data loader, not the GPU, sets the pace.", unitPercentUnit,
				target(`gpu:dcgm_fi_dev_gpu_util:avg5m{`+gpuSel+`} / 100`, "GPU util "+gpuInstanceLegend),
				target(`gpu:container_cpu_saturation:max{`+gpuSel+`}`, "CPU saturation of its containers "+gpuInstanceLegend)).
				Min(0).Thresholds(thresholds(0.5, 0.8)).Span(24))).
		WithRow(dashboard.NewRowBuilder("Memory leak, per GPU").
			WithPanel(timeseriesPanel("Framebuffer trend", "Used framebuffer, its 10-minute floor (ignores short allocations), the total, and where a linear trend of the last hour reaches in 4 hours (GPUMemoryExhaustionPredicted).", unitMiB,
				target(`gpu:dcgm_fi_dev_fb_used:avg1m{`+gpuSel+`}`, "used "+gpuInstanceLegend),
				target(`gpu:dcgm_fi_dev_fb_used:min10m{`+gpuSel+`}`, "floor "+gpuInstanceLegend),
				target(`gpu:dcgm_fi_dev_fb_used:predict_linear1h_4h{`+gpuSel+`}`, "in 4h "+gpuInstanceLegend),
				target(`gpu:dcgm_fi_dev_fb_total:max1m{`+gpuSel+`}`, "total "+gpuInstanceLegend)).
				Min(0)).
			WithPanel(timeseriesPanel("Framebuffer growth per 30 minutes", "Least-squares slope of used framebuffer over 30 minutes, in MiB per 30 minutes (a staircase of +2048 MiB every 30 minutes, the case study's leak, reads 2000-3000). GPUMemoryLeakSuspected wants the floor to rise over 256 MiB in each of three half-hours while utilisation stays steady.", unitMiB,
				target(`gpu:dcgm_fi_dev_fb_used:deriv30m_per30m{`+gpuSel+`}`, gpuInstanceLegend)).
				Thresholds(thresholds(256))))
}

// Package gpu is gpuscope's GPU collector: it reads NVIDIA GPUs through
// NVML, or takes its samples from another Backend (gpu/sim's simulated
// GPUs, made through Options.NewBackend), and publishes dcgm-exporter's
// metric contract, so that queries, alert rules and dashboards written for
// dcgm-exporter work unchanged, plus gpuscope_gpu_* metrics of its own:
// per-container GPU use joined to cAdvisor's container id, PCIe link
// limits, clock event reasons and the collector's health.
//
// The contract is ../shared/gpu-metrics.md. In short:
//
//   - DCGM_FI_* names, Prometheus types and HELP texts are those of
//     dcgm-exporter's default counters up to release 4.8.2, with its units
//     (MiB truncated to integers, MHz, W, mJ, %) and labels gpu, UUID,
//     pci_bus_id, device, modelName, Hostname (spelling configurable) and
//     DCGM_FI_DRIVER_VERSION. DCGM_FI_DEV_FB_TOTAL is added.
//     DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is typed counter as in 4.8.2 but
//     holds DCGM's rate (MB/s); use it as a gauge.
//   - DCGM_FI_PROF_* come from NVML GPM, on Hopper and newer only.
//   - A field the GPU does not support is omitted, and
//     gpuscope_gpu_field_supported says so.
//   - NVML is read on the collector's own ticker; Collect serves the last
//     complete sample and never calls the driver, so a hung driver cannot
//     hang a scrape. GPUs are read side by side, identification and XID
//     registration included: a GPU whose NVML call hangs is counted
//     (errors_total field="timeout"), served from its last sample for two
//     intervals, then without its series;
//     gpuscope_gpu_last_sample_timestamp_seconds says when each GPU last
//     answered (GPUMetricsStale). When the GPU count changes, each GPU
//     checks that its index still names it (UUID).
//   - A series that cannot be built (a label value that is not valid
//     UTF-8) costs itself only: it is counted in
//     gpuscope_gpu_collector_render_errors_total and logged once. Label
//     values from cgroup paths, container names and the driver are made
//     valid first (workload.LabelValue), as cAdvisor's are.
//   - XIDs come from NVML's events (the event set is rebuilt without lost
//     GPUs when its wait keeps failing) and, where gpuscope may read
//     /dev/kmsg, from the driver's lines in the kernel log (kmsg.go), one
//     XID counted once.
//   - Drivers from R450 on: NVML functions newer than that (memory v2 R510,
//     GPM R520, clock event reasons R535, ...) are looked up in the loaded
//     library first and never called where missing; their fields are then
//     unsupported. A driver that goes away (unloaded, upgraded) makes the
//     collector down and NVML is initialised again with backoff; after an
//     in-place upgrade that only a new process can read, Run ends with
//     ErrRestartNeeded (upgrade.go).
//   - A GPU without a framebuffer of its own (GB10, integrated GPUs) has
//     the system memory in DCGM_FI_DEV_FB_*, marked by
//     gpuscope_gpu_memory_unified.
//   - What the driver denies a non-root user (NO_PERMISSION: profiling with
//     NVreg_RestrictProfilingToAdminUsers=1, other users' processes) is
//     unsupported and logged once.
//
// Per-container attribution: a GPU process's container is the cgroup path
// of its pid as cAdvisor names containers (the cpu hierarchy on cgroup v1,
// the unified one on v2), so GPU and CPU use of a container join on id.
// Its series also carry cAdvisor's name and the workload labels
// (workload, runtime, image, compose_project, compose_service,
// slurm_job_id, slurm_step, slurm_user, user) from the workload.Cache that
// Options.Workloads shares with the cAdvisor collector, resolved from the
// metadata ContainerLookup returns: the same values as on the container's
// cAdvisor series, so they join on workload as well.
// The source document's input-bound case, a starved GPU whose container is
// CPU-saturated, is
//
//	gpuscope_gpu_container_sm_utilization_percent < 40
//	  and on(id)
//	rate(container_cpu_usage_seconds_total[5m])
//	  > on(id) 0.8 * container_spec_cpu_quota / container_spec_cpu_period
//
// Units: memory in bytes (the base unit), SM utilisation in percent
// (0-100) so that it shares a panel axis with DCGM_FI_DEV_GPU_UTIL,
// averaged over the sampling interval: NVML samples a process only in the
// driver's periods in which it used the GPU, so each sample counts for one
// period and the others as idle (process.go).
//
// Orphans: memory the driver lists for a pid that is gone (no /proc/<pid>,
// or state Z in its stat: a zombie its parent has not reaped) is in no
// container's series; from the second consecutive cycle it is found gone
// it is gpuscope_gpu_orphaned_memory_bytes and _processes, per GPU (per
// GPU instance on MIG) with the dcgm labels. False alarms are kept out
// three ways: per-process reads are off outside the host's pid namespace
// (there NVML lists only the processes gpuscope's namespace can see,
// under their pids in it, so a listed pid is never one of another
// namespace); an absent /proc/<pid> counts only while /proc/1 is visible
// (a /proc mounted hidepid hides other users' processes); and one cycle
// is not enough (a process that exits between the driver's list and the
// /proc read). Zombies are found when their start time is checked, every
// cycle for up to 8 cached pids.
//
// Processes, live: the same reads keep each process's detail, which the
// per-container sums drop: Collector.Processes returns the last cycle's
// (pid, real user named from the host's passwd, comm, command line,
// memory, SM share, container and workload) for /api/v1/gpu/processes
// and the pages, with no series per pid. Owner and command are read once
// per process, beside its cgroup. gpu.families.per_process, off by
// default, publishes them as gpuscope_gpu_process_* for those who want a
// history and accept a new series per pid (processlist.go).
//
// The PCIe saturation alert divides gpuscope_gpu_pcie_{tx,rx}_bytes_per_second
// (GPM's interval average where available, else NVML's 20 ms sample) by
// gpuscope_gpu_pcie_max_bandwidth_bytes_per_second.
package gpu

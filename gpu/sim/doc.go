// Package sim simulates NVIDIA GPUs for gpuscope's GPU collector: backend
// sim of the `gpu:` config section, and what `gpuscope serve --demo` runs.
// Each simulated GPU plays a scenario (training, a memory leak, a GPU
// starved by a CPU-saturated container, thermal throttling, XID 79, MIG
// mode, the hardware faults of hardware.go: ECC, row remapping, NVLink
// and PCIe errors, the power brake, a failed fan, a GPU gone from the
// device list, ...), so that every metric, alert rule and dashboard panel
// can be seen and tested without a GPU.
//
// The simulator is a gpu.Backend, made through gpu.Options.NewBackend: it
// reports what the NVML backend would have read, and the collector labels
// and renders it exactly as it does NVML's. The input-bound scenario can
// burn CPU in a real cgroup (gpu.sim.cpu_burn), so that cAdvisor sees the
// saturated container too.
package sim

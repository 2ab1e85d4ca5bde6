package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
)

// nvmlTimeout bounds reading NVML: opening it takes seconds per GPU where
// the driver is not kept loaded (no persistence mode), far less otherwise.
const nvmlTimeout = 30 * time.Second

// gpuChecks reads NVML as the collector would and reports the library,
// the driver, the GPUs, GPM and MIG.
func gpuChecks(ctx context.Context, o *Options) []Check {
	switch o.Config.GPU.Backend {
	case gpu.BackendNone:
		return []Check{ok("nvml", "GPU collection off (gpu.backend: none)")}
	case gpu.BackendSim:
		return []Check{ok("nvml", "simulated GPUs (gpu.backend: sim); NVML is not used")}
	}
	type result struct {
		f   *gpu.Facts
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := gpu.ReadFacts(o.NVML, o.NVIDIADevices)
		done <- result{f, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, nvmlTimeout)
	defer cancel()
	select {
	case r := <-done:
		checks := factChecks(o.Config.GPU.Config, r.f, r.err)
		if r.err == nil && len(r.f.GPUs) > 0 {
			checks = append(checks, kernelLogCheck(o))
		}
		return checks
	case <-ctx.Done():
		return []Check{fail("nvml", "NVML did not answer: "+ctx.Err().Error(),
			"the driver is hung or busy: check `nvidia-smi` and dmesg for XID errors")}
	}
}

// factChecks turns what NVML said into the nvml, driver, gpus, gpm and
// mig checks.
func factChecks(cfg gpu.Config, f *gpu.Facts, err error) []Check {
	if errors.Is(err, gpu.ErrNoDriver) {
		switch {
		case f.DeviceFile != "":
			return []Check{fail("nvml", fmt.Sprintf("NVIDIA GPU present (%s) but libnvidia-ml.so.1 cannot be loaded, GPU metrics off", f.DeviceFile),
				"install the driver's user-space libraries, or run the container with the NVIDIA runtime (docker run --gpus all)")}
		case cfg.Backend == gpu.BackendNVML:
			return []Check{fail("nvml", "no NVIDIA driver found, and gpu.backend is nvml: the GPU collector is down",
				"install the NVIDIA driver, or set gpu.backend: auto on machines without NVIDIA GPUs")}
		}
		return []Check{warn("nvml", "no NVIDIA driver found, GPU metrics off",
			"nothing to do on a machine without NVIDIA GPUs; otherwise install the NVIDIA driver (nvidia-smi must work)")}
	}
	if err != nil {
		return []Check{fail("nvml", "NVML: "+err.Error(), "check that `nvidia-smi` works as the same user; gpuscope needs read access to /dev/nvidia*")}
	}
	version := f.NVMLVersion
	if version == "" {
		version = "version unknown"
	}
	checks := []Check{ok("nvml", "libnvidia-ml.so.1 loaded, NVML "+version)}
	driver := "driver " + f.DriverVersion
	if cuda := gpu.CUDAVersionString(f.CUDAVersion); cuda != "" {
		driver += ", CUDA " + cuda
	}
	checks = append(checks, ok("driver", driver))
	checks = append(checks, gpusCheck(f))
	if len(f.GPUs) == 0 {
		return checks
	}
	return append(checks, gpmCheck(cfg, f), migCheck(f))
}

func gpusCheck(f *gpu.Facts) Check {
	if len(f.GPUs) == 0 {
		return warn("gpus", "NVML sees no GPU, GPU metrics off",
			"check `nvidia-smi -L`; in a container, give it the GPUs (docker run --gpus all)")
	}
	var models, broken []string
	count := map[string]int{}
	for _, g := range f.GPUs {
		if g.Err != nil {
			broken = append(broken, fmt.Sprintf("GPU %d: %v", g.Index, g.Err))
			continue
		}
		if count[g.Name] == 0 {
			models = append(models, g.Name)
		}
		count[g.Name]++
	}
	var seen []string
	for _, m := range models {
		seen = append(seen, fmt.Sprintf("%d× %s", count[m], m))
	}
	if len(broken) > 0 {
		return warn("gpus", fmt.Sprintf("%d of %d GPUs identified; %s", len(f.GPUs)-len(broken), len(f.GPUs), strings.Join(broken, "; ")),
			"a GPU that cannot be read is lost or in reset: check `nvidia-smi` and dmesg for XID errors; gpuscope retries it every 4 sampling cycles")
	}
	return ok("gpus", fmt.Sprintf("%d GPU%s: %s", len(f.GPUs), plural(len(f.GPUs)), strings.Join(seen, ", ")))
}

func gpmCheck(cfg gpu.Config, f *gpu.Facts) Check {
	if !cfg.Families.Profiling {
		return ok("gpm", "profiling metrics off (gpu.families.profiling: false)")
	}
	if !f.GPMLibrary {
		return warn("gpm", fmt.Sprintf("driver %s has no GPM calls: DCGM_FI_PROF_* absent", f.DriverVersion),
			"update the driver to R520 or later (GPM needs a Hopper or newer GPU as well)")
	}
	var with, without []int
	for _, g := range f.GPUs {
		if g.Err != nil {
			continue
		}
		if g.GPM {
			with = append(with, g.Index)
		} else {
			without = append(without, g.Index)
		}
	}
	switch {
	case len(without) == 0:
		return ok("gpm", fmt.Sprintf("GPM on every GPU (%s): DCGM_FI_PROF_* published", indexes(with)))
	case len(with) == 0:
		return warn("gpm", "no GPU has GPM: DCGM_FI_PROF_* (SM active, tensor, DRAM activity) absent",
			"GPM needs a Hopper or newer GPU; on older GPUs utilisation, memory and power are still published")
	}
	return warn("gpm", fmt.Sprintf("GPM on GPU %s, not on %s: DCGM_FI_PROF_* only for the first", indexes(with), indexes(without)),
		"GPM needs a Hopper or newer GPU; nothing to fix on the older ones")
}

func migCheck(f *gpu.Facts) Check {
	if !f.MIGLibrary {
		return ok("mig", fmt.Sprintf("driver %s has no MIG calls: GPUs are read whole", f.DriverVersion))
	}
	var capable, on []int
	for _, g := range f.GPUs {
		if g.MIGCapable {
			capable = append(capable, g.Index)
		}
		if g.MIGEnabled {
			on = append(on, g.Index)
		}
	}
	switch {
	case len(on) > 0:
		return ok("mig", fmt.Sprintf("MIG on on GPU %s: memory, engine activity and processes per GPU instance (GPU_I_ID)", indexes(on)))
	case len(capable) > 0:
		return ok("mig", fmt.Sprintf("MIG supported on GPU %s, off", indexes(capable)))
	}
	return ok("mig", "no GPU supports MIG")
}

// kernelLogHint says how to let gpuscope read the kernel log. The
// packaged unit closes it on purpose (ProtectKernelLogs=yes, no
// capability); reading it needs CAP_SYSLOG where kernel.dmesg_restrict=1
// (most distributions) and the device itself under DevicePolicy=closed.
const kernelLogHint = "run gpuscope as root or with CAP_SYSLOG. Packaged service: `systemctl edit gpuscope` and add [Service] ProtectKernelLogs=no, AmbientCapabilities=CAP_SYSLOG, CapabilityBoundingSet=CAP_SYSLOG, DeviceAllow=/dev/kmsg r. Docker: --device /dev/kmsg --cap-add SYSLOG"

// kernelLogCheck: whether gpuscope, run as this user, can read the kernel
// log, where the driver logs every XID: NVML may not deliver 79 (fallen
// off the bus) or 119 and 120 (GSP errors), and gpuscope reads them there
// too where it may.
func kernelLogCheck(o *Options) Check {
	const name = "xid-kernel-log"
	f, err := os.OpenFile(o.KernelLog, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return warn(name, fmt.Sprintf("%s cannot be read as uid %d (%v): XIDs NVML does not deliver (79 fallen off the bus, 119 and 120 GSP errors) are missed",
			o.KernelLog, o.Geteuid(), errors.Unwrap(err)), kernelLogHint)
	}
	f.Close()
	return ok(name, fmt.Sprintf("%s readable as uid %d: XIDs are read from the kernel log as well as from NVML (a running service may differ: see its gpuscope_gpu_collector_kernel_log_reading)", o.KernelLog, o.Geteuid()))
}

// indexes lists GPU indexes compactly: 0-3,5.
func indexes(ix []int) string {
	ix = slices.Clone(ix)
	slices.Sort(ix)
	var parts []string
	for i := 0; i < len(ix); {
		j := i
		for j+1 < len(ix) && ix[j+1] == ix[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(ix[i])+"-"+strconv.Itoa(ix[j]))
		} else {
			parts = append(parts, strconv.Itoa(ix[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

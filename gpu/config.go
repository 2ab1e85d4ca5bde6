package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// Backend names accepted in Config.Backend.
const (
	BackendAuto = "auto"
	BackendNVML = "nvml"
	BackendSim  = "sim"
	BackendNone = "none"
)

// Values accepted in Config.HostnameLabel.
const (
	HostnameLabelDCGM  = "Hostname" // dcgm-exporter up to 4.5.3-4.8.2
	HostnameLabelLower = "hostname" // dcgm-exporter 4.6.0-4.8.3 and later
	HostnameLabelNone  = "none"     // like dcgm-exporter --no-hostname
)

// Config is the `gpu:` section of gpuscope's config file but its `sim:`,
// which configures gpu/sim's simulator. Every field has a working default
// (DefaultConfig); the config package decodes into a copy of it with
// KnownFields(true).
type Config struct {
	// Backend selects where GPU data comes from: "auto" (NVML if
	// libnvidia-ml.so.1 loads, otherwise no GPUs and
	// gpuscope_gpu_collector_up 0), "nvml", "sim" (simulated GPUs) or "none".
	Backend string `yaml:"backend"`
	// Interval between two NVML reads. 0 means the global scrape interval;
	// the caller resolves it into Options.Interval.
	Interval model.Duration `yaml:"interval"`
	// Timeout is the deadline of one sampling cycle; a cycle still running
	// after it makes gpuscope_gpu_collector_up 0 while scrapes keep getting
	// the previous sample. 0 means the interval.
	Timeout model.Duration `yaml:"timeout"`
	// HostnameLabel is the name of the host label on DCGM series:
	// "Hostname" (default, dcgm-exporter <= 4.5.3-4.8.2 and the dashboards
	// written for it), "hostname" (dcgm-exporter 4.6+) or "none".
	HostnameLabel string `yaml:"hostname_label"`
	// Families switches optional metric families on and off.
	Families Families `yaml:"families"`
}

// Families are the optional metric families. The dcgm-exporter default
// counters are always exported.
type Families struct {
	// Profiling: DCGM_FI_PROF_* from NVML GPM (Hopper and newer; absent on
	// older GPUs). Default on.
	Profiling bool `yaml:"profiling"`
	// Processes: gpuscope_gpu_container_* (per-container GPU memory and SM
	// utilisation from the GPU's compute processes). Default on.
	Processes bool `yaml:"processes"`
	// ECC: DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL. Default on: the
	// hardware alerts read them (GPUUncorrectableECCError).
	ECC bool `yaml:"ecc"`
	// RetiredPages: DCGM_FI_DEV_RETIRED_{SBE,DBE,PENDING}. Default on
	// (GPURetiredPagesPending).
	RetiredPages bool `yaml:"retired_pages"`
	// Violations: DCGM_FI_DEV_*_VIOLATION throttling time in ns. Default off.
	Violations bool `yaml:"violations"`
	// ClockEvents: gpuscope_gpu_clock_event_active{reason}. Default on
	// (GPUPowerBrake, GPUHardwareSlowdown, GPUThermalSlowdown).
	ClockEvents bool `yaml:"clock_events"`
	// NVLinkErrors: DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL. Default on
	// (GPUNVLinkErrors).
	NVLinkErrors bool `yaml:"nvlink_errors"`
	// PerProcess: gpuscope_gpu_process_* (GPU memory and SM utilisation
	// per GPU process, labelled pid, user, comm and id). Default off:
	// every process that uses a GPU adds series of its own (a new pid is
	// a new series), which the per-container series and the live process
	// list (Collector.Processes) do without. Needs Processes, with which
	// the processes are read.
	PerProcess bool `yaml:"per_process"`
}

// DefaultConfig returns the config used when the file does not set a key.
func DefaultConfig() Config {
	return Config{
		Backend:       BackendAuto,
		HostnameLabel: HostnameLabelDCGM,
		// The families the built-in alerts read are on: ECC, retired
		// pages and NVLink errors come in the one batched field-value
		// request, clock events in one call; GPUs without them omit the
		// series.
		Families: Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, ClockEvents: true, NVLinkErrors: true},
	}
}

// Validate reports the first key with a bad value, named as in the file.
func (c Config) Validate() error {
	switch c.Backend {
	case BackendAuto, BackendNVML, BackendSim, BackendNone:
	default:
		return fmt.Errorf("gpu.backend: unknown backend %q (want auto, nvml, sim or none)", c.Backend)
	}
	if c.Interval < 0 {
		return fmt.Errorf("gpu.interval: must not be negative, got %s", c.Interval)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("gpu.timeout: must not be negative, got %s", c.Timeout)
	}
	// GPM computes its metrics from two samples more than 100 ms apart.
	if c.Interval > 0 && c.Interval <= model.Duration(100*time.Millisecond) {
		return fmt.Errorf("gpu.interval: %s is not above the minimum of 100ms", c.Interval)
	}
	if c.Families.PerProcess && !c.Families.Processes {
		return errors.New("gpu.families.per_process: needs gpu.families.processes, with which the GPU processes are read")
	}
	switch c.HostnameLabel {
	case HostnameLabelDCGM, HostnameLabelLower, HostnameLabelNone:
	default:
		return fmt.Errorf("gpu.hostname_label: unknown value %q (want Hostname, hostname or none)", c.HostnameLabel)
	}
	return nil
}

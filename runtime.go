package main

// This file is the Go runtime's own settings, as Prometheus's main sets
// them: GOMEMLIMIT from the cgroup's memory limit, GOGC from the config.

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/alecthomas/kingpin/v2"
	promconfig "github.com/prometheus/prometheus/config"

	"github.com/gpuscope/gpuscope/accounting"
)

// memLimitFlags are Prometheus's --auto-gomemlimit flags: the Go runtime's
// soft memory limit follows the memory limit of the process's cgroup (a
// systemd MemoryMax=, docker run --memory), so that the garbage collector
// works harder as the heap nears the limit instead of the kernel's OOM
// killer ending the process.
type memLimitFlags struct {
	auto  bool
	ratio float64
}

func addMemLimitFlags(c *kingpin.CmdClause) *memLimitFlags {
	f := &memLimitFlags{}
	c.Flag("auto-gomemlimit", "Set GOMEMLIMIT to --auto-gomemlimit.ratio of the memory limit of gpuscope's cgroup, or of the machine's memory without one. A GOMEMLIMIT environment variable wins.").
		Default("true").BoolVar(&f.auto)
	c.Flag("auto-gomemlimit.ratio", "The part of the cgroup's (or machine's) memory limit that GOMEMLIMIT is set to, above 0 and at most 1; the rest is left for memory the Go heap does not count (mmapped chunks and index, cgo, NVML).").
		Default("0.9").FloatVar(&f.ratio)
	return f
}

// applyMemLimit sets GOMEMLIMIT before anything large is allocated (the
// TSDB's WAL replay), and logs what it set and why.
func applyMemLimit(f *memLimitFlags, logger *slog.Logger) error {
	return setMemLimit(f, logger, memlimit.FromCgroup, memlimit.FromSystem)
}

func setMemLimit(f *memLimitFlags, logger *slog.Logger, fromCgroup, fromSystem memlimit.Provider) error {
	if math.IsNaN(f.ratio) || f.ratio <= 0 || f.ratio > 1 {
		return fmt.Errorf("--auto-gomemlimit.ratio must be above 0 and at most 1, got %g", f.ratio)
	}
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		// The runtime read it at start.
		logger.Info("GOMEMLIMIT set by the environment", "GOMEMLIMIT", v, "bytes", debug.SetMemoryLimit(-1))
		return nil
	}
	if !f.auto {
		logger.Info("GOMEMLIMIT not set (--no-auto-gomemlimit)")
		return nil
	}
	source := "cgroup"
	limit, err := fromCgroup()
	if err != nil {
		cgroupErr := err
		source = "system memory"
		if limit, err = fromSystem(); err != nil {
			logger.Warn("No memory limit found; GOMEMLIMIT not set", "cgroup_err", cgroupErr, "err", err)
			return nil
		}
	}
	goLimit := uint64(float64(limit) * f.ratio)
	if goLimit > math.MaxInt64 {
		goLimit = math.MaxInt64
	}
	debug.SetMemoryLimit(int64(goLimit))
	// "from", not "source": promslog's handler owns the source key.
	logger.Info("Set GOMEMLIMIT", "from", source, "limit", accounting.HumanBytes(float64(limit)), "ratio", f.ratio,
		"GOMEMLIMIT", accounting.HumanBytes(float64(goLimit)), "bytes", goLimit)
	return nil
}

// applyGoGC sets the garbage collector's target from the config's
// runtime.gogc, as Prometheus does on every (re)load: Prometheus's
// default there is 75 (or $GOGC when set), which keeps the heap of a
// large TSDB head well below Go's default 100. The value is written back
// to $GOGC so /api/v1/status/runtimeinfo reports it.
func applyGoGC(c *promconfig.Config, logger *slog.Logger) {
	old := debug.SetGCPercent(c.Runtime.GoGC)
	if old != c.Runtime.GoGC {
		logger.Info("Updated GOGC", "old", old, "new", c.Runtime.GoGC)
	}
	if c.Runtime.GoGC >= 0 {
		os.Setenv("GOGC", strconv.Itoa(c.Runtime.GoGC))
	} else {
		os.Setenv("GOGC", "off")
	}
}

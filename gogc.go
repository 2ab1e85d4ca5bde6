package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"

	promconfig "github.com/prometheus/prometheus/config"
)

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

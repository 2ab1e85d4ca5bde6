package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// Every goroutine the collector and the simulator start (cycles, CPU
// burner waiters) must be gone when its test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var bg = context.Background()

// testOptions are a GPU collector's options with those of its simulator.
type testOptions struct {
	gpu.Options
	Sim        Config
	CgroupRoot string
}

func simOptions(clock *gputest.Clock, gpus ...GPU) testOptions {
	cfg := gpu.DefaultConfig()
	cfg.Backend = gpu.BackendSim
	sim := DefaultConfig()
	sim.Count = max(len(gpus), 1)
	sim.GPUs = gpus
	return testOptions{Options: gpu.Options{Config: cfg, Now: clock.Now, Interval: 15 * time.Second}, Sim: sim}
}

// newCollector builds a collector of o whose backend is the simulator it
// returns too, as the wiring in package main does.
func newCollector(o testOptions) (*gpu.Collector, *Backend, error) {
	var sim *Backend
	o.NewBackend = func(env *gpu.BackendEnv) (gpu.Backend, error) {
		var err error
		sim, err = New(Options{Config: o.Sim, CgroupRoot: o.CgroupRoot}, env)
		if err != nil {
			return nil, err
		}
		return sim, nil
	}
	c, err := gpu.New(o.Options)
	return c, sim, err
}

// testCollector builds a collector for synchronous cycles (sampleOnce);
// the simulator is closed when the test ends.
func testCollector(t testing.TB, o testOptions) (*gpu.Collector, *prometheus.Registry) {
	t.Helper()
	if o.Hostname == "" {
		o.Hostname = "gpu-node-1"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = t.TempDir()
	}
	c, sim, err := newCollector(o)
	require.NoError(t, err)
	reg := newRegistry(t, c)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	return c, reg
}

// sampleOnce runs one cycle of c.
func sampleOnce(t testing.TB, c *gpu.Collector) {
	t.Helper()
	require.NoError(t, c.SampleOnce(bg))
}

func newRegistry(t testing.TB, c *gpu.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	return reg
}

// writeProc creates <root>/<pid>/cgroup and a stat with start time
// 1000+pid.
func writeProc(t testing.TB, root string, pid int, content string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644))
	stat := fmt.Sprintf("%d (python3 (x) y) S 1 %d %d 0 -1 4194560 1234 0 0 0 5 6 0 0 20 0 12 0 %d 2000000000 5000 18446744073709551615\n", pid, pid, pid, 1000+pid)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
}

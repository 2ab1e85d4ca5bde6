package gpu

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscope/gpuscope/workload"
)

// Run: go test -run '^$' -bench . -benchmem -count 6 ./gpu/
//
// cpu-ns/op is the process's user+system CPU time per operation
// (getrusage), which includes the garbage collector's; ns/op is wall time.

// BenchmarkNVMLCycle is one sampling cycle of an 8-GPU machine with 32
// compute processes per GPU (in 4 containers each) against go-nvml's mock,
// so the driver's own time is not in it. The mock's bookkeeping (it
// records every call) is, which makes this an upper bound.
func BenchmarkNVMLCycle(b *testing.B) {
	const gpus, procsPerGPU = 8, 32
	m := newMockMachine(b, gpus)
	proc := b.TempDir()
	for g := range gpus {
		procs := make([]nvml.ProcessInfo, procsPerGPU)
		utils := make([]nvml.ProcessUtilizationSample, procsPerGPU)
		for p := range procsPerGPU {
			pid := 10000 + g*procsPerGPU + p
			writeProc(b, proc, pid, fmt.Sprintf("4:cpu,cpuacct:/system.slice/docker-%d-%d.scope\n0::/system.slice/docker-%d-%d.scope\n", g, p%4, g, p%4))
			procs[p] = nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: uint64(p+1) << 28}
			utils[p] = nvml.ProcessUtilizationSample{Pid: uint32(pid), SmUtil: uint32(p % 7)}
		}
		m.procs[g] = procs
		m.devs[g].GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			for i := range utils {
				utils[i].TimeStamp = lastSeen + uint64(i) + 1
			}
			return utils, nvml.SUCCESS
		}
	}
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.ProcRoot = proc
	o.ContainerLookup = func(string) (workload.Metadata, bool) { return workload.Metadata{Name: "c", Image: "img"}, true }
	c, _ := testCollector(b, o)
	c.collectOnce(bg) // open NVML, fill the pid cache
	benchCPU(b, func() {
		clock.Advance(15 * time.Second)
		c.collectOnce(bg)
	})
	s := c.snap.Load().s
	if len(s.gpus) != gpus || len(s.gpus[0].containers) != 4 || len(s.errs) != 0 {
		b.Fatalf("unexpected sample: %d GPUs, %d containers, errors %v", len(s.gpus), len(s.gpus[0].containers), s.errs)
	}
}

// BenchmarkCollect is what a scrape of /metrics/gpu costs the collector
// for the 8-GPU machine: the first scrape of a sample builds its metrics,
// later scrapes of the same sample reuse them.
func BenchmarkCollect(b *testing.B) {
	m := newMockMachine(b, 8)
	clock := newFakeClock()
	c, _ := testCollector(b, mockOptions(m, clock))
	// A plain registry, as the caller serves /metrics/gpu with.
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		b.Fatal(err)
	}
	c.collectOnce(bg)
	clock.Advance(15 * time.Second)
	c.collectOnce(bg)
	s := c.snap.Load().s
	b.Run("first-scrape", func(b *testing.B) {
		benchCPU(b, func() {
			c.snap.Store(&snapshot{s: s})
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("cached", func(b *testing.B) {
		benchCPU(b, func() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchCPU runs f b.N times and reports CPU time per run next to wall time.
func benchCPU(b *testing.B, f func()) {
	b.Helper()
	b.ReportAllocs()
	before := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		f()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package sim

import (
	"syscall"
	"testing"
	"time"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// Run: go test -run '^$' -bench . -benchmem -count 6 ./gpu/sim/
//
// cpu-ns/op is the process's user+system CPU time per operation
// (getrusage), which includes the garbage collector's; ns/op is wall time.

// BenchmarkSimCycle64 is one cycle of 64 simulated GPUs running every
// scenario.
func BenchmarkSimCycle64(b *testing.B) {
	clock := gputest.NewClock()
	o := simOptions(clock)
	o.Sim.Count = 64
	for i := range 64 {
		o.Sim.GPUs = append(o.Sim.GPUs, GPU{Scenario: scenarios[i%len(scenarios)]})
	}
	c, _ := testCollector(b, o)
	sampleOnce(b, c)
	benchCPU(b, func() {
		clock.Advance(15 * time.Second)
		sampleOnce(b, c)
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

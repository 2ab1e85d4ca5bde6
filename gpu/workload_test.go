package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestContainerWorkloadLabels: the per-container GPU series carry the
// workload labels of the cache they share with cAdvisor's collector
// (gputest.WorkloadCases).
func TestContainerWorkloadLabels(t *testing.T) {
	for _, tc := range gputest.WorkloadCases() {
		t.Run(tc.Name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			clock := newFakeClock()
			proc := t.TempDir()
			writeProc(t, proc, 100, "0::"+gputest.DockerTrain+"\n")
			writeProc(t, proc, 101, "0::"+gputest.SlurmStep+"\n")
			m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
			m.procs[1] = []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 1 << 30}}
			o := mockOptions(m, clock)
			o.ProcRoot = proc
			o.ContainerLookup, o.Workloads = tc.Lookup, tc.Workloads
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			gputest.RequireWorkloads(t, reg, tc.Want)
		})
	}
}

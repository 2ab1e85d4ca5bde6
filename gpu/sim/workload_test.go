package sim

import (
	"testing"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestSimContainerWorkloadLabels: a simulated GPU's per-container series
// carry the workload labels of the cache they share with cAdvisor's
// collector, as the NVML backend's do (gputest.WorkloadCases).
func TestSimContainerWorkloadLabels(t *testing.T) {
	for _, tc := range gputest.WorkloadCases() {
		t.Run(tc.Name, func(t *testing.T) {
			o := simOptions(gputest.NewClock(),
				GPU{Scenario: ScenarioTraining, Container: gputest.DockerTrain},
				GPU{Scenario: ScenarioTraining, Container: gputest.SlurmStep},
			)
			o.ContainerLookup, o.Workloads = tc.Lookup, tc.Workloads
			c, reg := testCollector(t, o)
			sampleOnce(t, c)
			gputest.RequireWorkloads(t, reg, tc.Want)
		})
	}
}

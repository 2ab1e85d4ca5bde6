package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

const dockerTrain = "/system.slice/docker-3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708.scope"

// trainMetadata is what cAdvisor's docker handler reports of dockerTrain.
var trainMetadata = workload.Metadata{
	Name:    "shop-train-1",
	Image:   "nvcr.io/nvidia/pytorch:24.01-py3",
	Labels:  map[string]string{workload.ComposeProjectLabel: "shop", workload.ComposeServiceLabel: "train"},
	Runtime: workload.RuntimeDocker,
}

// wantTrain are the workload labels of dockerTrain, as cAdvisor's side
// resolves them from trainMetadata.
var wantTrain = map[string]string{
	"workload": "shop/train", "runtime": "docker", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
	"compose_project": "shop", "compose_service": "train",
	"slurm_job_id": "", "slurm_step": "", "slurm_user": "",
}

// TestContainerWorkloadLabels: the per-container GPU series carry the
// workload labels of the cache they share with cAdvisor's collector: the
// identity cAdvisor's side resolved from the container's metadata
// (whether this collector's lookup finds the container or not), else one
// resolved from the path alone.
func TestContainerWorkloadLabels(t *testing.T) {
	step := "/slurm/uid_1000/job_42/step_0"
	for _, tc := range []struct {
		name   string
		lookup func(string) (workload.Metadata, bool)
		seed   bool // cAdvisor's side has labelled dockerTrain
		want   map[string]map[string]string
	}{
		{
			name:   "lookup finds the container",
			lookup: func(id string) (workload.Metadata, bool) { return trainMetadata, id == dockerTrain },
			want:   map[string]map[string]string{dockerTrain: wantTrain},
		},
		{
			name: "cAdvisor's side resolved it first",
			seed: true,
			want: map[string]map[string]string{dockerTrain: wantTrain},
		},
		{
			name: "known by path only",
			want: map[string]map[string]string{dockerTrain: {
				"workload": "docker-3f2a1b4c5d6e", "runtime": "docker", "image": "",
				"compose_project": "", "compose_service": "",
				"slurm_job_id": "", "slurm_step": "", "slurm_user": "",
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]map[string]string{step: {
				"workload": "job 42.0", "runtime": "slurm", "image": "",
				"compose_project": "", "compose_service": "",
				"slurm_job_id": "42", "slurm_step": "0", "slurm_user": "1000",
			}}
			for id, labels := range tc.want {
				want[id] = labels
			}
			cache := workload.NewCache(nil)
			if tc.seed {
				// What cAdvisor's ContainerLabelsFunc does on a scrape.
				cache.Get(dockerTrain, trainMetadata)
			}

			t.Run("sim", func(t *testing.T) {
				o := simOptions(newFakeClock(),
					SimGPU{Scenario: ScenarioTraining, Container: dockerTrain},
					SimGPU{Scenario: ScenarioTraining, Container: step},
				)
				o.ContainerLookup, o.Workloads = tc.lookup, cache
				c, reg := testCollector(t, o)
				c.collectOnce(bg)
				requireWorkloads(t, reg, want)
			})

			t.Run("nvml", func(t *testing.T) {
				m := newMockMachine(t, 2)
				clock := newFakeClock()
				proc := t.TempDir()
				writeProc(t, proc, 100, "0::"+dockerTrain+"\n")
				writeProc(t, proc, 101, "0::"+step+"\n")
				m.procs[0] = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 1 << 30}}
				m.procs[1] = []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 1 << 30}}
				o := mockOptions(m, clock)
				o.ProcRoot = proc
				o.ContainerLookup, o.Workloads = tc.lookup, cache
				c, reg := testCollector(t, o)
				c.collectOnce(bg)
				requireWorkloads(t, reg, want)
			})
		})
	}
}

// requireWorkloads requires each per-container series of reg to carry the
// workload labels want gives its id, and each id of want to have series.
func requireWorkloads(t *testing.T, reg prometheus.Gatherer, want map[string]map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, name := range []string{"gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_processes", "gpuscope_gpu_container_sm_utilization_percent"} {
		for _, s := range gather(t, reg, name) {
			id := s.labels["id"]
			require.Contains(t, want, id, "%s%v", name, s.labels)
			seen[id] = true
			for _, l := range workload.LabelNames() {
				v, ok := s.labels[l]
				require.True(t, ok, "%s of %s has label %s", name, id, l)
				require.Equal(t, want[id][l], v, "%s of %s: label %s", name, id, l)
			}
		}
	}
	require.Len(t, seen, len(want), "every container has series")
}

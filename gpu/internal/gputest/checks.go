package gputest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// The checks below are what a GPU's series must look like whichever
// backend reports it: the NVML backend's tests run them against go-nvml's
// mock, gpu/sim's against simulated GPUs.

// LostAndBack runs cycles of a two-GPU collector serving reg and checks
// GPU 1 is present, lost (its series gone, one device error per cycle,
// GPU 0 untouched, the collector up, one log line) and back (series
// again, one log line). cycle runs one cycle: the first before the loss,
// three while GPU 1 is lost, one after.
func LostAndBack(t *testing.T, logs fmt.Stringer, cycle func(), reg prometheus.Gatherer) {
	t.Helper()
	gpu0, gpu1 := map[string]string{"gpu": "0"}, map[string]string{"gpu": "1"}
	device1 := map[string]string{"gpu": "1", "field": "device"}

	cycle() // before
	MustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1)
	require.Empty(t, Gather(t, reg, "gpuscope_gpu_collector_errors_total"))

	for i := 1; i <= 3; i++ { // lost
		cycle()
		for _, name := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} {
			_, ok := Lookup(t, reg, name, gpu1)
			require.False(t, ok, "%s of the lost GPU is served", name)
		}
		// XID 79 stays visible: it is what the GPU last said.
		require.Equal(t, 79.0, MustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "1", "err_code": "79", "err_msg": "GPU has fallen off the bus"}))
		require.Equal(t, 1.0, MustLookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "1", "err_code": "79"}))
		for _, s := range Gather(t, reg, "gpuscope_gpu_field_supported") {
			if s.Labels["gpu"] == "1" {
				require.Equal(t, "DCGM_FI_DEV_XID_ERRORS", s.Labels["field"], "only the XID field of the lost GPU is reported")
			}
		}
		MustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
		require.Equal(t, float64(i), MustLookup(t, reg, "gpuscope_gpu_collector_errors_total", device1))
		require.Len(t, Gather(t, reg, "gpuscope_gpu_collector_errors_total"), 1, "only the device error is counted")
		require.Equal(t, 1.0, MustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
	}

	cycle() // back
	MustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu1)
	require.Equal(t, 79.0, MustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", gpu1), "the last XID never resets")
	require.Equal(t, 3.0, MustLookup(t, reg, "gpuscope_gpu_collector_errors_total", device1), "the counter keeps its count")

	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "GPU read failed"), out)
	require.Contains(t, out, `gpu=1 field=device err=ERROR_GPU_IS_LOST`)
	require.Equal(t, 1, strings.Count(out, "GPU read works again"), out)
}

// GonePID is a pid that never exists: Linux gives pids below pid_max, at
// most PID_MAX_LIMIT (1<<22 on 64-bit).
const GonePID = 1 << 22

// ProcessVanished runs three cycles of a one-GPU collector serving reg,
// whose GPU's one process is GonePID, and checks that the GPU has no
// per-container series but its other series; that in the first cycle the
// failed read counts in gpuscope_gpu_collector_errors_total{gpu,
// field="gpuscope_gpu_container_memory_used_bytes"} (it may have just
// exited); and that from the second its memory is orphaned
// (gpuscope_gpu_orphaned_memory_bytes).
func ProcessVanished(t *testing.T, cycle func(), reg prometheus.Gatherer) {
	t.Helper()
	for range 3 {
		cycle()
	}
	for _, name := range []string{"gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_sm_utilization_percent", "gpuscope_gpu_container_processes"} {
		require.Empty(t, Gather(t, reg, name), name)
	}
	require.Equal(t, 1.0, MustLookup(t, reg, "gpuscope_gpu_collector_errors_total",
		map[string]string{"gpu": "0", "field": "gpuscope_gpu_container_memory_used_bytes"}), "one failed read, in the first cycle")
	require.Equal(t, 1.0, MustLookup(t, reg, "gpuscope_gpu_orphaned_processes", map[string]string{"gpu": "0"}))
	require.Positive(t, MustLookup(t, reg, "gpuscope_gpu_orphaned_memory_bytes", map[string]string{"gpu": "0"}))
	MustLookup(t, reg, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0"})
	require.Equal(t, 1.0, MustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
}

// DockerTrain is the container of a docker compose service, as cAdvisor
// names it.
const DockerTrain = "/system.slice/docker-3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708.scope"

// SlurmStep is a Slurm job step's cgroup.
const SlurmStep = "/slurm/uid_1000/job_42/step_0"

// trainMetadata is what cAdvisor's docker handler reports of DockerTrain.
var trainMetadata = workload.Metadata{
	Name:    "shop-train-1",
	Image:   "nvcr.io/nvidia/pytorch:24.01-py3",
	Labels:  map[string]string{workload.ComposeProjectLabel: "shop", workload.ComposeServiceLabel: "train"},
	Runtime: workload.RuntimeDocker,
}

// WorkloadCase is a way the GPU collector learns the workload labels of
// DockerTrain and SlurmStep, a GPU process running in each.
type WorkloadCase struct {
	Name string
	// Lookup is the collector's ContainerLookup; Workloads its cache,
	// shared with cAdvisor's collector.
	Lookup    func(string) (workload.Metadata, bool)
	Workloads *workload.Cache
	// Want are the workload labels of each container's series, by id.
	Want map[string]map[string]string
}

// WorkloadCases are the per-container GPU series' workload labels, from
// the cache they share with cAdvisor's collector: the identity cAdvisor's
// side resolved from the container's metadata (whether the GPU
// collector's lookup finds the container or not), else one resolved from
// the path alone. Each case has a cache of its own.
func WorkloadCases() []WorkloadCase {
	// wantTrain are the workload labels of DockerTrain, as cAdvisor's
	// side resolves them from trainMetadata.
	wantTrain := map[string]string{
		"workload": "shop/train", "runtime": "docker", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
		"compose_project": "shop", "compose_service": "train",
		"slurm_job_id": "", "slurm_step": "", "slurm_user": "", "user": "",
	}
	var cases []WorkloadCase
	for _, tc := range []struct {
		name   string
		lookup func(string) (workload.Metadata, bool)
		seed   bool // cAdvisor's side has labelled DockerTrain
		want   map[string]map[string]string
	}{
		{
			name:   "lookup finds the container",
			lookup: func(id string) (workload.Metadata, bool) { return trainMetadata, id == DockerTrain },
			want:   map[string]map[string]string{DockerTrain: wantTrain},
		},
		{
			name: "cAdvisor's side resolved it first",
			seed: true,
			want: map[string]map[string]string{DockerTrain: wantTrain},
		},
		{
			name: "known by path only",
			want: map[string]map[string]string{DockerTrain: {
				"workload": "docker-3f2a1b4c5d6e", "runtime": "docker", "image": "",
				"compose_project": "", "compose_service": "",
				"slurm_job_id": "", "slurm_step": "", "slurm_user": "", "user": "",
			}},
		},
	} {
		want := map[string]map[string]string{SlurmStep: {
			"workload": "job 42.0", "runtime": "slurm", "image": "",
			"compose_project": "", "compose_service": "",
			"slurm_job_id": "42", "slurm_step": "0", "slurm_user": "1000", "user": "1000",
		}}
		for id, labels := range tc.want {
			want[id] = labels
		}
		cache := workload.NewCache(nil)
		if tc.seed {
			// What cAdvisor's ContainerLabelsFunc does on a scrape.
			cache.Get(DockerTrain, trainMetadata)
		}
		cases = append(cases, WorkloadCase{Name: tc.name, Lookup: tc.lookup, Workloads: cache, Want: want})
	}
	return cases
}

// RequireWorkloads requires each per-container series of reg to carry the
// workload labels want gives its id, and each id of want to have series.
func RequireWorkloads(t *testing.T, reg prometheus.Gatherer, want map[string]map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, name := range []string{"gpuscope_gpu_container_memory_used_bytes", "gpuscope_gpu_container_processes", "gpuscope_gpu_container_sm_utilization_percent"} {
		for _, s := range Gather(t, reg, name) {
			id := s.Labels["id"]
			require.Contains(t, want, id, "%s%v", name, s.Labels)
			seen[id] = true
			for _, l := range workload.LabelNames() {
				v, ok := s.Labels[l]
				require.True(t, ok, "%s of %s has label %s", name, id, l)
				require.Equal(t, want[id][l], v, "%s of %s: label %s", name, id, l)
			}
		}
	}
	require.Len(t, seen, len(want), "every container has series")
}

package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/sim"
	"github.com/gpuscope/gpuscope/workload"
)

// TestNodeCollectorsShareWorkloads: the node's cAdvisor and GPU
// collectors, as serve and agent build them, give a container the same
// workload labels, so the GPU series of a Slurm step or a systemd unit
// join its cAdvisor series on them. The containers are hand-made cgroups
// under a parent of the test's own; the sim's GPU processes run in them.
func TestNodeCollectorsShareWorkloads(t *testing.T) {
	n := time.Now().UnixNano() % 1e6
	parent := fmt.Sprintf("/gpuscope-wl-join-%d", n)
	job := fmt.Sprint(200000 + n)
	step := parent + "/slurm/uid_1000/job_" + job + "/step_0"
	unit := parent + "/system.slice/gpuscope-test-" + fmt.Sprint(n) + ".service"
	session := parent + "/user.slice/user-1000.slice/session-" + fmt.Sprint(n) + ".scope"
	makeCgroupPath(t, step)
	makeCgroupPath(t, unit)
	makeCgroupPath(t, session)

	cfg := config.Default(nil)
	// The host's passwd as the workloads: section names it.
	cfg.Workloads.PasswdFile = filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(cfg.Workloads.PasswdFile, []byte("alice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644))
	// The in-process tests' interval: cAdvisor has one per process, and the
	// first collector of the process sets it (scrape/cadvisor/processwide.go).
	cfg.Cadvisor.HousekeepingInterval = model.Duration(time.Second)
	cfg.GPU.Config, cfg.GPU.Sim = gpu.DefaultConfig(), sim.DefaultConfig()
	cfg.GPU.Backend = gpu.BackendSim
	cfg.GPU.Interval = model.Duration(150 * time.Millisecond) // above GPM's 100 ms minimum
	cfg.GPU.Families.Processes = true
	cfg.GPU.Sim.GPUs = []sim.GPU{
		{Scenario: sim.ScenarioTraining, Container: step},
		{Scenario: sim.ScenarioTraining, Container: unit},
		{Scenario: sim.ScenarioTraining, Container: session},
	}
	c, err := newNodeCollectors(cfg, "node-1", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- c.cadvisor.Run(ctx) }()
	go func() { done <- c.gpu.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
	gpuReg := prometheus.NewRegistry()
	gpuReg.MustRegister(c.gpu)

	for _, tc := range []struct {
		id   string
		want map[string]string
	}{
		{step, map[string]string{"workload": "job " + job + ".0", "runtime": "slurm", "slurm_job_id": job, "slurm_step": "0", "slurm_user": "1000", "user": "alice"}},
		{unit, map[string]string{"workload": filepath.Base(unit), "runtime": "systemd", "user": ""}},
		{session, map[string]string{"workload": "alice: session-" + fmt.Sprint(n), "runtime": "systemd", "user": "alice"}},
	} {
		var cadvisorLabels, gpuLabels map[string]string
		require.Eventually(t, func() bool {
			cadvisorLabels = seriesLabels(t, c.cadvisor.Gatherer(), "container_memory_usage_bytes", tc.id)
			gpuLabels = seriesLabels(t, gpuReg, "gpuscope_gpu_container_memory_used_bytes", tc.id)
			return cadvisorLabels != nil && gpuLabels != nil
		}, 20*time.Second, 50*time.Millisecond, "%s in both collectors", tc.id)
		for _, name := range append(workload.LabelNames(), "id", "name") {
			// An empty label is an absent one, as Prometheus stores them.
			require.Equal(t, cadvisorLabels[name], gpuLabels[name], "label %s of %s", name, tc.id)
		}
		for name, v := range tc.want {
			require.Equal(t, v, gpuLabels[name], "label %s of %s", name, tc.id)
		}
	}
}

// seriesLabels are the labels of the first series of metric in g whose
// id is id, nil if there is none.
func seriesLabels(t *testing.T, g prometheus.Gatherer, metric, id string) map[string]string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := labelsOf(m); l["id"] == id {
				return l
			}
		}
	}
	return nil
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// makeCgroupPath creates the cgroup at path and its missing parents in
// the hierarchies cAdvisor reads a container's memory from (memory on v1,
// the unified one on v2), removing what it created when the test ends;
// it skips where the kernel refuses (not root).
func makeCgroupPath(t *testing.T, path string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no cgroup filesystem: %v", err)
	}
	bases := []string{"/sys/fs/cgroup"}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		bases = nil
		for _, c := range []string{"cpu", "cpuacct", "memory"} {
			if p, err := filepath.EvalSymlinks(filepath.Join("/sys/fs/cgroup", c)); err == nil && !slices.Contains(bases, p) {
				bases = append(bases, p)
			}
		}
	}
	for _, b := range bases {
		var created []string
		for d := path; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(b, d)); err == nil {
				break
			}
			created = append(created, filepath.Join(b, d))
		}
		slices.Reverse(created)
		for _, d := range created {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				t.Skipf("kernel refused to create cgroup %s (tests need root): %v", d, err)
			}
			t.Cleanup(func() {
				// Children first: cleanups run last in, first out.
				for i := 0; i < 50 && os.Remove(d) != nil && !errors.Is(statErr(d), os.ErrNotExist); i++ {
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
	}
}

func statErr(p string) error { _, err := os.Stat(p); return err }

//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// gpuJoinConfig runs one simulated GPU whose process is a real one (pid
// %d), cAdvisor asking the test's private dockerd (%s) for names, at 1 s
// scrapes, users named from the passwd file %s.
const gpuJoinConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor:
  docker_endpoint: %s
gpu:
  backend: sim
  sim:
    count: 1
    gpus: [{scenario: training, pid: %d}]
workloads:
  passwd_file: %s
`

var passwdFixture = apptest.PasswdFixture

// TestGPUJoinDocker: GPU use joined to a real Docker container. A
// simulated GPU is given the pid of a busybox container's process (as
// docker inspect reports it); gpuscope finds that process's cgroup as it
// finds a real GPU process's, and gpuscope_gpu_container_memory_used_bytes
// carries the container's name, runtime and image, with the same id as
// cAdvisor's series of the container. The container runs with --user
// 1000: both carry user="alice", the host passwd's name of the uid its
// init runs as, and /api/v1/gpu/processes lists the process with its
// user, command and container. Once the container is removed the GPU's
// per-container series go stale and the failed read is counted, as for a
// real GPU process that vanished.
func TestGPUJoinDocker(t *testing.T) {
	t.Parallel()
	pkgtest.Require(t, true, "dockerd", "docker", "busybox")
	d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{})
	img := d.BusyboxImage(t, "gpuscope-e2e/gpujoin:1")
	const name = "llama-train"
	containerID := strings.TrimSpace(d.Run(t, "run", "-d", "--network", "none", "--user", "1000:1000", "--name", name, img, "sleep", "3600"))
	require.Regexp(t, "^[0-9a-f]{64}$", containerID)
	pid, err := strconv.Atoi(d.Inspect(t, name, "{{.State.Pid}}"))
	require.NoError(t, err)
	require.Positive(t, pid)

	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), fmt.Sprintf(gpuJoinConfig, d.Host(), pid, passwdFixture(t))))

	gpuQuery := fmt.Sprintf(`gpuscope_gpu_container_memory_used_bytes{workload=%q,runtime="docker",image=%q,user="alice"}`, name, img)
	var gpuSeries *model.Sample
	started := time.Now()
	eventually(t, 30*time.Second, "the GPU's use under the container's name and image", func() error {
		v, err := p.instant(gpuQuery)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			all, _ := p.instant(`gpuscope_gpu_container_memory_used_bytes`)
			return fmt.Errorf("%s: %d series (all: %v)", gpuQuery, len(v), all)
		}
		gpuSeries = v[0]
		return nil
	})
	t.Logf("after %s: %v", time.Since(started).Round(time.Millisecond), gpuSeries)
	m := gpuSeries.Metric
	require.Equal(t, model.LabelValue("0"), m["gpu"])
	require.Contains(t, string(m["id"]), containerID, "the container's cgroup")
	require.Equal(t, model.LabelValue(name), m["name"])
	require.Greater(t, float64(gpuSeries.Value), 50e9, "the training scenario's framebuffer use (over 70%% of 80 GB)")

	// cAdvisor's series of the container carry the same id and workload
	// (its job's first scrape with the container may come after the GPU
	// job's: wait for it).
	cadvisorQuery := fmt.Sprintf(`container_memory_working_set_bytes{workload=%q,runtime="docker",image=%q,user="alice"}`, name, img)
	eventually(t, 30*time.Second, "cAdvisor's series of the container under its name and image", func() error {
		v, err := p.instant(cadvisorQuery)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("%s: %v", cadvisorQuery, v)
		}
		if v[0].Metric["id"] != m["id"] {
			return fmt.Errorf("cAdvisor's id %s, the GPU series' %s", v[0].Metric["id"], m["id"])
		}
		return nil
	})
	v, err := p.instant(fmt.Sprintf(`last_over_time(gpuscope_gpu_container_sm_utilization_percent{workload=%q,id=%q}[5s])`, name, m["id"]))
	require.NoError(t, err)
	require.Len(t, v, 1, "the SM share under the same container")

	// The process, live.
	code, body := p.get("/api/v1/gpu/processes?gpu=0")
	require.Equal(t, 200, code, body)
	var env struct {
		Data gpu.ProcessList `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &env), body)
	require.Len(t, env.Data.GPUs, 1, body)
	require.Len(t, env.Data.GPUs[0].Processes, 1, body)
	proc := env.Data.GPUs[0].Processes[0]
	require.Equal(t, uint32(pid), proc.PID)
	require.Equal(t, "1000", proc.UID)
	require.Equal(t, "alice", proc.User)
	require.Equal(t, "sleep 3600", proc.Command)
	require.NotNil(t, proc.Container, body)
	require.Equal(t, string(m["id"]), proc.Container.ID)
	require.Equal(t, name, proc.Container.Workload)
	require.Equal(t, "alice", proc.Container.User)
	// No series per process unless gpu.families.per_process says so.
	v, err = p.instant(`{__name__=~"gpuscope_gpu_process_.*"}`)
	require.NoError(t, err)
	require.Empty(t, v)

	// The process goes with its container.
	d.Run(t, "rm", "-f", name)
	eventually(t, 30*time.Second, "the GPU's per-container series stale and the failed read counted", func() error {
		v, err := p.instant(`gpuscope_gpu_container_memory_used_bytes`)
		if err != nil {
			return err
		}
		if len(v) != 0 {
			return fmt.Errorf("still %v", v)
		}
		v, err = p.instant(`gpuscope_gpu_collector_errors_total{gpu="0",field="gpuscope_gpu_container_memory_used_bytes"} > 0`)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("no failed per-container read counted")
		}
		return nil
	})
	// The GPU itself is still read.
	v, err = p.instant(`gpuscope_gpu_collector_up`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, 1.0, float64(v[0].Value))
}

package app_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// badCgroupConfig runs two simulated GPUs, the first one's process a real
// one (pid %d), at 1 s scrapes.
const badCgroupConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
gpu:
  backend: sim
  sim:
    count: 2
    gpus: [{scenario: training, pid: %d}, {scenario: training}]
`

// TestServeInvalidUTF8Cgroup is R1 of the second GPU review end to end: a
// GPU process in a cgroup whose name is not valid UTF-8 (any user with a
// delegated cgroup subtree can mkdir one) made every GPU's series vanish
// while gpuscope_gpu_collector_up stayed 1, and cAdvisor's collector
// panicked part-way through its containers. Here a real process in such a
// cgroup is the first simulated GPU's process: both GPUs are stored, the
// container's GPU and cAdvisor series carry the same escaped id and join
// on it, and nothing was left out.
func TestServeInvalidUTF8Cgroup(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("gpuscope-e2e-bad\xff-%d", os.Getpid())
	cg := newCgroup(t, name)
	// cAdvisor leaves out the CPU series of a cgroup that has used no CPU:
	// a little work, then sleep.
	proc := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 600")
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	for _, d := range cg.Dirs {
		require.NoError(t, os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(proc.Process.Pid)), 0o644))
	}

	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), fmt.Sprintf(badCgroupConfig, proc.Process.Pid))))
	id := fmt.Sprintf(`/gpuscope-e2e-bad\xff-%d`, os.Getpid()) // workload.LabelValue's escape
	for _, q := range []string{
		`count(DCGM_FI_DEV_GPU_TEMP) == 2`,
		fmt.Sprintf(`gpuscope_gpu_container_memory_used_bytes{gpu="0",id=%q}`, id),
		fmt.Sprintf(`container_cpu_usage_seconds_total{id=%q}`, id),
		// GPU and CPU use of the container join on the escaped id.
		fmt.Sprintf(`gpuscope_gpu_container_memory_used_bytes{id=%q} * on(id) group_left() sum by (id) (container_cpu_usage_seconds_total)`, id),
		`gpuscope_gpu_collector_render_errors_total == 0`,
		`gpuscope_gpu_collector_up == 1`,
		`up{job=~"gpu|cadvisor"} == 1`,
	} {
		eventually(t, 60*time.Second, q, func() error {
			v, err := p.instant(q)
			if err != nil {
				return err
			}
			if len(v) == 0 {
				return fmt.Errorf("no series")
			}
			return nil
		})
	}
	// Both built-in targets up: a scrape the bad cgroup broke would fail
	// every time, one that missed its one-second timeout on a busy
	// machine only that once.
	eventually(t, 60*time.Second, "both built-in targets up", func() error {
		v, err := p.instant(`count(up{job=~"gpu|cadvisor"} == 1)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 2 {
			return fmt.Errorf("targets up: %v", v)
		}
		return nil
	})
}

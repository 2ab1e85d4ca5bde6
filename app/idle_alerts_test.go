package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/stretchr/testify/require"
)

// TestIdleAllocationAlertsFromSim: the sim's held-idle scenario (a job
// holding 10 GiB at about 1 % SM share) fires GPUHeldIdle naming the
// workload, and its orphan scenario (6 GiB the driver lists for a process
// that is gone) fires GPUMemoryHeldByGoneProcess, at 60× speed
// (gpu.sim.time_scale and rules.builtin.time_scale: the 30 minutes are
// 30 seconds, the 5 minutes 5 seconds). The gone process has no
// per-container series.
func TestIdleAllocationAlertsFromSim(t *testing.T) {
	t.Parallel()
	cfg := `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: 2
    time_scale: 60
    gpus:
      - {scenario: held-idle, container: /gpuscope-e2e/notebook}
      - {scenario: orphan}
`
	started := time.Now()
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), cfg)))

	var firing map[string]promv1.Alert
	eventually(t, 120*time.Second, "GPUHeldIdle for GPU 0 and GPUMemoryHeldByGoneProcess for GPU 1 firing", func() error {
		var err error
		firing, err = idleAlertsFiring(p)
		if err != nil {
			return err
		}
		for _, k := range []string{"GPUHeldIdle/0", "GPUMemoryHeldByGoneProcess/1"} {
			if _, ok := firing[k]; !ok {
				return fmt.Errorf("%s not firing; firing: %v", k, idleAlertKeys(firing))
			}
		}
		return nil
	})
	t.Logf("both alerts firing %s after start", time.Since(started).Round(time.Second))
	require.Len(t, firing, 2, "nothing else: the orphan GPU holds nothing for a workload, the held-idle one nothing for a gone process: %v", idleAlertKeys(firing))

	held := firing["GPUHeldIdle/0"]
	require.Equal(t, "/gpuscope-e2e/notebook", string(held.Labels["id"]))
	wl := string(held.Labels["workload"])
	require.NotEmpty(t, wl, "the workload label")
	require.Equal(t, "warning", string(held.Labels["severity"]))
	require.Equal(t, "e2e-node", string(held.Labels["instance"]))
	require.True(t, strings.HasPrefix(string(held.Annotations["summary"]), wl+" on e2e-node holds GPU 0 "), "summary names the workload: %q", held.Annotations["summary"])
	require.Regexp(t, `holds 10GiB of GPU 0 \(GPU-5171`, string(held.Annotations["description"]))
	// The text states the scaled duration: 30 minutes are 30 seconds at 60×.
	require.Contains(t, string(held.Annotations["description"]), "under 5% for 30 seconds")

	gone := firing["GPUMemoryHeldByGoneProcess/1"]
	require.Equal(t, "warning", string(gone.Labels["severity"]))
	require.NotEmpty(t, gone.Labels["UUID"])
	require.NotEmpty(t, gone.Labels["modelName"], "the GPU's dcgm labels")
	require.Contains(t, string(gone.Annotations["summary"]), "GPU 1 on e2e-node holds 6GiB for processes that are gone")

	v, err := p.instant(`last_over_time(gpuscope_gpu_orphaned_memory_bytes{gpu="1"}[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, float64(6<<30), float64(v[0].Value))
	v, err = p.instant(`last_over_time(gpuscope_gpu_orphaned_processes[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 2, "both GPUs report, 0 where nothing is gone")
	v, err = p.instant(`last_over_time(gpuscope_gpu_container_memory_used_bytes[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 1, "only the held-idle job has a container: %v", v)
	require.Equal(t, "0", string(v[0].Metric["gpu"]))
}

// idleAlertsFiring returns the firing GPUHeldIdle and
// GPUMemoryHeldByGoneProcess alerts by "name/gpu".
func idleAlertsFiring(p *process) (map[string]promv1.Alert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.api().Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]promv1.Alert{}
	for _, a := range res.Alerts {
		name := string(a.Labels["alertname"])
		if a.State != promv1.AlertStateFiring || (name != "GPUHeldIdle" && name != "GPUMemoryHeldByGoneProcess") {
			continue
		}
		out[name+"/"+string(a.Labels["gpu"])] = a
	}
	return out, nil
}

func idleAlertKeys(m map[string]promv1.Alert) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

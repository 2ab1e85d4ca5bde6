package app_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/stretchr/testify/require"
)

// xidAlerts are the built-in pack's XID alerts.
var xidAlerts = []string{"GPUXIDErrorCritical", "GPUFellOffBus"}

// TestXIDAlertsFromSim: the sim's xid scenario (XID 79 after 10 simulated
// minutes) and a GPU that falls off the bus (lost_at/lost_for: NVML's
// GPU_IS_LOST, and XID 79 as it falls) fire GPUXIDErrorCritical and
// GPUFellOffBus for their GPUs, at 60× speed (gpu.sim.time_scale and
// rules.builtin.time_scale); a training GPU fires neither.
func TestXIDAlertsFromSim(t *testing.T) {
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
    count: 3
    time_scale: 60
    gpus:
      - {scenario: training}
      - {scenario: xid}
      - {scenario: training, lost_at: 5m, lost_for: 10m}
`
	started := time.Now()
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), cfg)))

	// At 60×, XID 79 comes 10 s after start and the third GPU is off the
	// bus from 5 s to 15 s; the alerts hold a minute (an hour scaled).
	var trainingAlerts []string
	want := map[string][]string{"GPUXIDErrorCritical": {"1", "2"}, "GPUFellOffBus": {"1", "2"}}
	var firing map[string]map[string]promv1.Alert
	eventually(t, 45*time.Second, "GPUXIDErrorCritical and GPUFellOffBus firing for GPUs 1 and 2", func() error {
		var err error
		firing, err = xidAlertsFiring(p, &trainingAlerts)
		if err != nil {
			return err
		}
		for name, gpus := range want {
			for _, g := range gpus {
				if _, ok := firing[name][g]; !ok {
					return fmt.Errorf("%s not firing for GPU %s: firing %v", name, g, firing)
				}
			}
		}
		return nil
	})
	t.Logf("XID alerts firing %s after start", time.Since(started).Round(time.Second))

	xid := firing["GPUXIDErrorCritical"]["1"]
	require.Equal(t, "79", string(xid.Labels["err_code"]))
	require.Equal(t, "critical", string(xid.Labels["severity"]))
	require.Equal(t, "e2e-node", string(xid.Labels["instance"]))
	require.NotEmpty(t, xid.Labels["UUID"])
	require.Contains(t, string(xid.Annotations["summary"]), "GPU 1 on e2e-node reported XID 79")
	require.Contains(t, string(xid.Annotations["description"]), "https://docs.nvidia.com/deploy/xid-errors/")
	// The text states the scaled window: an hour is a minute at 60×.
	require.Contains(t, string(xid.Annotations["description"]), "in the last minute")

	bus := firing["GPUFellOffBus"]["2"]
	require.Equal(t, "critical", string(bus.Labels["severity"]))
	// The lost GPU's identity comes from its last samples.
	require.Regexp(t, `^GPU 2 \(GPU-5171[0-9a-f-]+, PCI 00000000:3A:00\.0\) on e2e-node`, string(bus.Annotations["description"]))

	// The lost GPU was reported as NVML reports it: a device error per cycle.
	v, err := p.instant(`last_over_time(gpuscope_gpu_collector_errors_total{field="device"}[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 1, "only GPU 2 was lost")
	require.Equal(t, "2", string(v[0].Metric["gpu"]))

	// A few more evaluations: still nothing for the training GPU.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, err := xidAlertsFiring(p, &trainingAlerts)
		require.NoError(t, err)
		time.Sleep(500 * time.Millisecond)
	}
	require.Empty(t, trainingAlerts, "the training GPU 0 has no XID and never left the bus")
}

// xidAlertsFiring returns the firing XID alerts by name and GPU, from
// /api/v1/alerts as Grafana reads it, and appends to gpu0 any XID alert,
// pending or firing, on GPU 0.
func xidAlertsFiring(p *process, gpu0 *[]string) (map[string]map[string]promv1.Alert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.api().Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]promv1.Alert{}
	for _, a := range res.Alerts {
		name, gpu := string(a.Labels["alertname"]), string(a.Labels["gpu"])
		if !slices.Contains(xidAlerts, name) {
			continue
		}
		if gpu == "0" {
			*gpu0 = append(*gpu0, fmt.Sprintf("%s %s", name, a.State))
		}
		if a.State != promv1.AlertStateFiring {
			continue
		}
		if out[name] == nil {
			out[name] = map[string]promv1.Alert{}
		}
		out[name][gpu] = a
	}
	return out, nil
}

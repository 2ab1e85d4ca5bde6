package app_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
)

// TestRunEndNotice: with the opt-in group gpuscope.notify enabled, a
// simulated job that dies of XID 79 (the xid scenario, 10 simulated
// minutes in: 10 s at 60×) is noticed once, by a webhook routed the
// notices with send_resolved false: the notice names the workload, its
// GPU and that an XID ended it, and carries its run report's figures
// (GPU-hours and energy as /api/v1/workloads computes them). The job on
// the other GPU, still running, is not noticed; nor is anything once the
// notice has resolved.
func TestRunEndNotice(t *testing.T) {
	t.Parallel()
	hook := newWebhook(t)
	cfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rules:
  builtin:
    time_scale: 60
    enabled_groups: [gpuscope.notify]
gpu:
  backend: sim
  sim:
    count: 2
    time_scale: 60
    gpus: [{scenario: xid}, {scenario: training}]
alertmanager:
  route:
    receiver: nobody
    routes:
      - matchers: [alertname="WorkloadEnded"]
        receiver: runs
        group_by: [alertname, instance, id]
        group_wait: 1s
        group_interval: 1s
        repeat_interval: 1h
  receivers:
    - name: nobody
    - name: runs
      webhook_configs: [{url: %q, send_resolved: false}]
`, hook.URL()))
	started := time.Now()
	p := serve(t, "", configFile(cfg), with(func(s *app.Settings) { s.ResendDelay = time.Second }))

	var notice webhookMessage
	eventually(t, 90*time.Second, "the xid scenario's job noticed", func() error {
		msgs, err := hook.Messages("WorkloadEnded", time.Time{})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return fmt.Errorf("no notice yet")
		}
		notice = msgs[0]
		return nil
	})
	t.Logf("notice %s after start: %v", time.Since(started).Round(time.Second), notice.Alerts[0].Annotations)
	require.Len(t, notice.Alerts, 1)
	a := notice.Alerts[0]
	require.Equal(t, "firing", a.Status)
	require.Equal(t, "info", a.Labels["severity"])
	require.Equal(t, "/gpuscope-sim/gpu0", a.Labels["id"])
	require.Equal(t, "e2e-node", a.Labels["instance"])
	require.Equal(t, "/gpuscope-sim/gpu0 on e2e-node ended after XID 79 (GPU has fallen off the bus) on GPU 0", a.Annotations["summary"])
	require.Equal(t, "xid", a.Annotations["ended_by"])
	require.Equal(t, "1", a.Annotations["xid_errors"])
	require.Equal(t, "0", a.Annotations["gpus"])
	require.Equal(t, "0", a.Annotations["oom_kills"], "the sim's containers have no cgroup")
	require.Contains(t, a.Annotations["description"], "held GPU 0 on e2e-node and has ended: ")
	peak, err := strconv.ParseFloat(a.Annotations["gpu_memory_peak_bytes"], 64)
	require.NoError(t, err)
	require.InDelta(t, 62000*1024*1024, peak, 16*1024*1024, "the xid scenario's job holds about 62000 MiB")

	// The figures are the run report's.
	var gpuHours, kWh float64
	for _, k := range []struct {
		name string
		v    *float64
	}{{"gpu_hours", &gpuHours}, {"energy_kwh", &kWh}} {
		*k.v, err = strconv.ParseFloat(a.Annotations[k.name], 64)
		require.NoError(t, err, k.name)
		require.Positive(t, *k.v, k.name)
	}
	var run *reportRun
	for _, r := range reportAPI(t, p, started.Add(-time.Minute), time.Now()) {
		if r.ID == "/gpuscope-sim/gpu0" {
			run = &r
		}
	}
	require.NotNil(t, run, "the run in /api/v1/workloads")
	require.False(t, run.Running)
	require.InDelta(t, run.GPUHours, gpuHours, 1e-4, "GPU-hours as the report has them (the notice rounds to 4 places)")
	require.NotNil(t, run.EnergyKWh)
	require.InDelta(t, *run.EnergyKWh, kWh, 1e-4)

	// Once: no second message while the notice fires and resolves (its
	// window is 10 minutes, 10 s at 60×), and none for the job that runs.
	eventually(t, 60*time.Second, "the notice resolved in gpuscope", func() error {
		v, err := p.instant(`ALERTS{alertname="WorkloadEnded"}`)
		if err != nil {
			return err
		}
		if len(v) > 0 {
			return fmt.Errorf("still %v", v)
		}
		return nil
	})
	time.Sleep(5 * time.Second) // group intervals past the resolution
	// One alert: Alertmanager delivers at least once, and may deliver the
	// same alert (same fingerprint, same start) again when it lost it
	// between two of gpuscope's sends on a loaded machine; a second
	// notice is a second alert.
	alerts := map[string]bool{}
	for _, m := range hook.All() {
		require.Equal(t, "/gpuscope-sim/gpu0", m.GroupLabels["id"], "only the ended job is noticed")
		for _, a := range m.Alerts {
			alerts[a.Fingerprint+" "+a.StartsAt.String()] = true
		}
	}
	require.Len(t, alerts, 1, "one notice per run")
}

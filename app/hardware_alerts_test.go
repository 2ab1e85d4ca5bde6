package app_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestHardwareAlertsFromSim: each of the simulator's hardware-fault
// scenarios fires its built-in alert (rules/pack/health.yml) end to end
// at 60× speed (gpu.sim.time_scale and rules.builtin.time_scale): the
// faults begin 1 to 5 simulated minutes in, 1 to 5 seconds here. Each GPU
// alert names the workload on the GPU and says what to do in its
// runbook; the healthy training GPU fires none of them.
func TestHardwareAlertsFromSim(t *testing.T) {
	t.Parallel()
	cfg := `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor: {enabled: false}
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: 8
    time_scale: 60
    gpus:
      - {scenario: ecc}
      - {scenario: row-remap}
      - {scenario: nvlink-errors}
      - {scenario: pcie-replay}
      - {scenario: power-brake}
      - {scenario: fan-failure}
      - {scenario: missing}
      - {scenario: training}
`
	started := time.Now()
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), cfg)))

	// alert/gpu (the `error` or `reason` label after a second slash where
	// the rule has one) for every GPU alert that fires.
	want := []string{
		"GPUUncorrectableECCError/0", "GPURetiredPagesPending/0",
		"GPURowRemapPending/1", "GPURowRemapFailed/1", "GPURecoveryActionRequired/1",
		"GPUNVLinkErrors/2/crc", "GPUNVLinkErrors/2/replay", "GPUNVLinkErrors/2/recovery",
		"GPUPCIeReplayRateHigh/3",
		"GPUPowerBrake/4",
		"GPUHardwareSlowdown/5", "GPUThermalSlowdown/5/sw_thermal", "GPUThermalSlowdown/5/hw_thermal",
		"GPUMissing/",
	}
	// Each alert as it was seen firing: the faults are independent, and a
	// fault that stops (NVLink recovery errors, a GPU that is back) may
	// resolve its alert before another's has fired on a busy machine.
	firing := map[string]promv1.Alert{}
	eventually(t, 150*time.Second, "every hardware alert firing", func() error {
		now, err := hardwareAlertsFiring(p)
		if err != nil {
			return err
		}
		for k, a := range now {
			if _, seen := firing[k]; !seen {
				firing[k] = a
			}
		}
		var missing []string
		for _, k := range want {
			if _, ok := firing[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not firing: %v; firing: %v", missing, slices.Sorted(maps.Keys(firing)))
		}
		return nil
	})
	t.Logf("each of the %d hardware alerts seen firing within %s of start", len(want), time.Since(started).Round(time.Second))

	for _, k := range want {
		a := firing[k]
		require.NotEmpty(t, a.Annotations["summary"], k)
		require.NotEmpty(t, a.Annotations["runbook"], k)
		require.Equal(t, "e2e-node", string(a.Labels["instance"]), k)
		if k == "GPUMissing/" {
			require.Equal(t, "critical", string(a.Labels["severity"]))
			require.Contains(t, string(a.Annotations["description"]), "Missing: GPU 6 (GPU-5171", "names the GPU that left")
			continue
		}
		// The sim's jobs run in /gpuscope-sim/gpu<index>: the alert names
		// the workload it hits.
		gpu := string(a.Labels["gpu"])
		require.Equal(t, "/gpuscope-sim/gpu"+gpu, string(a.Labels["id"]), "%s: the workload on the GPU", k)
		require.NotEmpty(t, a.Labels["workload"], k)
		require.NotEmpty(t, a.Labels["UUID"], k)
	}
	// Resets say to stop gpuscope first.
	require.Contains(t, string(firing["GPURowRemapPending/1"].Annotations["runbook"]), "systemctl stop gpuscope")
	require.Contains(t, string(firing["GPURowRemapPending/1"].Annotations["runbook"]), "nvidia-smi -r -i 1")
	// The healthy GPU fires none of them.
	for k := range firing {
		require.False(t, strings.HasPrefix(strings.SplitN(k, "/", 2)[1], "7"), "the training GPU fires %s", k)
	}
	// The fault's XIDs fire the XID alert too.
	require.NoError(t, apiFiring(p, "GPUXIDErrorCritical", "1"))
	require.NoError(t, apiFiring(p, "GPUXIDErrorCritical", "0"))

	// The new fields are published with DCGM's names. Read as the last
	// sample of the past minute: a scrape of the eight GPUs that missed its
	// one-second timeout on a busy machine marks every series stale, and an
	// instant query right after it finds none.
	for _, c := range []struct {
		query string
		want  float64
	}{
		{`DCGM_FI_DEV_ENFORCED_POWER_LIMIT{gpu="7"}`, 700},
		{`DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION{gpu="1"}`, 1},
		{`DCGM_FI_DEV_ROW_REMAP_PENDING{gpu="1"}`, 1},
		{`DCGM_FI_DEV_FAN_SPEED{gpu="5"}`, 0},
	} {
		v, err := p.instant(`last_over_time(` + c.query + `[1m])`)
		require.NoError(t, err)
		require.Len(t, v, 1, c.query)
		require.Equal(t, c.want, float64(v[0].Value), c.query)
	}
}

// hardwareAlertsFiring returns the firing alerts of gpuscope.health by
// "alertname/gpu", with "/error" or "/reason" where the alert has one.
func hardwareAlertsFiring(p *process) (map[string]promv1.Alert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.api().Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]promv1.Alert{}
	for _, a := range res.Alerts {
		if a.State != promv1.AlertStateFiring || a.Annotations["runbook"] == "" {
			continue
		}
		k := string(a.Labels["alertname"]) + "/" + string(a.Labels["gpu"])
		for _, l := range []string{"error", "reason"} {
			if v := a.Labels[model.LabelName(l)]; v != "" {
				k += "/" + string(v)
			}
		}
		out[k] = a
	}
	return out, nil
}

package app_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
)

// TestServeSimGPUs: the sim backend's series reach PromQL through the
// built-in `gpu` job with dcgm-exporter's names and labels, and join with
// cAdvisor's container series on the cgroup id.
func TestServeSimGPUs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	container := fmt.Sprintf("/gpuscope-e2e-sim-%d", rand.IntN(1e6))
	cfg := writeConfig(t, dir, fastConfig+fmt.Sprintf(`
gpu:
  backend: sim
  sim:
    count: 4
    cpu_burn: true
    gpus:
      - {scenario: thermal}
      - {scenario: training}
      - {scenario: input-bound, container: %s}
      - {scenario: idle}
`, container))
	p := serve(t, "", configFile(cfg))

	eventually(t, 30*time.Second, "per-GPU framebuffer ratio for every GPU", func() error {
		v, err := p.instant(`DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL`)
		if err != nil {
			return err
		}
		if len(v) != 4 {
			return fmt.Errorf("want 4 GPUs, got %d", len(v))
		}
		for _, s := range v {
			if s.Value < 0 || s.Value > 1 {
				return fmt.Errorf("ratio %v out of [0,1] for %s", s.Value, s.Metric)
			}
			for _, l := range []model.LabelName{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "instance", "job"} {
				if s.Metric[l] == "" {
					return fmt.Errorf("label %s missing on %s", l, s.Metric)
				}
			}
			if s.Metric["Hostname"] != "e2e-node" || s.Metric["instance"] != "e2e-node" || s.Metric["job"] != "gpu" {
				return fmt.Errorf("host labels of %s", s.Metric)
			}
		}
		return nil
	})

	v, err := p.instant(`last_over_time(DCGM_FI_DEV_GPU_UTIL[5s]) > 95`)
	require.NoError(t, err)
	require.Len(t, v, 1, "the thermal GPU runs above 95%%")
	require.Equal(t, model.LabelValue("0"), v[0].Metric["gpu"])

	// label_values(DCGM_FI_DEV_GPU_TEMP, gpu), as Grafana's variable asks.
	vals, _, _, err := p.api().LabelValues(t.Context(), "gpu", []string{"DCGM_FI_DEV_GPU_TEMP"}, time.Now().Add(-time.Hour), time.Now())
	require.NoError(t, err)
	got := []string{}
	for _, x := range vals {
		got = append(got, string(x))
	}
	sort.Strings(got)
	require.Equal(t, []string{"0", "1", "2", "3"}, got)

	// One PromQL expression joins a container's GPU memory with its CPU use.
	join := fmt.Sprintf(`gpuscope_gpu_container_memory_used_bytes{id=%q} * on(id) group_left() sum by (id) (rate(container_cpu_usage_seconds_total[10s]))`, container)
	eventually(t, 60*time.Second, "GPU memory × CPU join on the container id", func() error {
		v, err := p.instant(join)
		if err != nil {
			return err
		}
		if len(v) != 1 || !(v[0].Value > 0) {
			return fmt.Errorf("join = %v", v)
		}
		return nil
	})

	v, err = p.instant(`last_over_time(gpuscope_gpu_collector_up[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, model.SampleValue(1), v[0].Value)
}

// TestServeWithoutDriver: backend auto on a machine without libnvidia-ml
// is not an error: the collector says it is down, everything else works.
func TestServeWithoutDriver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := serve(t, "", configFile(writeConfig(t, dir, fastConfig)), with(func(s *app.Settings) { s.GPUBackend = "auto" }))
	eventually(t, 30*time.Second, "gpuscope_gpu_collector_up 0, other jobs up", func() error {
		v, err := p.instant(`gpuscope_gpu_collector_up`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 0 {
			return fmt.Errorf("gpuscope_gpu_collector_up = %v", v)
		}
		up, err := p.instant(`up == 1`)
		if err != nil {
			return err
		}
		if len(up) != 3 {
			return fmt.Errorf("want gpuscope, cadvisor and gpu jobs up, got %v", up)
		}
		return nil
	})
	v, err := p.instant(`last_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`)
	require.NoError(t, err)
	require.Empty(t, v, "no GPU series without a driver, ever")
	v, err = p.instant(`last_over_time(gpuscope_gpu_collector_backend_info[5s])`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, model.LabelValue("none"), v[0].Metric["backend"], "auto found no driver: no backend, which GPUCollectorDown does not alert on")
}

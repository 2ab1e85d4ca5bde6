package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
)

// alertmanager stands in for an Alertmanager: it accepts what gpuscope's
// notifier posts to /api/v2/alerts, decoded and validated with
// Alertmanager's own API models.
type alertmanager struct {
	srv    *httptest.Server
	mu     sync.Mutex
	alerts []*models.PostableAlert
	errs   []error
}

func newAlertmanager(t *testing.T) *alertmanager {
	t.Helper()
	am := &alertmanager{}
	am.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/alerts" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var alerts models.PostableAlerts
		err := json.NewDecoder(r.Body).Decode(&alerts)
		if err == nil {
			err = alerts.Validate(strfmt.Default)
		}
		am.mu.Lock()
		defer am.mu.Unlock()
		if err != nil {
			am.errs = append(am.errs, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		am.alerts = append(am.alerts, alerts...)
	}))
	t.Cleanup(am.srv.Close)
	return am
}

func (am *alertmanager) addr() string { return strings.TrimPrefix(am.srv.URL, "http://") }

// received returns the alerts named name received so far (resends
// included) whose labels include match.
func (am *alertmanager) received(name string, match map[string]string) []*models.PostableAlert {
	am.mu.Lock()
	defer am.mu.Unlock()
	var out []*models.PostableAlert
	for _, a := range am.alerts {
		if a.Labels["alertname"] != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

func (am *alertmanager) decodeErrors() []error {
	am.mu.Lock()
	defer am.mu.Unlock()
	return slices.Clone(am.errs)
}

// TestAlertsFromSimScenarios runs the source document's two diagnoses end
// to end at 60× speed (gpu.sim.time_scale and rules.builtin.time_scale):
// the leak scenario's staircase fires GPUMemoryLeakSuspected, the
// input-bound scenario (a real CPU-saturated cgroup) fires GPUStarvedByCPU
// and is classed input-bound, a training GPU fires neither, and the alerts
// reach an Alertmanager with the external labels.
func TestAlertsFromSimScenarios(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the input-bound scenario burns CPU in a cgroup of its own: needs root")
	}
	am := newAlertmanager(t)
	container := fmt.Sprintf("/gpuscope-e2e-starved-%d", rand.IntN(1e6))
	cfg := fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
  external_labels: {cluster: e2e}
alerting:
  alertmanagers:
    - static_configs: [{targets: [%q]}]
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: 3
    time_scale: 60
    cpu_burn: true
    gpus:
      - {scenario: leak}
      - {scenario: input-bound, container: %s}
      - {scenario: training}
`, am.addr(), container)
	started := time.Now()
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), cfg)))
	// The container must use its half core whatever else runs.
	favourContainerCPU(t, container)

	// Input-bound: the GPU idles at 20-40% while its container uses all
	// of its half core.
	eventually(t, 90*time.Second, "GPUStarvedByCPU delivered for GPU 1", func() error {
		if errs := am.decodeErrors(); len(errs) > 0 {
			return fmt.Errorf("Alertmanager could not decode: %v", errs)
		}
		if len(am.received("GPUStarvedByCPU", map[string]string{"gpu": "1"})) == 0 {
			return fmt.Errorf("not received")
		}
		return nil
	})
	t.Logf("GPUStarvedByCPU delivered %s after start", time.Since(started).Round(time.Second))
	a := am.received("GPUStarvedByCPU", map[string]string{"gpu": "1"})[0]
	require.Equal(t, container, a.Labels["id"])
	require.Equal(t, "e2e", a.Labels["cluster"], "external label")
	require.Equal(t, "e2e-node", a.Labels["instance"])
	require.Equal(t, "warning", a.Labels["severity"])
	require.Contains(t, a.Annotations["summary"], "starved by the CPU of container "+container)
	require.Contains(t, a.Annotations["description"], "input-bound")
	require.Contains(t, string(a.GeneratorURL), "/graph?g0.expr=")
	// The link lands on gpuscope's /graph, which shows the alert's
	// expression as a table (its host is the external URL's).
	gen, err := url.Parse(string(a.GeneratorURL))
	require.NoError(t, err)
	code, body := p.get(gen.Path + "?" + gen.RawQuery)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, `<table class="result" data-result-type="vector">`)
	require.True(t, time.Time(a.EndsAt).After(time.Time(a.StartsAt)))
	// The HTTP API reports it too: Grafana's alert list reads /alerts.
	// Pending counts: the burner that keeps it firing may lose its CPU
	// for a moment on a loaded machine.
	eventually(t, 10*time.Second, "GPUStarvedByCPU in /api/v1/alerts", func() error {
		return p.Active("GPUStarvedByCPU", "1")
	})

	eventually(t, 30*time.Second, "each GPU's bottleneck class", func() error {
		v, err := p.instant(`gpu:bottleneck:class`)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, s := range v {
			got[string(s.Metric["gpu"])] = string(s.Metric["class"])
		}
		want := map[string]string{"0": "compute-bound", "1": "input-bound", "2": "compute-bound"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("classes %v, want %v", got, want)
		}
		return nil
	})

	// The leak: +2 GiB every 30 simulated minutes (30 s here); the rule
	// needs three rising half-hours, so about 1h45m simulated.
	eventually(t, 150*time.Second, "GPUMemoryLeakSuspected delivered for GPU 0", func() error {
		if len(am.received("GPUMemoryLeakSuspected", map[string]string{"gpu": "0"})) == 0 {
			return fmt.Errorf("not received")
		}
		return nil
	})
	t.Logf("GPUMemoryLeakSuspected delivered %s after start", time.Since(started).Round(time.Second))
	leak := am.received("GPUMemoryLeakSuspected", map[string]string{"gpu": "0"})[0]
	require.Equal(t, "e2e", leak.Labels["cluster"])
	// The rise it states is the last scaled half-hour's as stored: one
	// 2 GiB step, or two where the collector's cycles lagged behind the
	// scrapes on a loaded machine; whichever it was, the TSDB has it.
	m := regexp.MustCompile(`by (\d+) MiB in the last one`).FindStringSubmatch(leak.Annotations["description"])
	require.NotNil(t, m, leak.Annotations["description"])
	stated, _ := strconv.Atoi(m[1])
	require.Greater(t, stated, 1800, "at least one 2 GiB step (less the sim's noise)")
	rises := storedValues(t, p, `min_over_time(DCGM_FI_DEV_FB_USED{gpu="0"}[10s]) - min_over_time(DCGM_FI_DEV_FB_USED{gpu="0"}[10s] offset 30s)`,
		time.Time(leak.StartsAt).Add(-10*time.Second), time.Now())
	require.Contains(t, rises, stated, "the rise stated is one the stored samples give: %v", rises)

	// Neither diagnosis for the training GPU, no leak on the input-bound
	// one, no starvation on the leaking one.
	require.Empty(t, am.received("GPUMemoryLeakSuspected", map[string]string{"gpu": "2"}))
	require.Empty(t, am.received("GPUMemoryLeakSuspected", map[string]string{"gpu": "1"}))
	require.Empty(t, am.received("GPUStarvedByCPU", map[string]string{"gpu": "2"}))
	require.Empty(t, am.received("GPUStarvedByCPU", map[string]string{"gpu": "0"}))

	require.NoError(t, apiFiring(p, "GPUMemoryLeakSuspected", "0"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rules, err := p.api().Rules(ctx, nil)
	require.NoError(t, err)
	groups := map[string]string{}
	for _, g := range rules.Groups {
		groups[g.Name] = g.File
		for _, r := range g.Rules {
			switch r := r.(type) {
			case promv1.AlertingRule:
				require.Equal(t, "ok", string(r.Health), "%s: %s", r.Name, r.LastError)
			case promv1.RecordingRule:
				require.Equal(t, "ok", string(r.Health), "%s: %s", r.Name, r.LastError)
			}
		}
	}
	for _, g := range []string{"gpuscope.gpu", "gpuscope.container", "gpuscope.diagnosis", "gpuscope.baseline.hourly", "gpuscope.baseline.weekly", "gpuscope.meta", "gpuscope.accounting"} {
		require.True(t, strings.HasPrefix(groups[g], "builtin:"), "group %s: %v", g, groups)
	}
	ams, err := p.api().AlertManagers(ctx)
	require.NoError(t, err)
	var urls []string
	for _, a := range ams.Active {
		urls = append(urls, a.URL)
	}
	// And the embedded Alertmanager, at gpuscope's own port.
	require.ElementsMatch(t, []string{am.srv.URL + "/api/v2/alerts", "http://localhost:" + p.URL[strings.LastIndex(p.URL, ":")+1:] + "/api/v2/alerts"}, urls)

	// The storage failures the meta rules watch are all exported.
	// (Read from the self-scrape's last stored sample, up to five minutes
	// back: a self-scrape that missed its one-second timeout on a busy
	// machine leaves the series stale at the instant, not missing.)
	v, err := p.instant(`count(last_over_time({job="gpuscope",__name__=~"prometheus_tsdb_(compactions_failed|reloads_failures|wal_writes_failed|wal_corruptions|wal_truncations_failed|checkpoint_creations_failed|head_truncations_failed|mmap_chunk_corruptions)_total"}[5m]))`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Equal(t, model.SampleValue(8), v[0].Value)
}

func apiFiring(p *process, alertname, gpu string) error { return p.Firing(alertname, gpu) }

const badRules = `groups:
  - name: e2e
    rules:
      - alert: E2EAlwaysFiring
        expr: sum(rate(up[5m])
`

// TestRulesBadInputAndReload: a rule file with a syntax error stops
// the appliance from starting, naming file and line (e2e's
// TestRulesCheckConfig has check config and the binary's exit); on a
// reload the old rules keep running while the failure shows in Reload's
// error,
// in gpuscope_config_last_reload_successful and in the alert on it. A
// user rule replaces the built-in rule of its name and group, and a
// disabled built-in group is left out.
func TestRulesBadInputAndReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(rulesFile, []byte(badRules), 0o644))
	cfgFile := writeConfig(t, dir, fastConfig+`
rule_files: [rules.yml]
rules:
  builtin:
    time_scale: 60
    disabled_groups: [gpuscope.baseline.weekly]
`)

	_, err := apptest.Start(t, filepath.Join(dir, "refused"), configFile(cfgFile))
	require.ErrorContains(t, err, rulesFile+": 5:15:", "the appliance does not start")
	require.ErrorContains(t, err, "unclosed left parenthesis")

	require.NoError(t, os.WriteFile(rulesFile, []byte(`groups:
  - name: e2e
    rules:
      - alert: E2EAlwaysFiring
        expr: vector(1)
        labels: {severity: info}
  - name: gpuscope.meta
    rules:
      - alert: TargetDown
        expr: up == 0
        for: 30m
        labels: {severity: critical, team: e2e}
`), 0o644))
	p := serve(t, "", configFile(cfgFile), apptest.Settings(func(s *app.Settings) {
		s.EnableLifecycle, s.AllowUnauthenticatedAdmin = true, true
	}))

	// The test's own context, not one deadline over all its waits: each
	// has its own.
	ctx := t.Context()
	lastEval := func() (time.Time, error) {
		rules, err := p.api().Rules(ctx, nil)
		if err != nil {
			return time.Time{}, err
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if a, ok := r.(promv1.AlertingRule); ok && a.Name == "E2EAlwaysFiring" {
					return a.LastEvaluation, nil
				}
			}
		}
		return time.Time{}, fmt.Errorf("E2EAlwaysFiring not in /api/v1/rules")
	}
	eventually(t, 30*time.Second, "the user's rule evaluated", func() error {
		t, err := lastEval()
		if err == nil && t.IsZero() {
			err = fmt.Errorf("not evaluated yet")
		}
		return err
	})
	rules, err := p.api().Rules(ctx, nil)
	require.NoError(t, err)
	var targetDown []string
	for _, g := range rules.Groups {
		require.NotEqual(t, "gpuscope.baseline.weekly", g.Name, "disabled group")
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok && a.Name == "TargetDown" {
				targetDown = append(targetDown, g.File+" "+string(a.Labels["team"]))
			}
		}
	}
	require.Equal(t, []string{rulesFile + " e2e"}, targetDown, "the user's TargetDown replaces the built-in one")

	// Break the file and reload, as a Prometheus user does, by POST
	// /-/reload: the caller gets the error, and the log has it too.
	require.NoError(t, os.WriteFile(rulesFile, []byte(badRules), 0o644))
	code, body := p.Post("/-/reload", "")
	require.Equal(t, http.StatusInternalServerError, code, body)
	require.Contains(t, body, rulesFile+": 5:15:", "the reload fails, naming file and line")
	require.Contains(t, p.out.String(), "Reload failed; the previous configuration stays in effect")
	require.Contains(t, p.out.String(), rulesFile+": 5:15:", "the log names file and line")
	eventually(t, 20*time.Second, "reload failure in the metric", func() error {
		v, err := p.instant(`gpuscope_config_last_reload_successful`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 0 {
			return fmt.Errorf("gpuscope_config_last_reload_successful = %v", v)
		}
		return nil
	})
	failedAt := time.Now()

	// The old rules keep being evaluated ...
	eventually(t, 20*time.Second, "the old rule still evaluated after the failed reload", func() error {
		t, err := lastEval()
		if err == nil && !t.After(failedAt) {
			err = fmt.Errorf("last evaluation %s, before the failed reload", t)
		}
		return err
	})
	// ... among them the built-in alert on the failed reload (its 5m is
	// 5s at this time scale).
	eventually(t, 40*time.Second, "GpuscopeConfigReloadFailed firing", func() error {
		alerts, err := p.api().Alerts(ctx)
		if err != nil {
			return err
		}
		for _, a := range alerts.Alerts {
			if a.Labels["alertname"] == "GpuscopeConfigReloadFailed" && a.State == promv1.AlertStateFiring {
				return nil
			}
		}
		return fmt.Errorf("not firing: %v", alerts.Alerts)
	})
}

// storedValues are the values, rounded to integers, that expr takes over
// [start, end] at 100 ms steps: what a rule evaluated in that range could
// have read from the TSDB.
func storedValues(t *testing.T, p *process, expr string, start, end time.Time) []int {
	t.Helper()
	v, _, _, err := p.api().QueryRange(t.Context(), expr, promv1.Range{Start: start, End: end, Step: 100 * time.Millisecond})
	require.NoError(t, err)
	seen := map[int]bool{}
	var out []int
	for _, s := range v.(model.Matrix) {
		for _, sp := range s.Values {
			if n := int(math.Round(float64(sp.Value))); !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestReloadNamesStartOnlySections: a reload applies what it can and says
// which changed sections wait for the next start; among them
// workloads.passwd_file, which the collectors read when they are built
// (a reload once took it silently).
func TestReloadNamesStartOnlySections(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := writeConfig(t, dir, "global:\n  scrape_interval: 5s\n")
	p := serve(t, "", configFile(cfgFile))

	require.NoError(t, p.reload())
	require.NotContains(t, p.out.String(), "take effect at the next start", "nothing changed")

	writeConfig(t, dir, fmt.Sprintf("global:\n  scrape_interval: 5s\nworkloads:\n  passwd_file: %s\n", passwdFixture(t)))
	require.NoError(t, p.reload())
	require.Contains(t, p.out.String(), `msg="These sections changed, and take effect at the next start; the rest is applied now" sections=workloads`)
}

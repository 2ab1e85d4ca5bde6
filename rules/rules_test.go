package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/promql"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"
)

func loadPromConfig(t *testing.T, text string) *promconfig.Config {
	t.Helper()
	cfg, err := promconfig.Load(text, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return cfg
}

func newTestRules(t *testing.T, sender promrules.Sender) *Manager {
	t.Helper()
	st := teststorage.New(t)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: 10 * time.Second, LookbackDelta: 5 * time.Minute})
	t.Cleanup(func() { engine.Close() })
	r, err := NewManager(Options{
		Registerer:  prometheus.NewRegistry(),
		Engine:      engine,
		Queryable:   st,
		Appendable:  st,
		Notifier:    sender,
		ExternalURL: &url.URL{Scheme: "http", Host: "gpu-1:9089", Path: "/"},
	})
	require.NoError(t, err)
	return r
}

// runRules runs r until the test ends.
func runRules(t *testing.T, r *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

type groupInfo struct{ file, name string }

func groupsOf(r *Manager) []groupInfo {
	var out []groupInfo
	for _, g := range r.Prometheus().RuleGroups() {
		out = append(out, groupInfo{g.File(), g.Name()})
	}
	return out
}

func rulesOf(r *Manager, group string) []string {
	var out []string
	for _, g := range r.Prometheus().RuleGroups() {
		if g.Name() == group {
			for _, rl := range g.Rules() {
				out = append(out, g.File()+":"+rl.Name())
			}
		}
	}
	return out
}

// TestRulesApplyConfig drives the real rule manager: the pack is loaded
// from the binary, groups and rules are disabled and overridden as the
// config says, and a broken rule file changes nothing.
func TestRulesApplyConfig(t *testing.T) {
	r := newTestRules(t, nil)
	runRules(t, r)
	dir := t.TempDir()
	cfg := loadPromConfig(t, fmt.Sprintf("global: {evaluation_interval: 1s}\nrule_files: [%q]\n", filepath.Join(dir, "*.yml")))

	require.NoError(t, r.ApplyConfig(cfg, DefaultConfig()))
	all, _ := packNames()
	builtinGroups := func() []string {
		var got []string
		for _, g := range groupsOf(r) {
			require.True(t, strings.HasPrefix(g.file, BuiltinPrefix), g.file)
			got = append(got, g.name)
		}
		slices.Sort(got)
		return got
	}
	// The opt-in groups run only when enabled_groups names them.
	wantGroups := slices.DeleteFunc(slices.Clone(all), func(g string) bool { return slices.Contains(OptInGroups, g) })
	require.Equal(t, wantGroups, builtinGroups())
	rc := DefaultConfig()
	rc.Builtin.EnabledGroups = OptInGroups
	require.NoError(t, r.ApplyConfig(cfg, rc))
	require.Equal(t, all, builtinGroups())
	require.Contains(t, groupsOf(r), groupInfo{BuiltinPrefix + "notify.yml", "gpuscope.notify"})

	// A user rule of a built-in rule's name in a group of the built-in
	// group's name replaces it; disabled groups and rules are left out.
	mine := filepath.Join(dir, "mine.yml")
	require.NoError(t, os.WriteFile(mine, []byte(`groups:
  - name: gpuscope.meta
    rules:
      - alert: TargetDown
        expr: up == 0
        for: 15m
        labels: {severity: critical}
  - name: mine
    rules:
      - alert: AlwaysFiring
        expr: vector(1)
`), 0o644))
	rc = DefaultConfig()
	rc.Builtin.DisabledGroups = []string{"gpuscope.baseline.weekly"}
	rc.Builtin.DisabledRules = []string{"GPUTemperatureHigh"}
	require.NoError(t, r.ApplyConfig(cfg, rc))
	require.Contains(t, groupsOf(r), groupInfo{mine, "mine"})
	require.NotContains(t, groupsOf(r), groupInfo{BuiltinPrefix + "baseline.yml", "gpuscope.baseline.weekly"})
	require.Contains(t, groupsOf(r), groupInfo{BuiltinPrefix + "baseline.yml", "gpuscope.baseline.hourly"})
	require.NotContains(t, rulesOf(r, "gpuscope.gpu"), BuiltinPrefix+"gpu.yml:GPUTemperatureHigh")
	require.Contains(t, rulesOf(r, "gpuscope.gpu"), BuiltinPrefix+"gpu.yml:GPUSMUtilizationHigh")
	meta := rulesOf(r, "gpuscope.meta")
	require.Contains(t, meta, mine+":TargetDown")
	require.NotContains(t, meta, BuiltinPrefix+"meta.yml:TargetDown")
	require.Contains(t, meta, BuiltinPrefix+"meta.yml:GPUCollectorDown")
	before := groupsOf(r)

	// A syntax error: the error names the file and the line, the rules
	// loaded before stay.
	require.NoError(t, os.WriteFile(mine, []byte("groups:\n  - name: mine\n    rules:\n      - alert: Broken\n        expr: sum(rate(up[5m])\n"), 0o644))
	err := r.ApplyConfig(cfg, rc)
	require.ErrorContains(t, err, mine)
	require.ErrorContains(t, err, "5:15")
	require.ErrorContains(t, err, "could not parse expression")
	require.Equal(t, before, groupsOf(r))
	require.Error(t, CheckRuleFiles(cfg.RuleFiles, 0), "check config reports the same")

	require.NoError(t, os.WriteFile(mine, []byte("groups:\n  - name: mine\n    rules:\n      - alert: Broken\n        expr: up\n        fro: 1m\n"), 0o644))
	err = r.ApplyConfig(cfg, rc)
	require.ErrorContains(t, err, mine)
	require.ErrorContains(t, err, "line 6: field fro not found")
	require.Equal(t, 1, strings.Count(err.Error(), "line 6"), "reported once: %v", err)
	require.Equal(t, before, groupsOf(r))

	// Built-in rules off: only the user's files.
	require.NoError(t, os.WriteFile(mine, []byte("groups:\n  - name: mine\n    rules:\n      - record: x:y:z\n        expr: vector(1)\n"), 0o644))
	require.NoError(t, CheckRuleFiles(cfg.RuleFiles, 0))
	rc.Builtin.Enabled = false
	require.NoError(t, r.ApplyConfig(cfg, rc))
	require.Equal(t, []groupInfo{{mine, "mine"}}, groupsOf(r))
}

// TestRulesTimeScale: the setting rewrites the pack's parsed rules.
func TestRulesTimeScale(t *testing.T) {
	r := newTestRules(t, nil)
	cfg := loadPromConfig(t, "global: {evaluation_interval: 1s, scrape_interval: 1s}\n")
	rc := DefaultConfig()
	rc.Builtin.TimeScale = 60
	require.NoError(t, r.ApplyConfig(cfg, rc))
	require.ErrorContains(t, r.ApplyConfig(cfg, rc), "before the rule manager runs")
	runRules(t, r)
	var leak *promrules.AlertingRule
	for _, a := range r.Prometheus().AlertingRules() {
		if a.Name() == "GPUMemoryLeakSuspected" {
			leak = a
		}
	}
	require.NotNil(t, leak)
	require.Equal(t, 5*time.Second, leak.HoldDuration())
	require.Contains(t, leak.Query().String(), "min_over_time(DCGM_FI_DEV_FB_USED[10s] offset 1m30s)")
	for _, g := range r.Prometheus().RuleGroups() {
		if g.Name() == "gpuscope.baseline.weekly" {
			require.Equal(t, 5*time.Second, g.Interval())
		}
	}
}

// TestRulesNotifyAlertmanager: a firing alert goes from the real rule
// manager through the notifier to an Alertmanager API v2 endpoint, with
// the external labels, and decodes as Alertmanager's own models.
func TestRulesNotifyAlertmanager(t *testing.T) {
	received := make(chan models.PostableAlerts, 16)
	am := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/api/v2/alerts" || req.Method != http.MethodPost {
			http.NotFound(w, req)
			return
		}
		var alerts models.PostableAlerts
		if err := json.NewDecoder(req.Body).Decode(&alerts); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := alerts.Validate(strfmt.Default); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		received <- alerts
	}))
	defer am.Close()

	reg := prometheus.NewRegistry()
	sd, err := discovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	n, err := NewNotifier(NotifierOptions{Registerer: reg, SDMetrics: sd, DrainOnShutdown: true})
	require.NoError(t, err)
	r := newTestRules(t, n.Manager())

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "r.yml"), []byte(`groups:
  - name: mine
    rules:
      - alert: AlwaysFiring
        expr: vector(1)
        labels: {severity: info}
        annotations: {summary: always}
`), 0o644))
	cfg := loadPromConfig(t, fmt.Sprintf(`
global: {evaluation_interval: 200ms, external_labels: {cluster: lab}}
rule_files: [%q]
alerting:
  alertmanagers:
    - static_configs: [{targets: [%q]}]
`, filepath.Join(dir, "r.yml"), strings.TrimPrefix(am.URL, "http://")))
	rc := DefaultConfig()
	rc.Builtin.Enabled = false
	require.NoError(t, n.ApplyConfig(cfg, nil))
	require.NoError(t, r.ApplyConfig(cfg, rc))

	nctx, nstop := context.WithCancel(context.Background())
	ndone := make(chan error, 1)
	go func() { ndone <- n.Run(nctx) }()
	// Alerts fired before discovery has found the Alertmanager are resent
	// only after the resend delay (1m); start evaluating once it is known.
	require.Eventually(t, func() bool { return len(n.Manager().Alertmanagers()) == 1 }, 30*time.Second, 50*time.Millisecond)
	rctx, rstop := context.WithCancel(context.Background())
	rdone := make(chan error, 1)
	go func() { rdone <- r.Run(rctx) }()

	select {
	case alerts := <-received:
		require.Len(t, alerts, 1)
		a := alerts[0]
		require.Equal(t, models.LabelSet{"alertname": "AlwaysFiring", "severity": "info", "cluster": "lab"}, a.Labels)
		require.Equal(t, models.LabelSet{"summary": "always"}, a.Annotations)
		require.Equal(t, "http://gpu-1:9089/graph?g0.expr=vector%281%29&g0.tab=1", string(a.GeneratorURL))
		require.False(t, time.Time(a.StartsAt).IsZero())
	case <-time.After(30 * time.Second):
		t.Fatal("no alert reached the Alertmanager")
	}
	require.Equal(t, []string{am.URL + "/api/v2/alerts"}, urls(n.Manager().Alertmanagers()))

	// The rule manager stops first, then the notifier drains.
	rstop()
	require.NoError(t, <-rdone)
	nstop()
	require.NoError(t, <-ndone)
}

func urls(us []*url.URL) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.String())
	}
	return out
}

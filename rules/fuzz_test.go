package rules

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/query"
)

// FuzzRuleFile feeds the rule loading path of serve arbitrary user rule
// files, alone or with the built-in pack (whose rules a user rule of the
// same group and name replaces) at a fuzzed rules.builtin.time_scale. The
// loader must answer every file with an error that names it, loading
// nothing, or with groups the rule manager holds (each of the file's
// groups with all its rules, no built-in rule the file replaces) and that
// evaluate once against an empty storage without panicking: every rule is
// then evaluated (healthy or with its error). Seeds are in
// testdata/fuzz/FuzzRuleFile; run
//
//	go test -run '^$' -fuzz '^FuzzRuleFile$' -fuzztime 3m -fuzzminimizetime 0 ./rules
//
// An input takes tens of milliseconds (the pack is loaded and evaluated
// with it), so minimising each new interesting input, a minute by default,
// would leave almost no time to fuzzing.
func FuzzRuleFile(f *testing.F) {
	engine, err := query.NewEngine(query.EngineOptions{DataDir: f.TempDir(), Timeout: 2 * time.Second, MaxSamples: 1e6, MaxConcurrency: 4, LookbackDelta: 5 * time.Minute})
	require.NoError(f, err)
	f.Cleanup(func() { engine.Close() })
	p := parser.NewParser(parser.Options{})

	for _, pf := range Pack() {
		f.Add(pf.Data, true, 1.0)
	}
	f.Add([]byte("groups:\n  - name: gpuscope.meta\n    rules:\n      - alert: TargetDown\n        expr: up == 0\n        for: 15m\n"), true, 60.0)
	f.Add([]byte("groups:\n  - name: mine\n    interval: 10s\n    rules:\n      - record: job:up:sum\n        expr: sum by (job) (up)\n"), false, 1.0)

	f.Fuzz(func(t *testing.T, data []byte, builtin bool, timeScale float64) {
		rc := Config{Builtin: BuiltinConfig{Enabled: builtin, TimeScale: timeScale}}
		if !(timeScale > 0 && timeScale <= 1e6) {
			// Config validation refuses it before the rules are loaded
			// (validated here only then: Validate parses the whole pack).
			require.ErrorContains(t, rc.Validate(), "rules.builtin.time_scale")
			rc.Builtin.TimeScale = 1
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "user.yml")
		require.NoError(t, os.WriteFile(file, data, 0o644))
		cfg := promconfig.DefaultConfig
		cfg.RuleFiles = []string{filepath.Join(dir, "*.yml")}

		st := teststorage.New(t)
		r, err := NewManager(Options{
			Registerer:  prometheus.NewRegistry(),
			Engine:      engine,
			Queryable:   st,
			Appendable:  st,
			ExternalURL: &url.URL{Scheme: "http", Host: "gpu-1:9089", Path: "/"},
			Parser:      p,
		})
		require.NoError(t, err)
		// The groups wait for Run; it ends them at the end of the input.
		defer stopRules(t, r)

		if err := r.ApplyConfig(&cfg, rc); err != nil {
			require.Contains(t, err.Error(), file, "the error names the rule file")
			require.Empty(t, r.Prometheus().RuleGroups(), "nothing is loaded from a bad file")
			return
		}

		user, errs := rulefmt.Parse(data, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		require.Empty(t, errs, "loaded, but rulefmt refuses it")
		overridden := map[string]bool{}
		for _, g := range user.Groups {
			loaded := groupOf(r, file, g.Name)
			require.NotNil(t, loaded, "group %q of the file is not loaded", g.Name)
			require.Len(t, loaded.Rules(), len(g.Rules), "rules of group %q", g.Name)
			for _, rl := range g.Rules {
				overridden[g.Name+"\xff"+ruleName(rl)] = true
			}
		}
		for _, g := range r.Prometheus().RuleGroups() {
			if !strings.HasPrefix(g.File(), BuiltinPrefix) {
				require.Equal(t, file, g.File())
				continue
			}
			require.True(t, builtin, "built-in group %q loaded with the pack off", g.Name())
			for _, rl := range g.Rules() {
				require.False(t, overridden[g.Name()+"\xff"+rl.Name()], "built-in rule %s/%s runs next to the user's", g.Name(), rl.Name())
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		now := time.Now()
		for _, g := range r.Prometheus().RuleGroups() {
			g.Eval(ctx, now)
			for _, rl := range g.Rules() {
				require.NotEqual(t, promrules.HealthUnknown, rl.Health(), "rule %s/%s was not evaluated", g.Name(), rl.Name())
				if rl.Health() == promrules.HealthBad {
					require.Error(t, rl.LastError(), "rule %s/%s", g.Name(), rl.Name())
				}
			}
		}
	})
}

// groupOf returns the loaded group of that file and name, or nil.
func groupOf(r *Manager, file, name string) *promrules.Group {
	for _, g := range r.Prometheus().RuleGroups() {
		if g.File() == file && g.Name() == name {
			return g
		}
	}
	return nil
}

// stopRules runs r with a context already done: the manager starts its
// groups, which see that they are stopped, and Run returns once they have.
func stopRules(t *testing.T, r *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, r.Run(ctx))
}

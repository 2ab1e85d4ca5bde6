package rules

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestPackUnitTests runs the built-in pack's promtool-format unit tests.
// They are one goroutine evaluating the rules over up to a week of
// samples: nothing concurrent for the race detector to find, and 220 s of
// instrumented evaluation on two cores. scripts/test runs them without
// -race in its e2e tier (and e2e's TestPromtoolTestsPack with promtool).
func TestPackUnitTests(t *testing.T) {
	if raceDetector {
		t.Skip("evaluated without -race: scripts/test e2e runs go test -run TestPackUnitTests ./rules")
	}
	files, err := filepath.Glob("pack/tests/*.test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			runRuleTestFile(t, f)
		})
	}
}

func parsePack(t *testing.T) []rulefmt.RuleGroup {
	t.Helper()
	var groups []rulefmt.RuleGroup
	for _, f := range Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		require.Empty(t, errs, f.Name)
		groups = append(groups, rgs.Groups...)
	}
	return groups
}

// TestPackEveryRuleTested: every alert of the pack fires in some unit test
// and every recorded series is checked by some promql_expr_test, so a rule
// added without a test fails here.
func TestPackEveryRuleTested(t *testing.T) {
	files, err := filepath.Glob("pack/tests/*.test.yml")
	require.NoError(t, err)
	fired := map[string]bool{}
	var exprs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var utf unitTestFile
		require.NoError(t, yaml.Unmarshal(b, &utf))
		for _, tg := range utf.Tests {
			for _, a := range tg.AlertRuleTests {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
			for _, e := range tg.PromqlExprTests {
				if len(e.ExpSamples) > 0 {
					exprs = append(exprs, e.Expr)
				}
			}
		}
	}
	for _, g := range parsePack(t) {
		for _, r := range g.Rules {
			if r.Alert != "" {
				require.True(t, fired[r.Alert], "alert %s (group %s) fires in no unit test", r.Alert, g.Name)
				continue
			}
			re := regexp.MustCompile(`(^|[^a-z0-9_:])` + regexp.QuoteMeta(r.Record) + `($|[^a-z0-9_:])`)
			require.True(t, slices.ContainsFunc(exprs, re.MatchString), "recording rule %s (group %s) is checked by no promql_expr_test", r.Record, g.Name)
		}
	}
}

// TestPackAlertsDocumented: every alert says what it means and what to
// look at next, and how bad it is.
func TestPackAlertsDocumented(t *testing.T) {
	groups := parsePack(t)
	require.NotEmpty(t, groups)
	for _, g := range groups {
		require.True(t, strings.HasPrefix(g.Name, "gpuscope."), "group %s", g.Name)
		for _, r := range g.Rules {
			if r.Alert == "" {
				require.Regexp(t, `^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`, r.Record, "record name level:metric:operations")
				continue
			}
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "severity of %s", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "summary of %s", r.Alert)
			require.Greater(t, len(r.Annotations["description"]), 200, "description of %s says what to look at next", r.Alert)
			if runbookGroups[g.Name] {
				require.Greater(t, len(r.Annotations["runbook"]), 100, "runbook of %s says what to do", r.Alert)
			}
			for k, v := range r.Annotations {
				// NVML monitors count as users of a GPU: nvidia-smi
				// refuses to reset one while gpuscope holds it.
				if gpuReset.MatchString(v) {
					require.Contains(t, v, "systemctl stop gpuscope", "%s of %s tells to reset a GPU without stopping gpuscope first", k, r.Alert)
				}
			}
		}
	}
}

// runbookGroups are the groups whose alerts each have a runbook
// annotation: what to do (drain, reset, reboot, RMA).
var runbookGroups = map[string]bool{"gpuscope.health": true, "gpuscope.host": true}

// gpuReset is an instruction to reset a GPU.
var gpuReset = regexp.MustCompile(`nvidia-smi (-r|--gpu-reset) -i`)

func TestGPUResetPattern(t *testing.T) {
	for text, want := range map[string]bool{
		"run nvidia-smi -r -i {{ $labels.gpu }}":       true,
		"nvidia-smi --gpu-reset -i 3":                  true,
		"nvidia-smi -r cannot reach a GPU that is off": false,
		"nvidia-smi -q -d ROW_REMAPPER":                false,
	} {
		require.Equal(t, want, gpuReset.MatchString(text), text)
	}
}

// TestPackAsOneFile: `gpuscope rules export` without a directory prints
// one valid rule file holding every group.
func TestPackAsOneFile(t *testing.T) {
	for _, f := range Pack() {
		require.Contains(t, string(f.Data), "\ngroups:\n", "%s: a header comment, then groups:", f.Name)
	}
	rgs, errs := rulefmt.Parse(PackAsOneFile(), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs)
	var got []string
	for _, g := range rgs.Groups {
		got = append(got, g.Name)
	}
	slices.Sort(got)
	groups, _ := packNames()
	require.Equal(t, groups, got)
}

func TestScaleExpr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		s        float64
		minRange time.Duration
	}{
		{`rate(x[5m])`, `rate(x[10s])`, 30, 0},
		{`rate(x[5m])`, `rate(x[1m])`, 30, time.Minute},
		{`rate(x[30s])`, `rate(x[30s])`, 2, time.Minute}, // the floor never lengthens a window
		{`min_over_time(x[10m] offset 30m)`, `min_over_time(x[10s] offset 30s)`, 60, time.Second},
		{`x offset -1h`, `x offset -1m`, 60, 0},
		{`max_over_time(rate(x[5m])[1h:1m] offset 1h)`, `max_over_time(rate(x[5s])[1m:1s] offset 1m)`, 60, 0},
		{`predict_linear(x[1h], 4 * 3600)`, `predict_linear(x[1m], (4 * 3600) / 60)`, 60, 0},
		{`rate(x[1m])`, `rate(x[333ms])`, 180, 0},
		{`vector(1m) * 2 + 60`, `vector(1s) * 2 + 60`, 60, time.Minute}, // a duration literal, not a number
		{`sum_over_time(x[1h]) * 1m / 3600`, `sum_over_time(x[2m]) * 2s / 3600`, 30, 0},
	} {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(tc.in)
		require.NoError(t, err)
		require.NoError(t, ScaleExpr(expr, tc.s, tc.minRange))
		require.Equal(t, tc.want, expr.String(), "%s / %g", tc.in, tc.s)
	}
}

func TestApplyPackScalesFiltersAndOverrides(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	load := func(name string) *rulefmt.RuleGroups {
		data, err := packFS.ReadFile("pack/" + name)
		require.NoError(t, err)
		rgs, errs := rulefmt.Parse(data, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
		require.Empty(t, errs)
		return rgs
	}
	find := func(rgs *rulefmt.RuleGroups, name string) *rulefmt.Rule {
		for _, g := range rgs.Groups {
			for i := range g.Rules {
				if ruleName(g.Rules[i]) == name {
					return &g.Rules[i]
				}
			}
		}
		return nil
	}

	t.Run("time scale", func(t *testing.T) {
		rgs := load("diagnosis.yml")
		_, err := applyPack(rgs, packOptions{timeScale: 60, minRange: 4 * time.Second}, p)
		require.NoError(t, err)
		leak := find(rgs, "GPUMemoryLeakSuspected")
		require.Equal(t, model.Duration(5*time.Second), leak.For)
		require.Contains(t, leak.Expr, "min_over_time(DCGM_FI_DEV_FB_USED[10s] offset 30s)")
		require.Contains(t, leak.Expr, "stddev_over_time(DCGM_FI_DEV_GPU_UTIL[1m])")
		require.Contains(t, find(rgs, "gpu:dcgm_fi_dev_gpu_util:avg5m").Expr, "[5s]")
		// The text says the scaled durations.
		require.Contains(t, leak.Annotations["description"], "in each of the last three 30-second periods")
		require.Contains(t, leak.Annotations["description"], "over the last 4 minutes")
		require.Contains(t, find(rgs, "GPUMemoryExhaustionPredicted").Annotations["summary"], "within 4 minutes")

		rgs = load("baseline.yml")
		_, err = applyPack(rgs, packOptions{timeScale: 60, minRange: 4 * time.Second}, p)
		require.NoError(t, err)
		require.Equal(t, model.Duration(5*time.Second), rgs.Groups[0].Interval, "group interval 5m / 60")

		rgs = load("accounting.yml")
		_, err = applyPack(rgs, packOptions{timeScale: 60, minRange: 4 * time.Second}, p)
		require.NoError(t, err)
		hourly := rgs.Groups[1]
		require.Equal(t, "gpuscope.accounting.hourly", hourly.Name)
		require.Equal(t, model.Duration(time.Minute), hourly.Interval, "1h / 60")
		require.NotNil(t, hourly.QueryOffset)
		require.Equal(t, model.Duration(5*time.Second), *hourly.QueryOffset, "its query offset, 5m / 60, still five of the minute group's samples behind")

		// The demo: 30×, 15 s scrapes. The hour's windows are floored at
		// ten scrapes (150 s), and so is the hour itself, so that the
		// samples of the roll-up do not overlap; the minute group keeps
		// its 2 s.
		rgs = load("accounting.yml")
		_, err = applyPack(rgs, packOptions{timeScale: 30, minRange: 150 * time.Second}, p)
		require.NoError(t, err)
		require.Equal(t, model.Duration(2*time.Second), rgs.Groups[0].Interval)
		hourly = rgs.Groups[1]
		require.Equal(t, model.Duration(150*time.Second), hourly.Interval)
		require.Contains(t, find(rgs, "gpu_workload:gpu_held:sum1h").Expr, "[2m30s]")
	})

	t.Run("disabled groups and rules, overrides", func(t *testing.T) {
		rgs := load("baseline.yml")
		repl, err := applyPack(rgs, packOptions{
			timeScale:      1,
			disabledGroups: map[string]bool{"gpuscope.baseline.hourly": true},
			disabledRules:  map[string]bool{"GPUMemoryOffBaseline": true},
			overrides:      map[string]map[string]string{"gpuscope.baseline.weekly": {"ContainerCPUOffBaseline": "/etc/mine.yml"}, "other": {"GPUUtilizationOffBaseline": "/x.yml"}},
		}, p)
		require.NoError(t, err)
		require.Len(t, rgs.Groups, 1)
		require.Equal(t, "gpuscope.baseline.weekly", rgs.Groups[0].Name)
		require.Nil(t, find(rgs, "GPUMemoryOffBaseline"))
		require.Nil(t, find(rgs, "ContainerCPUOffBaseline"))
		require.NotNil(t, find(rgs, "GPUUtilizationOffBaseline"), "an override counts only in a group of the same name")
		require.Equal(t, []replaced{{"gpuscope.baseline.weekly", "ContainerCPUOffBaseline", "/etc/mine.yml"}}, repl)
	})
}

func TestRulesConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"time scale 0", func(c *Config) { c.Builtin.TimeScale = 0 }, "rules.builtin.time_scale"},
		{"unknown group", func(c *Config) { c.Builtin.DisabledGroups = []string{"gpuscope.gpus"} }, `no built-in group "gpuscope.gpus"`},
		{"enabling a group that runs anyway", func(c *Config) { c.Builtin.EnabledGroups = []string{"gpuscope.gpu"} },
			`rules.builtin.enabled_groups: "gpuscope.gpu" is not an opt-in group (want one of gpuscope.notify; the others run unless disabled_groups names them)`},
		{"unknown rule", func(c *Config) { c.Builtin.DisabledRules = []string{"GPUTempHigh"} }, `no built-in rule "GPUTempHigh"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
	c := DefaultConfig()
	c.Builtin.DisabledGroups = []string{"gpuscope.baseline.weekly"}
	c.Builtin.DisabledRules = []string{"GPUMemoryAlmostFull", "gpu:bottleneck:class"}
	c.Builtin.EnabledGroups = OptInGroups
	require.NoError(t, c.Validate())
	groups, _ := packNames()
	for _, g := range OptInGroups {
		require.Contains(t, groups, g, "an opt-in group is a group of the pack")
		require.True(t, DefaultConfig().Builtin.disabledGroups()[g], "%s is off by default", g)
		require.False(t, c.Builtin.disabledGroups()[g], "%s on when enabled", g)
	}
}

func TestScaleText(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		s        float64
	}{
		{"has been busy for 5 minutes.", "has been busy for 5 seconds.", 60},
		{"for 5\n minutes", "for 5 seconds", 60},
		{"in the last hour; over the last 7 days", "in the last minute; over the last 168 minutes", 60},
		{"in the last 15 minutes", "in the last 30 seconds", 30},
		{"for an hour, within a week", "for a minute, within 168 minutes", 60},
		{"its own 7-day baseline, the 10-minute floor", "its own 168-minute baseline, the 10-second floor", 60},
		{"within 4 hours", "within 2057.143 seconds", 7},
		{"for 1 hour", "for 1 minute", 60},
		{"for 1 hour", "for 2 minutes", 30},
		{"the last hour", "the last 2 minutes", 30},
		{"for 30 minutes", "for 0.002 seconds", 1e6},
		// Template actions and words that are no durations stay.
		{`{{ with printf "x[5m]" | query }}5 minutes{{ end }} and 5 minutes`, `{{ with printf "x[5m]" | query }}5 seconds{{ end }} and 5 seconds`, 60},
		{`{{ printf "%d minutes" 5 }}, 5 GPUs, a dayroom, instance_id:container_cpu_usage_seconds:rate5m`,
			`{{ printf "%d minutes" 5 }}, 5 GPUs, a dayroom, instance_id:container_cpu_usage_seconds:rate5m`, 60},
	} {
		require.Equal(t, tc.want, scaleText(tc.in, tc.s), "%q / %g", tc.in, tc.s)
	}
}

// forPhrase is how an annotation says how long the alert's condition has
// held: "for 5 minutes".
var forPhrase = regexp.MustCompile(`\bfor (\d+(?:\.\d+)?|an?)\s+(second|minute|hour|day|week)s?\b`)

// checkForPhrases: every "for <duration>" an alert's summary or
// description states is its `for`, and alerts without one state none.
func checkForPhrases(t *testing.T, groups []rulefmt.RuleGroup, what string) {
	t.Helper()
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			text := templateAction.ReplaceAllString(r.Annotations["summary"]+"\n"+r.Annotations["description"], "")
			for _, m := range forPhrase.FindAllStringSubmatch(text, -1) {
				n := 1.0
				if m[1] != "a" && m[1] != "an" {
					var err error
					n, err = strconv.ParseFloat(m[1], 64)
					require.NoError(t, err)
				}
				d := time.Duration(math.Round(n * float64(durationUnits[m[2]])))
				require.Equal(t, time.Duration(r.For), d, "%s: alert %s says %q but its `for` is %s", what, r.Alert, m[0], time.Duration(r.For))
			}
		}
	}
}

// TestPackTextDurations: the durations the alerts' text states are the
// rules' (a "for 5 minutes" is the `for`), also after time_scale, and each
// is in a form scaleText rewrites.
func TestPackTextDurations(t *testing.T) {
	groups := parsePack(t)
	checkForPhrases(t, groups, "pack")

	durationWord := regexp.MustCompile(`(?i)\b(?:seconds?|minutes?|hours?|days?|weeks?|hourly|daily|weekly|half-hours?|fortnights?)\b`)
	for _, g := range groups {
		for _, r := range g.Rules {
			for k, v := range r.Annotations {
				rest := durationPhrase.ReplaceAllString(templateAction.ReplaceAllString(v, ""), "")
				rest = strings.ReplaceAll(rest, "GPU-hours", "") // a unit of work, not a duration
				require.NotRegexp(t, durationWord, rest, "alert %s, %s: a duration time_scale cannot rewrite; write it as \"5 minutes\", \"an hour\", \"7-day\" or \"the last hour\"", r.Alert, k)
			}
		}
	}

	p := parser.NewParser(parser.Options{})
	for _, s := range []float64{60, 7, 1e6} {
		var scaled []rulefmt.RuleGroup
		for _, f := range Pack() {
			rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
			require.Empty(t, errs)
			_, err := applyPack(rgs, packOptions{timeScale: s, minRange: time.Second}, p)
			require.NoError(t, err)
			scaled = append(scaled, rgs.Groups...)
		}
		checkForPhrases(t, scaled, fmt.Sprintf("time_scale %g", s))
	}
}

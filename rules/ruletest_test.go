package rules

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// This file runs rule unit tests written in promtool's format (`promtool
// test rules`, https://prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/)
// with the same steps promtool takes (cmd/promtool/unittest.go): load the
// input series lazily, evaluate every group at each evaluation interval,
// compare the firing alerts (labels and annotations) at each eval_time and
// the results of promql_expr_test at the end. promtool itself is a main
// package that pulls in every service discovery; building it from a test
// would take minutes, so its logic is reproduced here on the same
// Prometheus packages. The test files also run under a real promtool.

type unitTestFile struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval model.Duration `yaml:"evaluation_interval,omitempty"`
	GroupEvalOrder     []string       `yaml:"group_eval_order"`
	Tests              []testGroup    `yaml:"tests"`
	FuzzyCompare       bool           `yaml:"fuzzy_compare,omitempty"`
}

type testGroup struct {
	Interval        model.Duration    `yaml:"interval"`
	InputSeries     []inputSeries     `yaml:"input_series"`
	AlertRuleTests  []alertTestCase   `yaml:"alert_rule_test,omitempty"`
	PromqlExprTests []promqlTestCase  `yaml:"promql_expr_test,omitempty"`
	ExternalLabels  map[string]string `yaml:"external_labels,omitempty"`
	ExternalURL     string            `yaml:"external_url,omitempty"`
	TestGroupName   string            `yaml:"name,omitempty"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTestCase struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string         `yaml:"alertname"`
	ExpAlerts []expAlert     `yaml:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels,flow"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

type promqlTestCase struct {
	Expr       string          `yaml:"expr"`
	EvalTime   model.Duration  `yaml:"eval_time"`
	ExpSamples []expSampleSpec `yaml:"exp_samples"`
}

type expSampleSpec struct {
	Labels string  `yaml:"labels"`
	Value  float64 `yaml:"value"`
}

// runRuleTestFile runs every test group of a promtool test file as a
// subtest.
func runRuleTestFile(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var utf unitTestFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&utf), file)
	var ruleFiles []string
	for _, rf := range utf.RuleFiles {
		if !filepath.IsAbs(rf) {
			rf = filepath.Join(filepath.Dir(file), rf)
		}
		m, err := filepath.Glob(rf)
		require.NoError(t, err)
		require.NotEmpty(t, m, "%s: rule_files %s matches nothing", file, rf)
		ruleFiles = append(ruleFiles, m...)
	}
	if utf.EvaluationInterval == 0 {
		utf.EvaluationInterval = model.Duration(time.Minute)
	}
	order := map[string]int{}
	for i, g := range utf.GroupEvalOrder {
		order[g] = i
	}
	for i, tg := range utf.Tests {
		name := tg.TestGroupName
		if name == "" {
			name = fmt.Sprintf("unnamed#%d", i)
		}
		if tg.Interval == 0 {
			tg.Interval = utf.EvaluationInterval
		}
		t.Run(name, func(t *testing.T) {
			for _, err := range tg.run(time.Duration(utf.EvaluationInterval), order, utf.FuzzyCompare, ruleFiles) {
				t.Error(err)
			}
		})
	}
}

func (tg *testGroup) run(evalInterval time.Duration, order map[string]int, fuzzy bool, ruleFiles []string) []error {
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", tg.Interval)
	for _, s := range tg.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	p := parser.NewParser(parser.Options{})
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: p,
	})
	if err != nil {
		return []error{err}
	}
	defer suite.Close()
	suite.SubqueryInterval = evalInterval

	m := promrules.NewManager(&promrules.ManagerOptions{
		QueryFunc:    promrules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*promrules.Alert) {},
		Parser:       p,
	})
	groupsMap, errs := m.LoadGroups(time.Duration(tg.Interval), labels.FromMap(tg.ExternalLabels), tg.ExternalURL, nil, false, ruleFiles...)
	if errs != nil {
		return errs
	}
	groups := make([]*promrules.Group, 0, len(groupsMap))
	for _, g := range groupsMap {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return order[groups[i].Name()] < order[groups[j].Name()] })
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*promrules.AlertingRule); ok {
				ar.SetRestored(true) // so that ALERTS is written, as promtool does
			}
		}
	}

	mint := time.Unix(0, 0).UTC()
	var maxEval model.Duration
	alertTests := map[model.Duration][]alertTestCase{}
	for _, a := range tg.AlertRuleTests {
		if a.Alertname == "" {
			return []error{fmt.Errorf("alert_rule_test at %s lacks alertname", a.EvalTime)}
		}
		alertTests[a.EvalTime] = append(alertTests[a.EvalTime], a)
		maxEval = max(maxEval, a.EvalTime)
	}
	for _, e := range tg.PromqlExprTests {
		maxEval = max(maxEval, e.EvalTime)
	}
	evalTimes := make([]model.Duration, 0, len(alertTests))
	for k := range alertTests {
		evalTimes = append(evalTimes, k)
	}
	slices.Sort(evalTimes)
	floatEq := func(a, b float64) bool {
		return a == b || (math.IsNaN(a) && math.IsNaN(b)) ||
			fuzzy && (math.Nextafter(a, math.Inf(-1)) == b || math.Nextafter(a, math.Inf(1)) == b)
	}

	var out []error
	curr := 0
	for ts := mint; !ts.After(mint.Add(time.Duration(maxEval))); ts = ts.Add(evalInterval) {
		var evalErrs []error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErrs = append(evalErrs, err)
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErrs = append(evalErrs, fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(mint), r.LastError()))
					}
				}
			}
		})
		if len(evalErrs) > 0 {
			return append(out, evalErrs...)
		}
		// Alerts asked for at eval_time are those of the evaluation at
		// ts <= eval_time < ts+interval.
		for curr < len(evalTimes) && time.Duration(evalTimes[curr]) < ts.Add(evalInterval).Sub(mint) {
			at := evalTimes[curr]
			curr++
			got := map[string][]alertLA{}
			for _, g := range groups {
				for _, r := range g.Rules() {
					ar, ok := r.(*promrules.AlertingRule)
					if !ok {
						continue
					}
					for _, a := range ar.ActiveAlerts() {
						if a.State == promrules.StateFiring {
							got[ar.Name()] = append(got[ar.Name()], alertLA{a.Labels.Map(), a.Annotations.Map()})
						}
					}
				}
			}
			for _, tc := range alertTests[at] {
				var exp []alertLA
				for _, a := range tc.ExpAlerts {
					l := map[string]string{labels.AlertName: tc.Alertname}
					for k, v := range a.ExpLabels {
						l[k] = v
					}
					ann := a.ExpAnnotations
					if ann == nil {
						ann = map[string]string{}
					}
					exp = append(exp, alertLA{l, ann})
				}
				g := got[tc.Alertname]
				sortAlerts(exp)
				sortAlerts(g)
				if fmt.Sprint(exp) != fmt.Sprint(g) {
					out = append(out, fmt.Errorf("%s: alertname %s, time %s:\n  exp: %v\n  got: %v%s", tg.TestGroupName, tc.Alertname, at, exp, g, dumpAlerts(g)))
				}
			}
		}
	}

	for _, tc := range tg.PromqlExprTests {
		got, err := instantQuery(suite.Context(), suite.QueryEngine(), suite.Queryable(), tc.Expr, mint.Add(time.Duration(tc.EvalTime)))
		if err != nil {
			out = append(out, fmt.Errorf("%s: expr %q at %s: %w", tg.TestGroupName, tc.Expr, tc.EvalTime, err))
			continue
		}
		var exp []promql.Sample
		for _, s := range tc.ExpSamples {
			lb, err := p.ParseMetric(s.Labels)
			if err != nil {
				out = append(out, fmt.Errorf("%s: expr %q: labels %q: %w", tg.TestGroupName, tc.Expr, s.Labels, err))
				continue
			}
			exp = append(exp, promql.Sample{Metric: lb, F: s.Value})
		}
		sort.Slice(exp, func(i, j int) bool { return labels.Compare(exp[i].Metric, exp[j].Metric) < 0 })
		sort.Slice(got, func(i, j int) bool { return labels.Compare(got[i].Metric, got[j].Metric) < 0 })
		same := len(exp) == len(got)
		for i := 0; same && i < len(exp); i++ {
			same = labels.Equal(exp[i].Metric, got[i].Metric) && floatEq(exp[i].F, got[i].F)
		}
		if !same {
			out = append(out, fmt.Errorf("%s: expr %q at %s:\n  exp: %v\n  got: %v", tg.TestGroupName, tc.Expr, tc.EvalTime, exp, got))
		}
	}
	return out
}

type alertLA struct{ Labels, Annotations map[string]string }

// dumpAlerts renders got alerts as exp_alerts YAML when RULETEST_DUMP is
// set: after changing an annotation, review the rendered text and paste it.
func dumpAlerts(got []alertLA) string {
	if os.Getenv("RULETEST_DUMP") == "" {
		return ""
	}
	var exp []expAlert
	for _, a := range got {
		l := maps.Clone(a.Labels)
		delete(l, labels.AlertName)
		exp = append(exp, expAlert{ExpLabels: l, ExpAnnotations: a.Annotations})
	}
	b, _ := yaml.Marshal(map[string]any{"exp_alerts": exp})
	return "\n" + string(b)
}

func (a alertLA) String() string {
	return fmt.Sprintf("{labels: %v, annotations: %v}", labels.FromMap(a.Labels), labels.FromMap(a.Annotations))
}

func sortAlerts(a []alertLA) {
	sort.Slice(a, func(i, j int) bool {
		return labels.Compare(labels.FromMap(a[i].Labels), labels.FromMap(a[j].Labels)) < 0
	})
}

func instantQuery(ctx context.Context, engine promql.QueryEngine, q storage.Queryable, qs string, ts time.Time) (promql.Vector, error) {
	qry, err := engine.NewInstantQuery(ctx, q, nil, qs, ts)
	if err != nil {
		return nil, err
	}
	res := qry.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		return v, nil
	case promql.Scalar:
		return promql.Vector{{T: v.T, F: v.V, Metric: labels.EmptyLabels()}}, nil
	default:
		return nil, fmt.Errorf("result is a %s, not a vector or scalar", res.Value.Type())
	}
}

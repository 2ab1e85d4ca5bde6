package rules

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// The built-in rule pack: ordinary Prometheus rule files, embedded so that
// `gpuscope serve` evaluates them with no file to install, and printed by
// `gpuscope rules export` so that users can read and copy them. Their unit
// tests, in promtool's format, are in pack/tests.
//
//go:embed pack/*.yml
var packFS embed.FS

// BuiltinPrefix marks the built-in pack's files among the rule files the
// rule manager loads; /api/v1/rules shows them as builtin:<file>.yml.
// Rule files from the config are absolute paths, so they never start with
// it.
const BuiltinPrefix = "builtin:"

// PackFile is one file of the built-in pack.
type PackFile struct {
	Name string // e.g. gpu.yml
	Data []byte
}

// Pack returns the built-in rule files in a stable order.
func Pack() []PackFile {
	entries, err := fs.ReadDir(packFS, "pack")
	if err != nil {
		panic(fmt.Sprintf("read embedded rule pack: %v", err)) // a build defect
	}
	var files []PackFile
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".yml" {
			continue
		}
		data, err := packFS.ReadFile("pack/" + e.Name())
		if err != nil {
			panic(fmt.Sprintf("read embedded rule file %s: %v", e.Name(), err))
		}
		files = append(files, PackFile{Name: e.Name(), Data: data})
	}
	return files
}

// ExportPack writes the pack's files into dir (created if missing), as
// they are embedded, and returns their paths.
func ExportPack(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	var paths []string
	for _, f := range Pack() {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return nil, fmt.Errorf("write rule file: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// PackAsOneFile returns the whole pack as one valid rule file: the files'
// group lists joined under a single `groups:` key, their comments kept.
// Every pack file is written as a header comment, `groups:`, and the list
// (a test keeps it so).
func PackAsOneFile() []byte {
	var b bytes.Buffer
	for i, f := range Pack() {
		fmt.Fprintf(&b, "# ---- %s%s\n", BuiltinPrefix, f.Name)
		data := f.Data
		if i > 0 {
			data = bytes.Replace(data, []byte("\ngroups:\n"), []byte("\n"), 1)
		}
		b.Write(data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// BuiltinConfig is the `rules.builtin` section of gpuscope's config file:
// which built-in rules run, and how fast their clock runs.
type BuiltinConfig struct {
	// Enabled runs the built-in pack (default true).
	Enabled bool `yaml:"enabled"`
	// DisabledGroups are built-in groups left out, by name
	// (gpuscope.baseline.weekly, ...).
	DisabledGroups []string `yaml:"disabled_groups"`
	// EnabledGroups are the built-in groups that are off unless named here
	// (OptInGroups: the notices of notify.yml).
	EnabledGroups []string `yaml:"enabled_groups"`
	// DisabledRules are built-in rules left out in every group, by alert or
	// record name.
	DisabledRules []string `yaml:"disabled_rules"`
	// TimeScale divides every duration in the pack (range windows, offsets,
	// subquery steps, `for`, `keep_firing_for`, group intervals and
	// predict_linear's horizon) by this factor, by rewriting the parsed
	// rules; range windows are kept at ten scrape intervals or more, so
	// that rate() over jittery scrapes stays steady. The durations the
	// alerts' annotations state ("for 5 minutes", "in the last hour") are
	// divided alike, so the text stays true. It is for demos and tests that
	// run simulated GPUs faster than real time (gpu.sim.time_scale); 1 in
	// production.
	TimeScale float64 `yaml:"time_scale"`
}

// OptInGroups are the built-in groups that run only when
// rules.builtin.enabled_groups names them: notices of events rather than
// alerts of faults (rules/pack/notify.yml), which a user routes to the
// people they concern before turning them on.
var OptInGroups = []string{"gpuscope.notify"}

// disabledGroups are the built-in groups b leaves out: those it disables
// and the opt-in groups it does not enable.
func (b BuiltinConfig) disabledGroups() map[string]bool {
	out := map[string]bool{}
	for _, g := range b.DisabledGroups {
		out[g] = true
	}
	for _, g := range OptInGroups {
		if !slices.Contains(b.EnabledGroups, g) {
			out[g] = true
		}
	}
	return out
}

// Config is the `rules:` section of gpuscope's config file. The
// user's own rule files are the Prometheus section rule_files.
type Config struct {
	Builtin BuiltinConfig `yaml:"builtin"`
}

// DefaultConfig runs the whole pack at real time.
func DefaultConfig() Config {
	return Config{Builtin: BuiltinConfig{Enabled: true, TimeScale: 1}}
}

// Validate reports the first bad value, named as in the file.
func (c Config) Validate() error {
	b := c.Builtin
	if !(b.TimeScale > 0) || b.TimeScale > 1e6 {
		return fmt.Errorf("rules.builtin.time_scale: must be above 0 and at most 1000000, got %g", b.TimeScale)
	}
	groups, rules := packNames()
	for _, g := range b.DisabledGroups {
		if !slices.Contains(groups, g) {
			return &UnknownNameError{Key: "rules.builtin.disabled_groups", Kind: "group", Name: g, Known: groups}
		}
	}
	for _, g := range b.EnabledGroups {
		if !slices.Contains(OptInGroups, g) {
			return fmt.Errorf("rules.builtin.enabled_groups: %q is not an opt-in group (want one of %s; the others run unless disabled_groups names them)", g, strings.Join(OptInGroups, ", "))
		}
	}
	for _, r := range b.DisabledRules {
		if !slices.Contains(rules, r) {
			return &UnknownNameError{Key: "rules.builtin.disabled_rules", Kind: "rule", Name: r, Known: rules}
		}
	}
	return nil
}

// UnknownNameError is a rules.builtin setting that names no built-in
// group or rule; Known lets the config loader suggest the one meant.
type UnknownNameError struct {
	Key, Kind, Name string
	Known           []string
}

func (e *UnknownNameError) Error() string {
	if e.Kind == "group" {
		return fmt.Sprintf("%s: no built-in group %q (want one of %s)", e.Key, e.Name, strings.Join(e.Known, ", "))
	}
	return fmt.Sprintf("%s: no built-in %s %q (`gpuscope rules export` lists them)", e.Key, e.Kind, e.Name)
}

// packNames returns the pack's group names and rule names (alert or
// record), each sorted and without duplicates.
func packNames() (groups, rules []string) {
	for _, f := range Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			panic(fmt.Sprintf("embedded rule file %s is invalid: %v", f.Name, errors.Join(errs...)))
		}
		for _, g := range rgs.Groups {
			groups = append(groups, g.Name)
			for _, r := range g.Rules {
				rules = append(rules, ruleName(r))
			}
		}
	}
	slices.Sort(groups)
	slices.Sort(rules)
	return slices.Compact(groups), slices.Compact(rules)
}

func ruleName(r rulefmt.Rule) string {
	if r.Alert != "" {
		return r.Alert
	}
	return r.Record
}

// packOptions are what the loader applies to the pack's files.
type packOptions struct {
	disabledGroups map[string]bool
	disabledRules  map[string]bool
	// overrides maps a group name to the rule names the user's rule files
	// define in a group of that name, and the file that does.
	overrides map[string]map[string]string
	timeScale float64
	minRange  time.Duration
}

// replaced is a built-in rule left out because a user rule replaces it.
type replaced struct{ group, rule, file string }

// applyPack filters and scales the parsed groups of one pack file.
func applyPack(rgs *rulefmt.RuleGroups, o packOptions, p parser.Parser) ([]replaced, error) {
	var (
		groups []rulefmt.RuleGroup
		out    []replaced
	)
	for _, g := range rgs.Groups {
		if o.disabledGroups[g.Name] {
			continue
		}
		var kept []rulefmt.Rule
		for _, r := range g.Rules {
			name := ruleName(r)
			if o.disabledRules[name] {
				continue
			}
			if file, ok := o.overrides[g.Name][name]; ok {
				out = append(out, replaced{g.Name, name, file})
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			continue
		}
		g.Rules = kept
		if o.timeScale != 1 {
			if err := scaleGroup(&g, o.timeScale, o.minRange, p); err != nil {
				return nil, err
			}
		}
		groups = append(groups, g)
	}
	rgs.Groups = groups
	return out, nil
}

// scaleGroup divides the group's durations by s (see
// BuiltinConfig.TimeScale) by rewriting each rule's parsed expression: the
// rules that run are the pack's rules, with shorter windows.
func scaleGroup(g *rulefmt.RuleGroup, s float64, minRange time.Duration, p parser.Parser) error {
	if g.Interval != 0 {
		floor := time.Millisecond
		rollup, err := isRollup(g, p)
		if err != nil {
			return err
		}
		if rollup {
			// Each sample of a roll-up covers its interval: floored like
			// its windows, or the samples overlap and their sums count
			// twice what lies in both.
			floor = minRange
		}
		g.Interval = model.Duration(scaleDuration(time.Duration(g.Interval), s, floor))
	}
	if g.QueryOffset != nil {
		offset := model.Duration(scaleDuration(time.Duration(*g.QueryOffset), s, 0))
		g.QueryOffset = &offset
	}
	for i := range g.Rules {
		r := &g.Rules[i]
		expr, err := p.ParseExpr(r.Expr)
		if err != nil {
			return fmt.Errorf("group %q, rule %q: %w", g.Name, ruleName(*r), err)
		}
		if err := ScaleExpr(expr, s, minRange); err != nil {
			return fmt.Errorf("group %q, rule %q: %w", g.Name, ruleName(*r), err)
		}
		r.Expr = expr.String()
		r.For = model.Duration(scaleDuration(time.Duration(r.For), s, 0))
		r.KeepFiringFor = model.Duration(scaleDuration(time.Duration(r.KeepFiringFor), s, 0))
		for k, v := range r.Annotations {
			r.Annotations[k] = scaleText(v, s)
		}
	}
	return nil
}

// isRollup reports whether every range window of the group's rules is
// its interval, as in gpuscope.accounting.hourly: each sample sums or
// takes the extremes of the interval before it.
func isRollup(g *rulefmt.RuleGroup, p parser.Parser) (bool, error) {
	windows := 0
	for _, r := range g.Rules {
		expr, err := p.ParseExpr(r.Expr)
		if err != nil {
			return false, fmt.Errorf("group %q, rule %q: %w", g.Name, ruleName(r), err)
		}
		rollup := true
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if m, ok := node.(*parser.MatrixSelector); ok {
				windows++
				rollup = rollup && m.Range == time.Duration(g.Interval)
			}
			return nil
		})
		if !rollup {
			return false, nil
		}
	}
	return windows > 0, nil
}

// durationPhrase matches a duration as the pack's annotations state it:
// a number or an article and a unit ("5 minutes", "an hour"), a number
// and a unit as an adjective ("7-day"), or "last" and a unit ("the last
// hour"). A test keeps every duration in the pack's annotations in one of
// these forms, so that scaleText rewrites them all.
var durationPhrase = regexp.MustCompile(`\b(?:(\d+|an?)(-|\s+)|(last)\s+)(second|minute|hour|day|week)s?\b`)

// templateAction matches a template action of an annotation, which
// scaleText leaves alone.
var templateAction = regexp.MustCompile(`(?s)\{\{.*?\}\}`)

var durationUnits = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour,
	"day": 24 * time.Hour, "week": 7 * 24 * time.Hour,
}

// scaleText divides the durations an annotation states by s, as
// scaleGroup divides the rule's, so that "for 5 minutes" says what `for`
// is after scaling. Template actions are left alone.
func scaleText(text string, s float64) string {
	var b strings.Builder
	last := 0
	for _, m := range templateAction.FindAllStringIndex(text, -1) {
		b.WriteString(scaleProse(text[last:m[0]], s))
		b.WriteString(text[m[0]:m[1]])
		last = m[1]
	}
	b.WriteString(scaleProse(text[last:], s))
	return b.String()
}

func scaleProse(text string, s float64) string {
	return durationPhrase.ReplaceAllStringFunc(text, func(m string) string {
		p, ok := parseDurationPhrase(m)
		if !ok {
			return m
		}
		n, unit := durationWords(scaleDuration(p.d, s, 0))
		switch {
		case p.adjective:
			return n + "-" + unit
		case p.last && n == "1":
			return "last " + unit
		case p.last:
			return "last " + n + " " + unit + "s"
		case p.article && n == "1":
			if unit == "hour" {
				return "an " + unit
			}
			return "a " + unit
		case n == "1":
			return n + " " + unit
		}
		return n + " " + unit + "s"
	})
}

// durationPhraseParts is a durationPhrase match, parsed.
type durationPhraseParts struct {
	d                        time.Duration
	adjective, last, article bool
}

func parseDurationPhrase(m string) (durationPhraseParts, bool) {
	sm := durationPhrase.FindStringSubmatch(m)
	if sm == nil {
		return durationPhraseParts{}, false
	}
	p := durationPhraseParts{adjective: sm[2] == "-", last: sm[3] != ""}
	n := 1
	switch sm[1] {
	case "", "a", "an":
		p.article = sm[1] != ""
	default:
		var err error
		if n, err = strconv.Atoi(sm[1]); err != nil {
			return durationPhraseParts{}, false
		}
	}
	p.d = time.Duration(n) * durationUnits[sm[4]]
	return p, true
}

// durationWords writes d as a count of the largest unit it is a whole
// number of (days down to seconds), or in seconds with decimals.
func durationWords(d time.Duration) (count, unit string) {
	for _, u := range []string{"day", "hour", "minute", "second"} {
		if d%durationUnits[u] == 0 {
			return strconv.FormatInt(int64(d/durationUnits[u]), 10), u
		}
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64), "second"
}

// ScaleExpr divides the durations of a parsed PromQL expression by s in
// place: range windows (never below minRange), offsets, subquery ranges
// and steps, durations written as numbers (vector(1m)), and the horizon
// of predict_linear, which is in seconds.
func ScaleExpr(expr parser.Expr, s float64, minRange time.Duration) error {
	var err error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.MatrixSelector:
			if n.RangeExpr != nil {
				err = errors.New("duration expressions cannot be scaled")
			}
			n.Range = scaleDuration(n.Range, s, minRange)
		case *parser.SubqueryExpr:
			if n.RangeExpr != nil || n.StepExpr != nil || n.OriginalOffsetExpr != nil {
				err = errors.New("duration expressions cannot be scaled")
			}
			n.Range = scaleDuration(n.Range, s, minRange)
			n.Step = scaleDuration(n.Step, s, 0)
			n.OriginalOffset = scaleDuration(n.OriginalOffset, s, 0)
			n.Offset = scaleDuration(n.Offset, s, 0)
		case *parser.VectorSelector:
			if n.OriginalOffsetExpr != nil {
				err = errors.New("duration expressions cannot be scaled")
			}
			n.OriginalOffset = scaleDuration(n.OriginalOffset, s, 0)
			n.Offset = scaleDuration(n.Offset, s, 0)
		case *parser.NumberLiteral:
			// A duration written as a number (60 * 1m): the time an
			// accounting sample stands for (notify.yml).
			if n.Duration {
				n.Val = scaleDuration(time.Duration(n.Val*float64(time.Second)), s, 0).Seconds()
			}
		case *parser.Call:
			if n.Func.Name == "predict_linear" && len(n.Args) == 2 {
				n.Args[1] = &parser.BinaryExpr{
					Op:  parser.DIV,
					LHS: &parser.ParenExpr{Expr: n.Args[1]},
					RHS: &parser.NumberLiteral{Val: s},
				}
			}
		}
		return nil
	})
	return err
}

// scaleDuration returns d/s rounded to the millisecond (PromQL's
// resolution), and at least floor (or d, if shorter) unless d is 0.
func scaleDuration(d time.Duration, s float64, floor time.Duration) time.Duration {
	if d == 0 {
		return 0
	}
	sign := time.Duration(1)
	if d < 0 {
		sign, d = -1, -d // negative offsets
	}
	ms := time.Duration(math.Round(float64(d.Milliseconds())/s)) * time.Millisecond
	return sign * max(ms, min(floor, d), time.Millisecond)
}

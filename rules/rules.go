package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// Prometheus's defaults for its --rules.alert.* flags.
const (
	DefaultOutageTolerance = time.Hour
	DefaultForGracePeriod  = 10 * time.Minute
	DefaultResendDelay     = time.Minute
)

// minRangeScrapes is the shortest range window, in scrape intervals, that
// time-scaled rules get: at 60× a 5m window would be 5s, and a rate() over
// five 1s scrapes of cAdvisor, whose samples arrive with a second of
// jitter on a busy machine, swings by half.
const minRangeScrapes = 10

// Options configure the rule manager.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Engine evaluates the rules' expressions over Queryable, which also
	// holds the ALERTS_FOR_STATE series `for` state is restored from.
	Engine    promql.QueryEngine
	Queryable storage.Queryable
	// Appendable receives the recorded series and ALERTS.
	Appendable storage.AppendableV2
	// Notifier delivers alerts; nil keeps them to the API.
	Notifier promrules.Sender
	// ExternalURL is gpuscope's URL: alerts link back to it
	// (generatorURL) and templates read it as $externalURL.
	ExternalURL *url.URL
	// OutageTolerance, ForGracePeriod and ResendDelay are Prometheus's
	// --rules.alert.* settings; 0 means Prometheus's default.
	OutageTolerance time.Duration
	ForGracePeriod  time.Duration
	ResendDelay     time.Duration
	Parser          parser.Parser
}

// Manager evaluates the built-in rule pack and the user's rule files with
// Prometheus's rule manager.
type Manager struct {
	logger      *slog.Logger
	manager     *promrules.Manager
	loader      *groupLoader
	parser      parser.Parser
	externalURL string
	cancel      context.CancelFunc

	mu      sync.Mutex // serialises ApplyConfig: the loader's options belong to one Update
	applied bool       // ApplyConfig has loaded rules
	running bool       // Run has started the manager
}

// NewManager creates the rule manager; ApplyConfig loads the rules and Run
// evaluates them.
func NewManager(o Options) (*Manager, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Engine == nil || o.Queryable == nil || o.Appendable == nil {
		return nil, errors.New("rules: Engine, Queryable and Appendable are required")
	}
	if o.ExternalURL == nil {
		o.ExternalURL = &url.URL{Scheme: "http", Host: "localhost"}
	}
	if o.Parser == nil {
		o.Parser = parser.NewParser(parser.Options{})
	}
	if o.OutageTolerance == 0 {
		o.OutageTolerance = DefaultOutageTolerance
	}
	if o.ForGracePeriod == 0 {
		o.ForGracePeriod = DefaultForGracePeriod
	}
	if o.ResendDelay == 0 {
		o.ResendDelay = DefaultResendDelay
	}
	logger := o.Logger
	notify := func(context.Context, string, ...*promrules.Alert) {}
	if o.Notifier != nil {
		// Prometheus's own: generatorURL is <external URL>/graph?g0.expr=…&g0.tab=1,
		// which web serves as Prometheus's /graph does.
		notify = promrules.SendAlerts(o.Notifier, strings.TrimSuffix(o.ExternalURL.String(), "/"))
	}
	// Evaluations run under this context; it ends after the manager has
	// stopped.
	ctx, cancel := context.WithCancel(context.Background())
	loader := &groupLoader{parser: o.Parser, logger: logger}
	r := &Manager{
		logger:      logger,
		loader:      loader,
		parser:      o.Parser,
		externalURL: o.ExternalURL.String(),
		cancel:      cancel,
	}
	r.manager = promrules.NewManager(&promrules.ManagerOptions{
		ExternalURL:     o.ExternalURL,
		QueryFunc:       promrules.EngineQueryFunc(o.Engine, o.Queryable),
		NotifyFunc:      notify,
		Context:         ctx,
		AppendableV2:    o.Appendable,
		Queryable:       o.Queryable,
		Logger:          logger,
		Registerer:      o.Registerer,
		OutageTolerance: o.OutageTolerance,
		ForGracePeriod:  o.ForGracePeriod,
		ResendDelay:     o.ResendDelay,
		GroupLoader:     loader,
		Parser:          o.Parser,
	})
	return r, nil
}

// Prometheus is Prometheus's rule manager inside, for the HTTP API's /rules and
// /alerts and for the readers of rule groups (the overview, accounting).
func (r *Manager) Prometheus() *promrules.Manager { return r.manager }

// ApplyConfig loads the built-in pack (as rc says) and the rule files of
// cfg. A rule in the user's files replaces the built-in rule of the same
// name in a group of the same name. On any error the rules running before
// keep running.
//
// Before Run it may be called once: the rule manager's groups wait for Run
// to start, and replacing one that never started would wait forever.
func (r *Manager) ApplyConfig(cfg *promconfig.Config, rc Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied && !r.running {
		return errors.New("rules: config applied again before the rule manager runs")
	}

	files, err := globRuleFiles(cfg.RuleFiles)
	if err != nil {
		return err
	}
	// Parse the user's files first: for the built-in rules they replace,
	// and to report every error with its file and line (the manager's own
	// message only says the old rules were kept).
	overrides := map[string]map[string]string{}
	var errs []error
	for _, f := range files {
		rgs, ferrs := rulefmt.ParseFile(f, false, nameScheme(cfg), r.parser, r.logger)
		if len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		for _, g := range rgs.Groups {
			for _, rl := range g.Rules {
				if overrides[g.Name] == nil {
					overrides[g.Name] = map[string]string{}
				}
				overrides[g.Name][ruleName(rl)] = f
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("load rule files: %w", joinUnique(errs))
	}

	var ids []string
	if rc.Builtin.Enabled {
		for _, f := range Pack() {
			ids = append(ids, BuiltinPrefix+f.Name)
		}
	}
	ids = append(ids, files...)
	r.loader.set(packOptions{
		disabledGroups: rc.Builtin.disabledGroups(),
		disabledRules:  set(rc.Builtin.DisabledRules),
		overrides:      overrides,
		timeScale:      rc.Builtin.TimeScale,
		minRange:       minRangeScrapes * time.Duration(cfg.GlobalConfig.ScrapeInterval),
	})
	if err := r.manager.Update(time.Duration(cfg.GlobalConfig.EvaluationInterval), ids,
		cfg.GlobalConfig.ExternalLabels, r.externalURL, nil); err != nil {
		return fmt.Errorf("load rules: %w", err)
	}
	r.applied = true
	return nil
}

// Run evaluates the rules until ctx ends, then stops every group and waits
// for evaluations in flight.
func (r *Manager) Run(ctx context.Context) error {
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.manager.Run()
	}()
	<-ctx.Done()
	r.manager.Stop()
	<-done
	r.cancel()
	return nil
}

// CheckRuleFiles parses the rule files the patterns match as serve loads
// them; errors name the file and line.
func CheckRuleFiles(patterns []string, scheme model.ValidationScheme) error {
	files, err := globRuleFiles(patterns)
	if err != nil {
		return err
	}
	if scheme == model.UnsetValidation {
		scheme = model.UTF8Validation
	}
	p := parser.NewParser(parser.Options{})
	var errs []error
	for _, f := range files {
		if _, ferrs := rulefmt.ParseFile(f, false, scheme, p, slog.New(slog.DiscardHandler)); len(ferrs) > 0 {
			errs = append(errs, ferrs...)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("rule files: %w", joinUnique(errs))
	}
	return nil
}

// globRuleFiles expands rule_files patterns, keeping the first occurrence
// of each file.
func globRuleFiles(patterns []string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for _, pat := range patterns {
		matches, err := filepath.Glob(pat)
		if err != nil {
			// The only error Glob returns is a bad pattern.
			return nil, fmt.Errorf("rule_files: pattern %q: %w", pat, err)
		}
		for _, m := range matches {
			if !seen[m] {
				seen[m] = true
				files = append(files, m)
			}
		}
	}
	return files, nil
}

// joinUnique joins errors, dropping repeats: rulefmt reports a YAML error
// once per pass over the file.
func joinUnique(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, e := range errs {
		if !seen[e.Error()] {
			seen[e.Error()] = true
			out = append(out, e)
		}
	}
	return errors.Join(out...)
}

func nameScheme(cfg *promconfig.Config) model.ValidationScheme {
	if s := cfg.GlobalConfig.MetricNameValidationScheme; s != model.UnsetValidation {
		return s
	}
	return model.UTF8Validation
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// groupLoader is the rule manager's loader: the user's files are read as
// Prometheus reads them, the pack's from the binary, filtered and scaled
// as the config says.
type groupLoader struct {
	parser parser.Parser
	logger *slog.Logger

	mu   sync.Mutex
	opts packOptions
}

var _ promrules.GroupLoader = (*groupLoader)(nil)

func (l *groupLoader) set(o packOptions) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts = o
}

// Load implements promrules.GroupLoader.
func (l *groupLoader) Load(identifier string, ignoreUnknownFields bool, scheme model.ValidationScheme) (*rulefmt.RuleGroups, []error) {
	name, ok := strings.CutPrefix(identifier, BuiltinPrefix)
	if !ok {
		return rulefmt.ParseFile(identifier, ignoreUnknownFields, scheme, l.parser, l.logger)
	}
	data, err := packFS.ReadFile("pack/" + name)
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", identifier, err)}
	}
	rgs, errs := rulefmt.Parse(data, ignoreUnknownFields, scheme, l.parser, l.logger)
	if len(errs) > 0 {
		for i := range errs {
			errs[i] = fmt.Errorf("%s: %w", identifier, errs[i])
		}
		return nil, errs
	}
	l.mu.Lock()
	o := l.opts
	l.mu.Unlock()
	if o.timeScale == 0 {
		o.timeScale = 1
	}
	repl, err := applyPack(rgs, o, l.parser)
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", identifier, err)}
	}
	for _, x := range repl {
		l.logger.Info("Built-in rule replaced by a user rule", "group", x.group, "rule", x.rule, "file", x.file)
	}
	return rgs, nil
}

// Parse implements promrules.GroupLoader.
func (l *groupLoader) Parse(query string) (parser.Expr, error) {
	return l.parser.ParseExpr(query)
}

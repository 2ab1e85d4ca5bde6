// Package config loads gpuscope's configuration file: a prometheus.yml whose
// Prometheus sections are parsed by Prometheus's own config package, with
// gpuscope's settings beside them.
package config

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	yaml2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/alertmanager"
	"github.com/gpuscope/gpuscope/digest"
	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/rules"
	"github.com/gpuscope/gpuscope/scrape"
	"github.com/gpuscope/gpuscope/scrape/cadvisor"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/workload"
)

// DefaultScrapeInterval is the source document's interval: fine enough to
// see a GPU stall, coarse enough to keep the head small. Prometheus's own
// default (1m) is too coarse for GPU work.
const DefaultScrapeInterval = 15 * time.Second

//go:embed gpuscope.yml
var defaultFile []byte

// DefaultFile returns the embedded default configuration, the same text the
// packages install as /etc/gpuscope/gpuscope.yml.
func DefaultFile() []byte { return bytes.Clone(defaultFile) }

// Config is a loaded, validated configuration.
type Config struct {
	// Prometheus holds the sections of a prometheus.yml (global,
	// scrape_configs, rule_files, alerting, remote_write, remote_read,
	// storage, tracing, otlp, runtime), exactly as Prometheus parses them.
	Prometheus *promconfig.Config

	Cadvisor cadvisor.Config
	GPU      GPU
	Web      Web
	// Nodes are the machines running `gpuscope agent` that the appliance
	// scrapes (the node-* jobs).
	Nodes scrape.Nodes
	// Rules says which built-in rules run; the user's own rule files are
	// the Prometheus section rule_files.
	Rules rules.Config
	// Accounting prices the run report's energy.
	Accounting accounting.Config
	// Workloads says how workloads get their user (the passwd file).
	Workloads workload.Config
	// Users says how to reach each user (email, chat handle, receiver):
	// the alerts naming a user carry them, for routes and templates.
	Users alertmanager.Users
	// Digests schedules the usage digests (per user and for the admin).
	Digests digest.Config
	// SelfMetrics says which of the process's own families /metrics
	// exposes, and so which the built-in gpuscope job stores.
	SelfMetrics SelfMetrics
	// Alertmanager is the embedded Alertmanager's config, the
	// alertmanager: section (an alertmanager.yml); never nil. Without the
	// section, alerts are kept and sent to nobody.
	Alertmanager *alertmanager.Config

	// File is the path the config came from; empty for the embedded default.
	File string
	// Warnings are valid settings that are most likely mistakes (a rule
	// file pattern that matches no file), each naming file, line and key.
	Warnings []string

	root *yaml.Node // the file's YAML tree, for Locate
}

// Locate words an error found in this config after it loaded (a reserved
// job name, from scrape.AddBuiltinJobs) as Load words its own: file, line
// and key, when the error starts with a key path of the file.
func (c *Config) Locate(err error) error {
	if err == nil {
		return nil
	}
	return walkFile(c.root).errorFor(c.File, err, false)
}

// AddBuiltinJobs prepends the jobs that scrape this process's own
// collectors at address (what the in-memory self listener answers) and
// the agents of the nodes: section, every built-in series labelled
// instance="<instance>". A user job with a reserved name is an error
// located in the file, as Load words its own.
func (c *Config) AddBuiltinJobs(address, instance string) error {
	return c.Locate(scrape.AddBuiltinJobs(c.Prometheus, c.builtin(address, instance)))
}

// CheckBuiltinJobs returns the error AddBuiltinJobs would, changing
// nothing, for a config to be refused before its collectors' address is
// known.
func (c *Config) CheckBuiltinJobs() error {
	return c.Locate(scrape.CheckBuiltinJobs(c.Prometheus, c.builtin("localhost:0", "check")))
}

func (c *Config) builtin(address, instance string) scrape.Builtin {
	return scrape.Builtin{
		Address:  address,
		Instance: instance,
		Cadvisor: c.Cadvisor.Enabled,
		GPU:      c.GPU.Backend != gpu.BackendNone,
		Nodes:    c.Nodes,
	}
}

// Web holds settings of the HTTP server that may also be given as flags;
// a flag given on the command line wins.
type Web struct {
	ListenAddress string `yaml:"listen_address"`
	// ExternalURL is the URL under which gpuscope is reachable, used in
	// alert links (generatorURL).
	ExternalURL string `yaml:"external_url"`
	// CORSOrigin is a regular expression of origins allowed to call the API.
	CORSOrigin string `yaml:"cors_origin"`
	// GrafanaURL is the Grafana that shows gpuscope's dashboards; the
	// overview page links each dashboard there. Empty: no links.
	GrafanaURL string `yaml:"grafana_url"`
}

// Validate checks the web section as serve uses it: an address net.Listen
// takes, an absolute external URL, a CORS regular expression that
// compiles. Empty values mean the flags' defaults.
func (w Web) Validate() error {
	var errs []error
	if a := w.ListenAddress; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("web.listen_address: %q is not host:port (e.g. 0.0.0.0:9089 or :9089)", a))
		} else if n, err := strconv.Atoi(port); err == nil {
			if n < 0 || n > 65535 {
				errs = append(errs, fmt.Errorf("web.listen_address: port %d of %q is not between 0 and 65535", n, a))
			}
		} else if _, err := net.LookupPort("tcp", port); err != nil {
			errs = append(errs, fmt.Errorf("web.listen_address: %q has no valid port (e.g. 0.0.0.0:9089 or :9089)", a))
		}
	}
	if raw := w.ExternalURL; raw != "" {
		if u, err := url.Parse(raw); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("web.external_url: %q is not an absolute URL (e.g. http://gpu-01:9089/)", raw))
		}
	}
	if raw := w.GrafanaURL; raw != "" {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("web.grafana_url: %q is not an http or https URL (e.g. http://grafana.example:3000/)", raw))
		}
	}
	// serve anchors the expression the same way.
	if _, err := regexp.Compile("^(?:" + w.CORSOrigin + ")$"); err != nil {
		errs = append(errs, fmt.Errorf("web.cors_origin: %q is not a regular expression: %w", w.CORSOrigin, err))
	}
	return errors.Join(errs...)
}

// own is the part of the file that belongs to gpuscope.
type own struct {
	Cadvisor    cadvisor.Config    `yaml:"cadvisor"`
	GPU         GPU                `yaml:"gpu"`
	Web         Web                `yaml:"web"`
	Nodes       scrape.Nodes       `yaml:"nodes"`
	Rules       rules.Config       `yaml:"rules"`
	Accounting  accounting.Config  `yaml:"accounting"`
	Workloads   workload.Config    `yaml:"workloads"`
	Users       alertmanager.Users `yaml:"users"`
	Digests     digest.Config      `yaml:"digests"`
	SelfMetrics SelfMetrics        `yaml:"self_metrics"`
	// Alertmanager is read by loadAlertmanager, with Alertmanager's loader.
	Alertmanager alertmanagerNode `yaml:"alertmanager"`
}

// SelfMetrics is the `self_metrics:` section.
type SelfMetrics struct {
	// Families turns groups of the process's own metric families on; all
	// are off by default (the series diet, docs/metrics.md "What is stored
	// by default").
	Families families.Self `yaml:"families"`
}

func defaultOwn() own {
	return own{
		Cadvisor: cadvisor.DefaultConfig(),
		GPU:      defaultGPU(),
		Web:      Web{ListenAddress: "0.0.0.0:9089", CORSOrigin: ".*"},
		Nodes:    scrape.DefaultNodes(),
		Rules:    rules.DefaultConfig(),
		Digests:  digest.DefaultConfig(),
	}
}

// LoadFile reads and validates a config file. Relative paths inside it
// (rule_files, file_sd_configs, TLS files) are resolved against its folder,
// as Prometheus does. Errors name the file, the line and the key.
func LoadFile(path string, logger *slog.Logger) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	cfg, root, err := load(data, path, logger)
	if err != nil {
		return nil, err
	}
	patterns := slices.Clone(cfg.Prometheus.RuleFiles)
	cfg.Prometheus.SetDirectory(filepath.Dir(path))
	cfg.Nodes.SetDirectory(filepath.Dir(path))
	cfg.Workloads.SetDirectory(filepath.Dir(path))
	// Rule files are parsed here, so that serve refuses to start, a reload
	// keeps the old config and `check config` fails, each naming the file
	// and line of the bad rule.
	if err := rules.CheckRuleFiles(cfg.Prometheus.RuleFiles, cfg.Prometheus.GlobalConfig.MetricNameValidationScheme); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// A pattern that matches nothing is valid, as in Prometheus, but most
	// likely a mistake.
	var s *schema
	for i, pat := range cfg.Prometheus.RuleFiles {
		if m, err := filepath.Glob(pat); err == nil && len(m) == 0 {
			if s == nil {
				s = walkFile(root)
			}
			w := &Error{File: path, Line: s.lineOf(fmt.Sprintf("rule_files[%d]", i)), Key: "rule_files",
				Err: fmt.Errorf("%q matches no file; no rules are loaded from it", patterns[i])}
			cfg.Warnings = append(cfg.Warnings, w.Error())
		}
	}
	cfg.Warnings = append(cfg.Warnings, alertmanagerWarnings(cfg.Alertmanager, path, root)...)
	return cfg, nil
}

// loadPrometheus parses the sections of a prometheus.yml with
// Prometheus's own loader, with gpuscope's default intervals.
func loadPrometheus(parts *parts, logger *slog.Logger, s *lazySchema, file string) (*promconfig.Config, error) {
	promCfg, err := promconfig.Load(string(parts.prometheus), logger)
	if err != nil {
		return nil, s.errorFor(file, err, true)
	}
	if parts.defaultsNeeded() {
		// Prometheus would default the intervals to 1m and copy that into
		// every job; reload with gpuscope's defaults filled in. The text was
		// valid above, so errors below would be ours.
		text, err := parts.prometheusWithDefaults()
		if err != nil {
			return nil, s.errorFor(file, fmt.Errorf("apply default intervals: %w", err), false)
		}
		if promCfg, err = promconfig.Load(text, logger); err != nil {
			return nil, s.errorFor(file, fmt.Errorf("global: with gpuscope's default %s intervals: %w", model.Duration(DefaultScrapeInterval), err), false)
		}
	}
	if err := checkRemoteDuplicates(promCfg); err != nil {
		return nil, s.errorFor(file, err, false)
	}
	// Exemplar storage is always on in gpuscope (Grafana asks for
	// exemplars); Prometheus fills this section only when its feature flag
	// is set.
	if promCfg.StorageConfig.ExemplarsConfig == nil {
		ec := promconfig.DefaultExemplarsConfig
		promCfg.StorageConfig.ExemplarsConfig = &ec
	}
	return promCfg, nil
}

// reservedJobNames finds, in the YAML itself, user jobs named like a
// built-in one (scrape.CheckJobName).
func reservedJobNames(root *yaml.Node, s *lazySchema, file string, b scrape.Builtin) []error {
	var errs []error
	jobs := mappingValue(root, "scrape_configs")
	if jobs == nil || jobs.Kind != yaml.SequenceNode {
		return nil
	}
	for i, j := range jobs.Content {
		if n := mappingValue(j, "job_name"); n != nil && n.Kind == yaml.ScalarNode {
			if err := scrape.CheckJobName(n.Value, b); err != nil {
				errs = append(errs, s.errorFor(file, fmt.Errorf("scrape_configs[%d]: %w", i, err), false))
			}
		}
	}
	return errs
}

// suggestName adds the name meant to an error naming no built-in rule
// or group, as unknown keys get theirs.
func suggestName(err error) error {
	var u *rules.UnknownNameError
	if !errors.As(err, &u) {
		return err
	}
	lower := make([]string, len(u.Known))
	for i, k := range u.Known {
		lower[i] = strings.ToLower(k)
	}
	if c := closest(strings.ToLower(u.Name), lower); c != "" {
		return fmt.Errorf("%w; did you mean %s?", err, u.Known[slices.Index(lower, c)])
	}
	return err
}

// joinInFileOrder joins the errors of the file's sections in line order,
// each once: the schema walk's errors come with each section's decoding
// error (a typo in gpu: beside one in global: was reported twice).
func joinInFileOrder(errs []error) error {
	var flat []error
	seen := map[string]bool{}
	for _, err := range errs {
		for _, e := range unjoin(err) {
			if msg := e.Error(); !seen[msg] {
				seen[msg] = true
				flat = append(flat, e)
			}
		}
	}
	line := func(err error) int {
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			return e.Line
		}
		return math.MaxInt // unplaced errors after the placed ones
	}
	slices.SortStableFunc(flat, func(a, b error) int { return cmp.Compare(line(a), line(b)) })
	if len(flat) == 1 {
		return flat[0]
	}
	return errors.Join(flat...)
}

// unjoin lists the errors an errors.Join made, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Default returns the embedded default configuration.
func Default(logger *slog.Logger) *Config {
	cfg, err := Load(defaultFile, "", logger)
	if err != nil {
		// The embedded file is tested; failing here is a build defect.
		panic(fmt.Sprintf("embedded default config is invalid: %v", err))
	}
	return cfg
}

// Load parses a config from memory. Errors name file (if not empty), the
// line and the YAML key; see Error.
func Load(data []byte, file string, logger *slog.Logger) (*Config, error) {
	cfg, _, err := load(data, file, logger)
	return cfg, err
}

// load returns the config and the file's YAML tree. The tree is walked
// beside the Go types only when something needs explaining.
func load(data []byte, file string, logger *slog.Logger) (*Config, *yaml.Node, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	parts, err := split(data)
	if err != nil {
		return nil, nil, (&schema{}).errorFor(file, err, true)
	}
	s := lazySchema{root: parts.root}

	// Every error of the file at once, one per line: the Prometheus
	// sections, gpuscope's own and the alertmanager section are checked
	// apart, so a mistake in one does not hide those in another.
	var errs []error
	promCfg, promErr := loadPrometheus(parts, logger, &s, file)
	if promErr != nil {
		errs = append(errs, promErr)
	}
	o := defaultOwn()
	dec := yaml.NewDecoder(bytes.NewReader(parts.own))
	dec.KnownFields(true)
	err = dec.Decode(&o)
	if err != nil && !errors.Is(err, io.EOF) {
		errs = append(errs, s.errorFor(file, err, true))
	}
	// yaml.v3 decodes what it can around a wrong type or an unknown key
	// (a TypeError lists them), leaving those fields at their defaults:
	// the values it did decode are checked too.
	var typeErr *yaml.TypeError
	if err == nil || errors.Is(err, io.EOF) || errors.As(err, &typeErr) {
		if promErr != nil {
			// Without parsed scrape configs, a reserved job name would go
			// unsaid until the next run: read the names from the YAML.
			errs = append(errs, reservedJobNames(parts.root, &s, file, scrape.Builtin{
				Cadvisor: o.Cadvisor.Enabled, GPU: o.GPU.Backend != gpu.BackendNone})...)
		}
		for _, validate := range []func() error{
			o.Cadvisor.Validate,
			o.GPU.Validate,
			o.Web.Validate,
			o.Nodes.Validate,
			o.Rules.Validate,
			o.Accounting.Validate,
			o.Users.Validate,
			o.Digests.Validate,
		} {
			if err := validate(); err != nil {
				for _, e := range unjoin(err) {
					errs = append(errs, s.errorFor(file, suggestName(e), false))
				}
			}
		}
	}
	am, err := loadAlertmanager(data, file, parts.root, &s)
	if err != nil {
		errs = append(errs, err)
	} else if err := o.Users.CheckReceivers(am); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, s.errorFor(file, e, false))
		}
	} else if am, err = am.WithOwnerRoutes(o.Users); err != nil {
		errs = append(errs, s.errorFor(file, err, false))
	}
	if len(errs) > 0 {
		return nil, nil, joinInFileOrder(errs)
	}

	return &Config{
		Prometheus:   promCfg,
		Cadvisor:     o.Cadvisor,
		GPU:          o.GPU,
		Web:          o.Web,
		Nodes:        o.Nodes,
		Rules:        o.Rules,
		Accounting:   o.Accounting,
		Workloads:    o.Workloads,
		Users:        o.Users,
		Digests:      o.Digests,
		SelfMetrics:  o.SelfMetrics,
		Alertmanager: am,
		File:         file,
		root:         parts.root,
	}, parts.root, nil
}

// checkRemoteDuplicates refuses what Prometheus's remote storage refuses
// when the config is applied, so that check config catches it: two
// remote_write (or remote_read) entries that are the same.
func checkRemoteDuplicates(c *promconfig.Config) error {
	sections := []struct {
		key  string
		cfgs []any
	}{{key: "remote_write"}, {key: "remote_read"}}
	for _, rw := range c.RemoteWriteConfigs {
		sections[0].cfgs = append(sections[0].cfgs, rw)
	}
	for _, rr := range c.RemoteReadConfigs {
		sections[1].cfgs = append(sections[1].cfgs, rr)
	}
	for _, sec := range sections {
		seen := map[string]int{}
		for i, c := range sec.cfgs {
			// Prometheus compares the YAML rendering too (storage/remote toHash).
			b, err := yaml2.Marshal(c)
			if err != nil {
				continue
			}
			if j, dup := seen[string(b)]; dup {
				return fmt.Errorf("%s[%d]: the same as %s[%d]; remote storage refuses duplicates (give them different settings or remove one)", sec.key, i, sec.key, j)
			}
			seen[string(b)] = i
		}
	}
	return nil
}

// lazySchema walks the file on the first error.
type lazySchema struct {
	root *yaml.Node
	s    *schema
}

func (l *lazySchema) errorFor(file string, err error, decoding bool) error {
	if l.s == nil {
		l.s = walkFile(l.root)
	}
	return l.s.errorFor(file, err, decoding)
}

// GPUInterval is how often the GPU collector samples: its own setting, or
// the scrape interval.
func (c *Config) GPUInterval() time.Duration {
	if c.GPU.Interval > 0 {
		return time.Duration(c.GPU.Interval)
	}
	return c.ScrapeInterval()
}

// ScrapeInterval is the global scrape interval.
func (c *Config) ScrapeInterval() time.Duration {
	return time.Duration(c.Prometheus.GlobalConfig.ScrapeInterval)
}

// prometheusKeys are the top-level keys of a prometheus.yml, read from
// Prometheus's own struct so that a section added upstream is routed to it
// without a change here.
func prometheusKeys() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[promconfig.Config]()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}

// parts is a config file split into the Prometheus text and gpuscope's own
// text. Both keep the original line numbers: lines belonging to the other
// part are blanked, so errors from either parser point into the user's file.
type parts struct {
	prometheus []byte
	own        []byte
	root       *yaml.Node // the whole document, for injecting defaults
}

func split(data []byte) (*parts, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return &parts{}, nil // empty file: all defaults
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the config must be a mapping of sections (global, scrape_configs, gpu, ...)", root.Line)
	}
	promKeys := prometheusKeys()
	if root.Style&yaml.FlowStyle != 0 {
		return splitFlow(root, promKeys)
	}

	lines := strings.SplitAfter(string(data), "\n")
	promLines := make([]string, len(lines))
	ownLines := make([]string, len(lines))
	copy(promLines, lines)
	copy(ownLines, lines)
	for i := 0; i < len(root.Content); i += 2 {
		key := root.Content[i]
		first := key.Line - 1
		last := len(lines) - 1
		if i+2 < len(root.Content) {
			last = root.Content[i+2].Line - 2
		}
		blank := promLines
		if promKeys[key.Value] {
			blank = ownLines
		}
		for l := first; l <= last && l < len(lines); l++ {
			if strings.HasSuffix(lines[l], "\n") {
				blank[l] = "\n"
			} else {
				blank[l] = ""
			}
		}
	}
	return &parts{
		prometheus: []byte(strings.Join(promLines, "")),
		own:        []byte(strings.Join(ownLines, "")),
		root:       root,
	}, nil
}

// splitFlow handles a file written as one flow mapping ({global: ...}), where
// sections cannot be told apart by line; line numbers stay those of the
// first line.
func splitFlow(root *yaml.Node, promKeys map[string]bool) (*parts, error) {
	promNode := &yaml.Node{Kind: yaml.MappingNode}
	ownNode := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(root.Content); i += 2 {
		dst := ownNode
		if promKeys[root.Content[i].Value] {
			dst = promNode
		}
		dst.Content = append(dst.Content, root.Content[i], root.Content[i+1])
	}
	p, err := yaml.Marshal(promNode)
	if err != nil {
		return nil, err
	}
	o, err := yaml.Marshal(ownNode)
	if err != nil {
		return nil, err
	}
	return &parts{prometheus: p, own: o, root: root}, nil
}

// globalDefaults are the global settings gpuscope defaults differently from
// Prometheus.
var globalDefaults = []struct{ key, value string }{
	{"scrape_interval", model.Duration(DefaultScrapeInterval).String()},
	{"evaluation_interval", model.Duration(DefaultScrapeInterval).String()},
}

func (p *parts) global() *yaml.Node {
	if p.root == nil {
		return nil
	}
	for i := 0; i < len(p.root.Content); i += 2 {
		if p.root.Content[i].Value == "global" {
			return p.root.Content[i+1]
		}
	}
	return nil
}

func (p *parts) defaultsNeeded() bool {
	g := p.global()
	if g == nil || g.Kind != yaml.MappingNode {
		return true
	}
	for _, d := range globalDefaults {
		if mappingValue(g, d.key) == nil {
			return true
		}
	}
	return false
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// prometheusWithDefaults re-renders the Prometheus sections with the missing
// global defaults added.
func (p *parts) prometheusWithDefaults() (string, error) {
	promKeys := prometheusKeys()
	out := &yaml.Node{Kind: yaml.MappingNode}
	var global *yaml.Node
	if p.root != nil {
		for i := 0; i < len(p.root.Content); i += 2 {
			k, v := p.root.Content[i], p.root.Content[i+1]
			if !promKeys[k.Value] {
				continue
			}
			if k.Value == "global" {
				if v.Kind != yaml.MappingNode { // `global:` with no value
					v = &yaml.Node{Kind: yaml.MappingNode}
				} else {
					c := *v
					c.Content = append([]*yaml.Node(nil), v.Content...)
					v = &c
				}
				global = v
			}
			out.Content = append(out.Content, k, v)
		}
	}
	if global == nil {
		global = &yaml.Node{Kind: yaml.MappingNode}
		out.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Value: "global"}, global}, out.Content...)
	}
	for _, d := range globalDefaults {
		if mappingValue(global, d.key) == nil {
			global.Content = append(global.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Value: d.key},
				&yaml.Node{Kind: yaml.ScalarNode, Value: d.value})
		}
	}
	b, err := yaml.Marshal(out)
	return string(b), err
}

package alertmanager

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"

	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/alertmanager/config/receiver"
	"github.com/prometheus/alertmanager/notify"
	"github.com/prometheus/alertmanager/template"
	commoncfg "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"
)

// Nobody is the receiver gpuscope adds to an alertmanager.yml that has
// none: Alertmanager needs a root route with a receiver, and a receiver
// with no integration is its way of sending nothing.
const Nobody = "nobody"

// The default route's settings (docs/notifications.md): one notification
// per node and alert name, a first wait that lets an evaluation's alerts
// of one group arrive together, and repeats in hours, as Alertmanager's
// own defaults.
const (
	defaultGroupWait      = "30s"
	defaultGroupInterval  = "5m"
	defaultRepeatInterval = "4h"
)

// defaultGroupBy are the labels every built-in alert has: the node
// (instance) and the rule.
var defaultGroupBy = []string{"instance", "alertname"}

// gpuFaults are the built-in alerts that mean a GPU is out of service;
// while one fires, the warnings of the same GPU (instance and gpu, the
// labels every GPU alert has; GPUFellOffBus has no UUID) say nothing new.
var gpuFaults = []string{"GPUFellOffBus", "GPUXIDErrorCritical"}

// Config is the `alertmanager:` section of gpuscope.yml, loaded: an
// alertmanager.yml as Alertmanager reads it.
type Config struct {
	// Alertmanager is the alertmanager.yml as Alertmanager's own loader
	// read it.
	Alertmanager *amconfig.Config
	// Text is that alertmanager.yml, with gpuscope's default route when it
	// was added: what `gpuscope alertmanager config` prints and
	// `amtool check-config` reads.
	Text string
	// DefaultRoute says that the text had no route, so gpuscope added its
	// default route (and its inhibit rules, when the text had none).
	DefaultRoute bool

	dir string // where relative paths are resolved, for WithOwnerRoutes
}

// shape is what Load needs to know of a text before Alertmanager reads
// it. Decoded leniently: the strict load says what is wrong.
type shape struct {
	Route        *yaml.Node `yaml:"route"`
	InhibitRules *yaml.Node `yaml:"inhibit_rules"`
	Receivers    []struct {
		Name string `yaml:"name"`
	} `yaml:"receivers"`
}

// errNoRoute is amconfig.Load's error for a config without a route (the
// unmarshaler's, after every other check of the receivers passed).
const errNoRoute = "no routes provided"

// Load reads text, an alertmanager.yml, with Alertmanager's loader, and
// builds its templates and receivers as the running Alertmanager will, so
// that a config that loads also applies. A text without a route gets
// gpuscope's default route (DefaultRoute); an empty text sends nothing.
// Relative paths (templates, HTTP client files) are resolved against dir,
// as Alertmanager resolves them against its config file's folder.
// Errors are Alertmanager's, their line numbers those of text.
func Load(text, dir string) (*Config, error) {
	var s shape
	_ = yaml.Unmarshal([]byte(text), &s)

	cfg, err := amconfig.Load(text)
	// The text as a file of its own: without the blank lines that stand
	// for the rest of gpuscope.yml.
	c := &Config{Alertmanager: cfg, Text: strings.Trim(text, "\n") + "\n", dir: dir}
	if strings.TrimSpace(text) == "" {
		c.Text = ""
	}
	if empty(s.Route) && (err == nil || err.Error() == errNoRoute || strings.TrimSpace(text) == "") {
		// Every check Alertmanager makes before the route's passed; the
		// text with the default route is loaded again.
		if c.Text, err = withDefaultRoute(text, s); err != nil {
			return nil, fmt.Errorf("add the default route: %w", err)
		}
		c.DefaultRoute = true
		if c.Alertmanager, err = amconfig.Load(c.Text); err != nil {
			return nil, fmt.Errorf("with gpuscope's default route: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	resolvePaths(dir, c.Alertmanager)
	if _, _, err := build(c.Alertmanager, nil, nil, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// empty says whether a key is absent or has no value (`route:`).
func empty(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// withDefaultRoute adds to text the root route gpuscope's pack wants, and
// its inhibit rules when text has none. With several receivers, each gets
// every alert (a child route per receiver that continues); with none,
// alerts go to Nobody.
func withDefaultRoute(text string, s shape) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return "", err
	}
	var root *yaml.Node
	switch {
	case len(doc.Content) == 0:
		root = &yaml.Node{Kind: yaml.MappingNode}
	case doc.Content[0].Kind == yaml.MappingNode:
		root = doc.Content[0]
	default:
		return "", errors.New("an alertmanager.yml is a mapping of sections (route, receivers, ...)")
	}
	var names []string
	for _, r := range s.Receivers {
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		names = []string{Nobody}
		if err := setKey(root, "receivers", []map[string]string{{"name": Nobody}},
			"No receiver: alerts are kept and shown, and sent to nobody."); err != nil {
			return "", err
		}
	}
	type child struct {
		Receiver string `yaml:"receiver"`
		Continue bool   `yaml:"continue"`
	}
	route := struct {
		Receiver       string   `yaml:"receiver"`
		GroupBy        []string `yaml:"group_by,flow"`
		GroupWait      string   `yaml:"group_wait"`
		GroupInterval  string   `yaml:"group_interval"`
		RepeatInterval string   `yaml:"repeat_interval"`
		Routes         []child  `yaml:"routes,omitempty"`
	}{
		Receiver:       names[0],
		GroupBy:        defaultGroupBy,
		GroupWait:      defaultGroupWait,
		GroupInterval:  defaultGroupInterval,
		RepeatInterval: defaultRepeatInterval,
	}
	if len(names) > 1 {
		for _, n := range names {
			route.Routes = append(route.Routes, child{Receiver: n, Continue: true})
		}
	}
	if err := setKey(root, "route", route,
		"gpuscope's default route: one notification per node and alert name, every receiver gets every alert."); err != nil {
		return "", err
	}
	if empty(s.InhibitRules) {
		inhibit := []struct {
			SourceMatchers []string `yaml:"source_matchers,flow"`
			TargetMatchers []string `yaml:"target_matchers,flow"`
			Equal          []string `yaml:"equal,flow"`
		}{{
			SourceMatchers: []string{`severity="critical"`, `alertname=~"` + strings.Join(gpuFaults, "|") + `"`},
			TargetMatchers: []string{`severity=~"warning|info"`},
			Equal:          []string{"instance", "gpu"},
		}}
		if err := setKey(root, "inhibit_rules", inhibit,
			"gpuscope's default: a GPU out of service silences the warnings of the same GPU."); err != nil {
			return "", err
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// setKey sets key of mapping m to v, replacing an empty value the text
// gave it (receivers: []), with comment above it.
func setKey(m *yaml.Node, key string, v any, comment string) error {
	var val yaml.Node
	if err := val.Encode(v); err != nil {
		return err
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = &val
			return nil
		}
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Value: key, HeadComment: comment},
		&val)
	return nil
}

// resolvePaths joins the relative paths of c with dir, as
// amconfig.LoadFile does for a file's folder (its resolveFilepaths, which
// is not exported): the template globs and the files of every HTTP client
// config (CA, certificate, key, password and token files).
func resolvePaths(dir string, c *amconfig.Config) {
	if dir == "" {
		return
	}
	for i, t := range c.Templates {
		if t != "" && !filepath.IsAbs(t) {
			c.Templates[i] = filepath.Join(dir, t)
		}
	}
	if c.Global != nil && c.Global.HTTPConfig != nil {
		c.Global.HTTPConfig.SetDirectory(dir)
	}
	httpConfig := reflect.TypeFor[*commoncfg.HTTPClientConfig]()
	for _, r := range c.Receivers {
		for _, integration := range integrationConfigs(r) {
			for i := range integration.Len() {
				ic := integration.Index(i)
				if ic.IsNil() {
					continue
				}
				f := ic.Elem().FieldByName("HTTPConfig")
				if f.IsValid() && f.Type() == httpConfig && !f.IsNil() {
					f.Interface().(*commoncfg.HTTPClientConfig).SetDirectory(dir)
				}
			}
		}
	}
}

// integrationConfigs are the lists of integration configs of receiver r
// (webhook_configs, email_configs, ...), read from its fields so that an
// integration added upstream is counted without a change here.
func integrationConfigs(r amconfig.Receiver) []reflect.Value {
	var out []reflect.Value
	v := reflect.ValueOf(r)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Type.Kind() == reflect.Slice && strings.HasSuffix(name, "_configs") {
			out = append(out, v.Field(i))
		}
	}
	return out
}

// integrations counts the integrations of receiver r.
func integrations(r amconfig.Receiver) int {
	n := 0
	for _, l := range integrationConfigs(r) {
		n += l.Len()
	}
	return n
}

// build makes c's templates and the integrations of the receivers its
// routes use, as Alertmanager does on every reload (app/reloader.go: a
// receiver no route uses is not built), changing nothing. externalURL is
// the templates' .ExternalURL; d, when not nil, records each
// integration's attempts.
func build(c *amconfig.Config, externalURL *url.URL, logger *slog.Logger, d *deliveries) (*template.Template, map[string][]notify.Integration, error) {
	tmpl, err := templates(c.Templates, externalURL)
	if err != nil {
		return nil, nil, fmt.Errorf("templates: %w", err)
	}
	used := usedReceivers(c.Route)
	out := make(map[string][]notify.Integration, len(used))
	for _, r := range c.Receivers {
		if !used[r.Name] {
			continue
		}
		is, err := receiver.BuildReceiverIntegrations(r, tmpl, logger)
		if err != nil {
			return nil, nil, fmt.Errorf("receivers: receiver %q: %w", r.Name, err)
		}
		if d != nil {
			is = recordIntegrations(r.Name, is, d)
		}
		out[r.Name] = is
	}
	return tmpl, out, nil
}

// usedReceivers are the receivers of route and the routes below it.
func usedReceivers(route *amconfig.Route) map[string]bool {
	used := map[string]bool{}
	var walk func(r *amconfig.Route)
	walk = func(r *amconfig.Route) {
		if r == nil {
			return
		}
		used[r.Receiver] = true
		for _, child := range r.Routes {
			walk(child)
		}
	}
	walk(route)
	return used
}

// Receivers are the receivers the routes lead to that have at least one
// integration (webhook, email, Slack, ...), in the order of the config.
func (c *Config) Receivers() []string {
	used := usedReceivers(c.Alertmanager.Route)
	var out []string
	for _, r := range c.Alertmanager.Receivers {
		if used[r.Name] && integrations(r) > 0 {
			out = append(out, r.Name)
		}
	}
	return out
}

// Reaches says whether an alert can reach anyone: whether a route leads to
// a receiver that can send.
func (c *Config) Reaches() bool { return len(c.Receivers()) > 0 }

// Nobody says why no alert reaches anyone; "" when one can.
func (c *Config) Nobody() string {
	if c.Reaches() {
		return ""
	}
	for _, r := range c.Alertmanager.Receivers {
		if r.Name != Nobody || !c.DefaultRoute {
			return "no receiver the routes lead to has a notifier (webhook_configs, email_configs, slack_configs, ...)"
		}
	}
	return "the alertmanager: section has no receivers"
}

package scrape

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/grafana/regexp"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v3"
)

// Node job names: one job per endpoint of `gpuscope agent`, scraping every
// node. They are reserved like the built-in job names.
const (
	JobNodeAgent    = "node-agent"
	JobNodeCadvisor = "node-cadvisor"
	JobNodeGPU      = "node-gpu"
)

// nodeEndpoints are the paths every agent serves; the agent serves all
// three even with a collector off (empty), so a node's targets are up or
// down together.
var nodeEndpoints = []struct{ job, path string }{
	{JobNodeAgent, "/metrics"},
	{JobNodeCadvisor, "/metrics/cadvisor"},
	{JobNodeGPU, "/metrics/gpu"},
}

// DefaultNodesRefreshInterval is file SD's re-read interval, Prometheus's
// default; changes are normally seen at once through inotify.
const DefaultNodesRefreshInterval = model.Duration(5 * time.Minute)

// Nodes is the `nodes:` section: the other machines of a small cluster,
// each running `gpuscope agent`. It expands into the node-* scrape jobs,
// made of Prometheus's own static and file service discovery, relabelling
// and HTTP client config.
type Nodes struct {
	// Static lists nodes in the config file.
	Static []Node `yaml:"static"`
	// Files are file_sd files (JSON or YAML target groups, globs allowed):
	// edit them to add or remove nodes without a reload.
	Files []string `yaml:"files"`
	// RefreshInterval re-reads Files even without a change notification.
	RefreshInterval model.Duration `yaml:"refresh_interval"`
	// Scheme is http, or https for agents serving TLS.
	Scheme string `yaml:"scheme"`
	// HTTPClientConfig (basic_auth, authorization, tls_config, proxy_url,
	// ...) is used for every node, for agents run with --web.config.file.
	HTTPClientConfig config_util.HTTPClientConfig `yaml:",inline"`
}

// Node is one static node.
type Node struct {
	// Address is the agent's host:port.
	Address string
	// Name is the `instance` label of the node's series; default the host
	// part of Address.
	Name string
	// Labels are added to every series of the node.
	Labels model.LabelSet

	line int
}

// DefaultNodes is an empty nodes section with Prometheus's defaults.
func DefaultNodes() Nodes {
	return Nodes{
		RefreshInterval:  DefaultNodesRefreshInterval,
		Scheme:           "http",
		HTTPClientConfig: config_util.DefaultHTTPClientConfig,
	}
}

// Configured says whether any node is listed, statically or by file.
func (n *Nodes) Configured() bool { return len(n.Static) > 0 || len(n.Files) > 0 }

// fileSDName is file SD's own rule for file names (discovery/file).
var fileSDName = regexp.MustCompile(`^[^*]*(\*[^/]*)?\.(json|yml|yaml|JSON|YML|YAML)$`)

// Validate checks what the YAML decoder could not: names unique, file
// names file SD accepts, the HTTP client config consistent.
func (n *Nodes) Validate() error {
	if n.Scheme == "" {
		n.Scheme = "http"
	}
	if n.Scheme != "http" && n.Scheme != "https" {
		return fmt.Errorf("nodes: scheme %q must be http or https", n.Scheme)
	}
	if n.RefreshInterval <= 0 {
		n.RefreshInterval = DefaultNodesRefreshInterval
	}
	names := map[string]int{}
	for _, nd := range n.Static {
		if first, ok := names[nd.Name]; ok {
			return fmt.Errorf("line %d: nodes: name %q is already used on line %d; every node needs its own name (set name: to tell them apart)", nd.line, nd.Name, first)
		}
		names[nd.Name] = nd.line
	}
	for _, f := range n.Files {
		if !fileSDName.MatchString(f) {
			return fmt.Errorf("nodes: files: %q is not valid for file discovery (want a .json, .yml or .yaml file; a * only in the last path element)", f)
		}
	}
	if err := n.HTTPClientConfig.Validate(); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	return nil
}

// SetDirectory resolves relative file paths (files, TLS and credential
// files) against dir, the config file's folder, as Prometheus does.
func (n *Nodes) SetDirectory(dir string) {
	for i, f := range n.Files {
		n.Files[i] = config_util.JoinDir(dir, f)
	}
	n.HTTPClientConfig.SetDirectory(dir)
}

// UnmarshalYAML accepts a node as "host:port" or as a mapping with
// address, name and labels. Errors name the line, and so does a missing
// port: an agent has no default port gpuscope could guess for another
// machine.
func (nd *Node) UnmarshalYAML(value *yaml.Node) error {
	nd.line = value.Line
	switch value.Kind {
	case yaml.ScalarNode:
		nd.Address = value.Value
	case yaml.MappingNode:
		// value.Decode would not reject unknown keys (the decoder's
		// KnownFields does not reach custom unmarshalers), so the keys are
		// checked here.
		for i := 0; i+1 < len(value.Content); i += 2 {
			k, v := value.Content[i], value.Content[i+1]
			var err error
			switch k.Value {
			case "address":
				err = v.Decode(&nd.Address)
			case "name":
				err = v.Decode(&nd.Name)
			case "labels":
				var ls map[string]string
				if err = v.Decode(&ls); err == nil {
					nd.Labels = make(model.LabelSet, len(ls))
					for name, val := range ls {
						nd.Labels[model.LabelName(name)] = model.LabelValue(val)
					}
				}
			default:
				return fmt.Errorf("line %d: nodes: field %s not found in a node (want address, name, labels)", k.Line, k.Value)
			}
			if err != nil {
				return fmt.Errorf("line %d: nodes: %s: %w", v.Line, k.Value, err)
			}
		}
	default:
		return fmt.Errorf("line %d: nodes: a node is host:port or {address: host:port, name: ..., labels: {...}}", value.Line)
	}
	return nd.check()
}

func (nd *Node) check() error {
	if nd.Address == "" {
		return fmt.Errorf("line %d: nodes: a node needs an address (host:port of its gpuscope agent)", nd.line)
	}
	host, port, err := net.SplitHostPort(nd.Address)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) && ae.Err == "missing port in address" {
			return fmt.Errorf("line %d: nodes: address %q has no port; write host:port, e.g. %s", nd.line, nd.Address, net.JoinHostPort(nd.Address, "9089"))
		}
		return fmt.Errorf("line %d: nodes: address %q: %w", nd.line, nd.Address, err)
	}
	if host == "" {
		return fmt.Errorf("line %d: nodes: address %q has no host", nd.line, nd.Address)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("line %d: nodes: address %q: port %q is not a number from 1 to 65535", nd.line, nd.Address, port)
	}
	if nd.Name == "" {
		nd.Name = host
	}
	if err := nd.Labels.Validate(); err != nil {
		return fmt.Errorf("line %d: nodes: labels: %w", nd.line, err)
	}
	for _, reserved := range []model.LabelName{model.InstanceLabel, model.JobLabel} {
		if _, ok := nd.Labels[reserved]; ok {
			return fmt.Errorf("line %d: nodes: label %q is set by gpuscope (instance = name, job = node-*); use name: for the instance", nd.line, reserved)
		}
	}
	return nil
}

// instanceFromAddress gives a file_sd target without an `instance` label
// the host part of its address as instance (gpu-01:9089 → gpu-01,
// [fd00::1]:9089 → fd00::1), the name a static node gets by default. A
// target group that sets `instance` keeps it. Prometheus would otherwise
// use the whole address.
func instanceFromAddress() *relabel.Config {
	c := relabel.DefaultRelabelConfig
	c.SourceLabels = model.LabelNames{model.InstanceLabel, model.AddressLabel}
	c.Separator = ";"
	c.Regex = relabel.MustNewRegexp(`;(?:\[(.+)\]|(.+)):[0-9]+`)
	c.TargetLabel = model.InstanceLabel
	c.Replacement = "$1$2"
	c.Action = relabel.Replace
	return &c
}

// nodeJobs expands the nodes section into one scrape job per agent
// endpoint; nil when no node is configured.
func nodeJobs(n Nodes) []*promconfig.ScrapeConfig {
	if !n.Configured() {
		return nil
	}
	var sd discovery.Configs
	if len(n.Static) > 0 {
		groups := make(discovery.StaticConfig, 0, len(n.Static))
		for _, nd := range n.Static {
			ls := nd.Labels.Clone()
			if ls == nil {
				ls = model.LabelSet{}
			}
			ls[model.InstanceLabel] = model.LabelValue(nd.Name)
			groups = append(groups, &targetgroup.Group{
				Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(nd.Address)}},
				Labels:  ls,
				Source:  "nodes/" + nd.Name,
			})
		}
		sd = append(sd, groups)
	}
	if len(n.Files) > 0 {
		sd = append(sd, &file.SDConfig{Files: n.Files, RefreshInterval: n.RefreshInterval})
	}
	jobs := make([]*promconfig.ScrapeConfig, 0, len(nodeEndpoints))
	for _, ep := range nodeEndpoints {
		c := promconfig.DefaultScrapeConfig
		c.JobName = ep.job
		c.MetricsPath = ep.path
		c.Scheme = n.Scheme
		c.HTTPClientConfig = n.HTTPClientConfig
		c.ServiceDiscoveryConfigs = sd
		c.RelabelConfigs = []*relabel.Config{instanceFromAddress()}
		if ep.job == JobNodeCadvisor {
			// As the built-in cadvisor job: cAdvisor's own timestamps, and
			// still stale at once when a container goes.
			c.HonorTimestamps = true
			c.TrackTimestampsStaleness = true
		}
		jobs = append(jobs, &c)
	}
	return jobs
}

package scrape

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
)

// Built-in job names. They are reserved: a user job with one of these names
// is a config error.
const (
	JobSelf     = "gpuscope"
	JobCadvisor = "cadvisor"
	JobGPU      = "gpu"
)

// Builtin describes the collectors of this process that the built-in jobs
// scrape.
type Builtin struct {
	// Address is the host:port of this process's collectors.
	Address string
	// Instance is the `instance` label of every built-in series: the node's
	// host name, so series from several nodes line up by machine, not by
	// 127.0.0.1:port.
	Instance string
	Cadvisor bool
	GPU      bool
	// Nodes are the other machines, each running `gpuscope agent`; they
	// add the node-* jobs.
	Nodes Nodes
}

// AddBuiltinJobs prepends the built-in jobs to cfg's scrape configs, with
// the global scrape interval and Prometheus's defaults for everything else.
func AddBuiltinJobs(cfg *promconfig.Config, b Builtin) error {
	jobs, err := builtinJobs(cfg, b)
	if err != nil {
		return err
	}
	cfg.ScrapeConfigs = append(jobs, cfg.ScrapeConfigs...)
	return nil
}

// CheckBuiltinJobs returns the error AddBuiltinJobs would, changing
// nothing: a config can be refused before the address of the collectors
// is known.
func CheckBuiltinJobs(cfg *promconfig.Config, b Builtin) error {
	_, err := builtinJobs(cfg, b)
	return err
}

func builtinJobs(cfg *promconfig.Config, b Builtin) ([]*promconfig.ScrapeConfig, error) {
	jobs := []*promconfig.ScrapeConfig{builtinJob(JobSelf, "/metrics", b)}
	if b.Cadvisor {
		j := builtinJob(JobCadvisor, "/metrics/cadvisor", b)
		// cAdvisor stamps samples with the time its housekeeping read the
		// cgroup. Honour that, and still mark series of a vanished
		// container stale at once, as Prometheus's own cAdvisor setups do.
		j.HonorTimestamps = true
		j.TrackTimestampsStaleness = true
		jobs = append(jobs, j)
	}
	if b.GPU {
		jobs = append(jobs, builtinJob(JobGPU, "/metrics/gpu", b))
	}
	jobs = append(jobs, nodeJobs(b.Nodes)...)
	for _, user := range cfg.ScrapeConfigs {
		if err := CheckJobName(user.JobName, b); err != nil {
			return nil, fmt.Errorf("scrape_configs: %w", err)
		}
	}
	for _, j := range jobs {
		if err := j.Validate(cfg.GlobalConfig); err != nil {
			return nil, fmt.Errorf("built-in job %s: %w", j.JobName, err)
		}
	}
	return jobs, nil
}

// CheckJobName refuses a user job named like a built-in job of b: the
// collectors b turns on, and the node jobs even while no node is listed,
// so adding the first node never breaks a working config.
func CheckJobName(name string, b Builtin) error {
	reserved := []string{JobSelf}
	if b.Cadvisor {
		reserved = append(reserved, JobCadvisor)
	}
	if b.GPU {
		reserved = append(reserved, JobGPU)
	}
	if slices.Contains(reserved, name) {
		return fmt.Errorf("job_name %q is reserved for gpuscope's built-in collector; choose another name", name)
	}
	for _, ep := range nodeEndpoints {
		if name == ep.job {
			return fmt.Errorf("job_name %q is reserved for the jobs of the nodes: section; choose another name", name)
		}
	}
	return nil
}

func builtinJob(name, path string, b Builtin) *promconfig.ScrapeConfig {
	c := promconfig.DefaultScrapeConfig
	c.JobName = name
	c.MetricsPath = path
	c.Scheme = "http"
	// The built-in jobs scrape this process over the in-memory listener:
	// nothing crosses a network, so gzip would only cost CPU at both ends
	// (a tenth of a 200-container cAdvisor scrape, bench/containers.sh).
	c.EnableCompression = false
	c.ServiceDiscoveryConfigs = discovery.Configs{
		discovery.StaticConfig{{
			Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(b.Address)}},
			Labels:  model.LabelSet{model.InstanceLabel: model.LabelValue(b.Instance)},
			Source:  name,
		}},
	}
	return &c
}

func modelDuration(d time.Duration) model.Duration { return model.Duration(d) }

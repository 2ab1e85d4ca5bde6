// Package cadvisor runs cAdvisor's container manager inside gpuscope and
// exposes its Prometheus collectors, so container metrics keep the names,
// labels and semantics of a standalone cAdvisor.
package cadvisor

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/cadvisor/lib/container"
	"github.com/prometheus/common/model"
)

// Config is the `cadvisor:` section of the gpuscope config file.
type Config struct {
	// Enabled turns the in-process cAdvisor on. With it off, /metrics/cadvisor
	// is not served and the built-in `cadvisor` job is not scraped.
	Enabled bool `yaml:"enabled"`
	// HousekeepingInterval is how often cAdvisor refreshes each container's
	// stats. Zero means the global scrape interval: refreshing faster than
	// anyone scrapes only burns CPU (cAdvisor's maintainers measured ~90% less
	// CPU going from 1s to 10s).
	HousekeepingInterval model.Duration `yaml:"housekeeping_interval"`
	// EnableMetrics turns on metric sets that cAdvisor's own binary leaves off
	// by default (see DefaultDisabledMetrics).
	EnableMetrics []string `yaml:"enable_metrics"`
	// DisableMetrics turns off metric sets that are on by default.
	DisableMetrics []string `yaml:"disable_metrics"`
	// RawCgroupPrefixAllowlist limits raw cgroup containers to these prefixes
	// (cAdvisor's --raw_cgroup_prefix_whitelist). Empty means every cgroup.
	RawCgroupPrefixAllowlist []string `yaml:"raw_cgroup_prefix_allowlist"`
	// EnvMetadataAllowlist names environment variables of containers exported
	// as container_env_* labels (cAdvisor's --env_metadata_whitelist).
	EnvMetadataAllowlist []string `yaml:"env_metadata_allowlist"`
	// StoreContainerLabels exports every container label as a
	// container_label_* label, as cAdvisor does by default. Off by default here
	// because label churn multiplies series; name them in
	// ContainerLabelAllowlist instead.
	StoreContainerLabels bool `yaml:"store_container_labels"`
	// ContainerLabelAllowlist names container labels exported when
	// StoreContainerLabels is off.
	ContainerLabelAllowlist []string `yaml:"container_label_allowlist"`
}

// DefaultDisabledMetrics are the metric sets cAdvisor's binary disables by
// default (its --disable_metrics default), plus percpu, which the kubelet
// also disables: per-CPU series multiply every container's CPU series by
// the core count (128 cores × 100 containers = 12,800 series) and every
// dashboard sums them away. With it off, container_cpu_usage_seconds_total
// has one series per container, cpu="total", as on a kubelet.
//
// perf_event is off too: its metrics need a perf events config file,
// which gpuscope does not take, and with it on cAdvisor logs a failed
// perf_event cgroup lookup for every container.
var DefaultDisabledMetrics = []container.MetricKind{
	container.PerCpuUsageMetrics,
	container.PerfMetrics,
	container.NetworkAdvancedTcpUsageMetrics,
	container.CPUTopologyMetrics,
	container.CPUSetMetrics,
	container.HugetlbUsageMetrics,
	container.MemoryNumaMetrics,
	container.ProcessMetrics,
	container.ReferencedMemoryMetrics,
	container.ResctrlMetrics,
	container.ProcessSchedulerMetrics,
	container.NetworkTcpUsageMetrics,
	container.NetworkUdpUsageMetrics,
}

// DefaultConfig returns the settings used when the config file says nothing.
func DefaultConfig() Config {
	return Config{Enabled: true}
}

// Validate reports unknown metric set names.
func (c Config) Validate() error {
	_, err := c.MetricSet()
	return err
}

// MetricSet resolves the enabled metric sets: cAdvisor's full set, minus its
// binary's default-disabled ones, plus EnableMetrics, minus DisableMetrics.
func (c Config) MetricSet() (container.MetricSet, error) {
	set := container.MetricSet{}
	for kind := range container.AllMetrics {
		set[kind] = struct{}{}
	}
	for _, kind := range DefaultDisabledMetrics {
		delete(set, kind)
	}
	for _, name := range c.EnableMetrics {
		kind, err := metricKind(name, "cadvisor.enable_metrics")
		if err != nil {
			return nil, err
		}
		set[kind] = struct{}{}
	}
	for _, name := range c.DisableMetrics {
		kind, err := metricKind(name, "cadvisor.disable_metrics")
		if err != nil {
			return nil, err
		}
		delete(set, kind)
	}
	return set, nil
}

func metricKind(name, key string) (container.MetricKind, error) {
	kind := container.MetricKind(name)
	if _, ok := container.AllMetrics[kind]; ok {
		return kind, nil
	}
	known := make([]string, 0, len(container.AllMetrics))
	for k := range container.AllMetrics {
		known = append(known, string(k))
	}
	sort.Strings(known)
	return "", fmt.Errorf("%s: unknown metric set %q (known: %s)", key, name, strings.Join(known, ", "))
}

// MetricSetNames lists the enabled sets, sorted, for logs and docs.
func MetricSetNames(set container.MetricSet) []string {
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, string(k))
	}
	slices.Sort(names)
	return names
}

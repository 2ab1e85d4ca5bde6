// Package cadvisor runs cAdvisor's container manager inside gpuscope and
// exposes its Prometheus collectors, so container metrics keep the names,
// labels and semantics of a standalone cAdvisor.
package cadvisor

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/google/cadvisor/lib/container"
	"github.com/gpuscope/gpuscope/scrape/families"
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
	// Families turns groups of families within the enabled metric sets
	// on; all are off by default (the series diet, docs/metrics.md "What is
	// stored by default").
	Families families.Cadvisor `yaml:"families"`
	// DockerEndpoint, PodmanEndpoint and ContainerdEndpoint are the
	// runtimes' API sockets that cAdvisor asks for container names, images
	// and labels (its --docker, --podman and --containerd flags). cAdvisor
	// tries each once, when gpuscope starts; a runtime absent then is
	// measured as raw cgroups until the next start.
	DockerEndpoint     string `yaml:"docker_endpoint"`
	PodmanEndpoint     string `yaml:"podman_endpoint"`
	ContainerdEndpoint string `yaml:"containerd_endpoint"`
}

// The runtimes' default endpoints, as cAdvisor's flags have them.
const (
	DefaultDockerEndpoint     = "unix:///var/run/docker.sock"
	DefaultPodmanEndpoint     = "unix:///var/run/podman/podman.sock"
	DefaultContainerdEndpoint = "/run/containerd/containerd.sock"
)

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
//
// cpuLoad is off because nothing built in reads its load averages and
// task states, and reading them costs a netlink request per container
// at every housekeeping.
var DefaultDisabledMetrics = []container.MetricKind{
	container.PerCpuUsageMetrics,
	container.CpuLoadMetrics,
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
	return Config{
		Enabled:            true,
		DockerEndpoint:     DefaultDockerEndpoint,
		PodmanEndpoint:     DefaultPodmanEndpoint,
		ContainerdEndpoint: DefaultContainerdEndpoint,
	}
}

// Validate reports unknown metric set names and endpoints cAdvisor's
// clients cannot dial.
func (c Config) Validate() error {
	if _, err := c.MetricSet(); err != nil {
		return err
	}
	// Docker's client takes unix:// and tcp:// hosts; cAdvisor's Podman
	// client only unix://; its containerd client a socket path.
	if err := checkEndpoint("cadvisor.docker_endpoint", c.DockerEndpoint, DefaultDockerEndpoint, "unix", "tcp"); err != nil {
		return err
	}
	if err := checkEndpoint("cadvisor.podman_endpoint", c.PodmanEndpoint, DefaultPodmanEndpoint, "unix"); err != nil {
		return err
	}
	if !strings.HasPrefix(c.ContainerdEndpoint, "/") {
		return fmt.Errorf("cadvisor.containerd_endpoint: %q is not an absolute socket path (e.g. %s)", c.ContainerdEndpoint, DefaultContainerdEndpoint)
	}
	return nil
}

func checkEndpoint(key, endpoint, example string, schemes ...string) error {
	u, err := url.Parse(endpoint)
	if err != nil || !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%s: %q is not a %s:// address (e.g. %s)", key, endpoint, strings.Join(schemes, ":// or "), example)
	}
	if u.Scheme == "unix" && !strings.HasPrefix(u.Path, "/") {
		return fmt.Errorf("%s: %q names no absolute socket path (e.g. %s)", key, endpoint, example)
	}
	if u.Scheme == "tcp" && u.Host == "" {
		return fmt.Errorf("%s: %q names no host:port (e.g. tcp://127.0.0.1:2375)", key, endpoint)
	}
	return nil
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

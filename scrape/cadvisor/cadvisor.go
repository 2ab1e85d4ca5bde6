package cadvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	// The runtime factories register themselves with cAdvisor when imported.
	// Each one probes its runtime at start and, where the runtime is absent,
	// logs that its registration failed and stays out of the way.
	_ "github.com/google/cadvisor/container/docker/install"
	_ "github.com/google/cadvisor/container/podman/install"
	_ "github.com/google/cadvisor/lib/container/containerd/install"
	_ "github.com/google/cadvisor/lib/container/crio/install"
	_ "github.com/google/cadvisor/lib/container/systemd/install"

	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"
)

// Options configure a Collector.
type Options struct {
	Config Config
	// Interval is the housekeeping interval used when Config leaves it zero;
	// the caller passes the global scrape interval.
	Interval time.Duration
	Logger   *slog.Logger
}

// Collector owns an in-process cAdvisor manager and the registry that
// exposes its container and machine metrics.
type Collector struct {
	logger   *slog.Logger
	manager  manager.Manager
	registry *prometheus.Registry
	interval time.Duration
	metrics  container.MetricSet
}

// New creates the cAdvisor manager. It does not start housekeeping; Run does.
func New(o Options) (*Collector, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	set, err := o.Config.MetricSet()
	if err != nil {
		return nil, err
	}
	interval := time.Duration(o.Config.HousekeepingInterval)
	if interval <= 0 {
		interval = o.Interval
	}
	if interval <= 0 {
		return nil, errors.New("cadvisor: housekeeping interval must be positive")
	}
	// cAdvisor reads its per-container housekeeping interval from a flag
	// variable of its manager package rather than from an option; there is
	// one cAdvisor per process, so setting it here is the supported way
	// (the kubelet does the same through the flag).
	*manager.HousekeepingInterval = interval
	maxInterval := max(60*time.Second, interval)
	allowDynamic := true
	// cAdvisor's raw factory accepts a cgroup when its name has one of
	// these prefixes; its flag's empty default splits to [""], which
	// accepts every cgroup. An empty list would accept only "/".
	prefixes := o.Config.RawCgroupPrefixAllowlist
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	m, err := manager.New(
		// Keep two housekeeping rounds of stats: the exporter reads only the
		// latest one, and rates are computed by PromQL, not by cAdvisor.
		memory.New(2*interval+time.Second, nil),
		sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: &maxInterval, AllowDynamic: &allowDynamic},
		set,
		prefixes,
		o.Config.EnvMetadataAllowlist,
		"", // no perf events config: perf_event metrics stay empty unless configured
		0,  // resctrl interval: resctrl is off by default
	)
	if err != nil {
		return nil, fmt.Errorf("create cAdvisor manager: %w", err)
	}

	labels := metrics.DefaultContainerLabels
	if !o.Config.StoreContainerLabels {
		labels = metrics.BaseContainerLabels(o.Config.ContainerLabelAllowlist)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewPrometheusCollector(m, labels, set, clock.RealClock{}, info.RequestOptions{
			IdType:    info.TypeName,
			Count:     1,
			Recursive: true,
		}),
		metrics.NewPrometheusMachineCollector(m, set),
	)
	return &Collector{
		logger:   o.Logger,
		manager:  m,
		registry: reg,
		interval: interval,
		metrics:  set,
	}, nil
}

// Run starts cAdvisor's housekeeping and watchers and stops them when ctx
// ends.
func (c *Collector) Run(ctx context.Context) error {
	if err := c.manager.Start(); err != nil {
		return fmt.Errorf("start cAdvisor manager: %w", err)
	}
	c.logger.Info("cAdvisor started", "housekeeping_interval", c.interval, "metrics", strings.Join(MetricSetNames(c.metrics), ","))
	<-ctx.Done()
	if err := c.manager.Stop(); err != nil {
		return fmt.Errorf("stop cAdvisor manager: %w", err)
	}
	return nil
}

// Handler serves cAdvisor's metrics in the exposition format, as
// /metrics/cadvisor of the kubelet does.
func (c *Collector) Handler() http.Handler {
	return promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{
		// A container that fails to report must not fail the whole scrape;
		// cAdvisor counts such failures in container_scrape_error.
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// Gatherer exposes the registry for tests and benchmarks.
func (c *Collector) Gatherer() prometheus.Gatherer { return c.registry }

// Lookup returns the name and image cAdvisor knows for a container id (its
// cgroup path), so other collectors can label their series the same way.
func (c *Collector) Lookup(id string) (name, image string, ok bool) {
	if !c.manager.Exists(id) {
		return "", "", false
	}
	infos, err := c.manager.GetRequestedContainersInfo(id, info.RequestOptions{IdType: info.TypeName, Count: 1})
	if err != nil {
		return "", "", false
	}
	ci, found := infos[id]
	if !found || ci == nil {
		return "", "", false
	}
	if len(ci.Aliases) > 0 {
		name = ci.Aliases[0]
	}
	return name, ci.Spec.Image, true
}

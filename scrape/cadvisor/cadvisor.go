package cadvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	// The runtime factories register themselves with cAdvisor when imported.
	// Each one probes its runtime at start and, where the runtime is absent,
	// logs that its registration failed and stays out of the way.
	_ "github.com/google/cadvisor/container/docker/install"
	_ "github.com/google/cadvisor/container/podman/install"
	_ "github.com/google/cadvisor/lib/container/containerd/install"
	_ "github.com/google/cadvisor/lib/container/crio/install"
	_ "github.com/google/cadvisor/lib/container/systemd/install"

	// So do the filesystem plugins, without which cAdvisor lists no
	// filesystem: the root cgroup's container_fs_usage_bytes and
	// container_fs_limit_bytes per device (HostFilesystemFillingUp) and
	// the disk of Docker's layers. Not NFS: a hung NFS server would leave
	// a goroutine stuck in statfs at every housekeeping.
	_ "github.com/google/cadvisor/lib/fs/btrfs/install"
	_ "github.com/google/cadvisor/lib/fs/overlay/install"
	_ "github.com/google/cadvisor/lib/fs/tmpfs/install"
	_ "github.com/google/cadvisor/lib/fs/vfs/install"
	_ "github.com/google/cadvisor/lib/fs/zfs/install"

	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/gpuscope/gpuscope/scrape/exposition"
	"github.com/gpuscope/gpuscope/scrape/families"
	"github.com/gpuscope/gpuscope/workload"
)

// Options configure a Collector.
type Options struct {
	Config Config
	// Interval is the housekeeping interval used when Config leaves it zero;
	// the caller passes the global scrape interval.
	Interval time.Duration
	Logger   *slog.Logger
	// Workloads gives each container its workload labels (workload,
	// runtime, image, compose_*, slurm_*). Share it with the GPU
	// collector's so that both label a container alike; nil means a cache
	// of this collector's own.
	Workloads *workload.Cache
}

// Collector owns an in-process cAdvisor manager and the registry that
// exposes its container and machine metrics.
//
// The manager is created by Run, not New: creating it asks each runtime
// for its storage root, and cAdvisor's Docker plugin retries that five
// times a second apart when there is no Docker daemon, so a host without
// Docker would wait 5 s before anything else started (cAdvisor itself
// starts that slowly). Until it exists, scrapes wait for it within their
// own timeout and Lookup knows no containers.
type Collector struct {
	logger   *slog.Logger
	registry *prometheus.Registry
	interval time.Duration
	metrics  container.MetricSet
	prefixes []string
	envAllow []string
	labels   metrics.ContainerLabelsFunc
	cache    *workload.Cache
	config   Config
	// runtimesWhy says, per runtime probed before start, why it will be
	// measured as raw cgroups (set by newManager, read once by Run).
	runtimesWhy map[string]string
	// found and missing are the runtimes whose factories cAdvisor
	// registered at start, and those it did not.
	found, missing []string

	started  chan struct{}   // closed once Run has tried to create and start the manager
	manager  manager.Manager // set before started is closed; nil if that failed
	startErr error
}

// New checks the configuration. It creates no cAdvisor manager and starts
// no housekeeping; Run does both.
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
	// cAdvisor's raw factory accepts a cgroup when its name has one of
	// these prefixes; its flag's empty default splits to [""], which
	// accepts every cgroup. An empty list would accept only "/".
	prefixes := o.Config.RawCgroupPrefixAllowlist
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	labels := metrics.DefaultContainerLabels
	if !o.Config.StoreContainerLabels {
		labels = metrics.BaseContainerLabels(o.Config.ContainerLabelAllowlist)
	}
	if o.Workloads == nil {
		o.Workloads = workload.NewCache(nil)
	}
	return &Collector{
		logger:   o.Logger,
		registry: prometheus.NewRegistry(),
		interval: interval,
		metrics:  set,
		prefixes: prefixes,
		envAllow: o.Config.EnvMetadataAllowlist,
		labels:   withWorkload(labels, o.Workloads),
		cache:    o.Workloads,
		config:   o.Config,
		started:  make(chan struct{}),
	}, nil
}

// Run creates the cAdvisor manager, starts its housekeeping and watchers,
// and stops them when ctx ends. Run once.
func (c *Collector) Run(ctx context.Context) error {
	m, err := c.start(ctx)
	if err != nil {
		c.startErr = err
		close(c.started)
		return err
	}
	c.manager = m
	close(c.started)
	found, missing := c.found, c.missing
	attrs := []any{"housekeeping_interval", c.interval, "metrics", strings.Join(MetricSetNames(c.metrics), ","),
		"runtimes", joinOrNone(found), "runtimes_not_found", joinOrNone(missing)}
	level := slog.LevelInfo
	var why []string
	for _, r := range missing {
		if reason, ok := c.runtimesWhy[r]; ok {
			why = append(why, r+": "+reason)
			if strings.Contains(reason, errNotAnswering.Error()) {
				// A runtime that is there but hung: its containers lose
				// their names until a restart, which someone should know.
				level = slog.LevelWarn
			}
		}
	}
	if len(why) > 0 {
		attrs = append(attrs, "why_not_found", strings.Join(why, "; "))
	}
	c.logger.Log(ctx, level, "cAdvisor started", attrs...)
	<-ctx.Done()
	if err := m.Stop(); err != nil {
		return fmt.Errorf("stop cAdvisor manager: %w", err)
	}
	return nil
}

// start creates and starts the manager, and registers cAdvisor's
// collectors last, so that the registry gathers nothing before the
// handler and Lookup consider cAdvisor started.
func (c *Collector) start(ctx context.Context) (manager.Manager, error) {
	m, err := c.newManager(ctx)
	if err != nil {
		return nil, err
	}
	// A forgotten container's identity leaves the cache with it.
	m.SetEventSink(forgetDeleted{c.cache})
	// Start creates the root container and those already there, each
	// with its first housekeeping at once, so the first scrape after it
	// has them.
	// Start registers the runtimes' factories in cAdvisor's process-wide
	// list, which registeredRuntimes reads without cAdvisor's (unexported)
	// lock: both under processWide's, so that another collector of the
	// process starting does not write the list while it is read.
	processWide.Lock()
	err = m.Start()
	if err == nil {
		c.found, c.missing = registeredRuntimes()
	}
	processWide.Unlock()
	if err != nil {
		return nil, fmt.Errorf("start cAdvisor manager: %w", err)
	}
	c.waitForRootStats(ctx, m)

	containers := oomInfoProvider{Manager: m}
	if c.metrics.Has(container.OOMMetrics) {
		if containers.oom, err = newOOMKills(); err != nil {
			c.logger.Warn("container_oom_events_total will stay 0: the kernel's OOM kill counts cannot be read", "err", err)
		}
	}
	if err := c.registry.Register(metrics.NewPrometheusCollector(containers, c.labels, c.metrics, clock.RealClock{}, info.RequestOptions{
		IdType:    info.TypeName,
		Count:     1,
		Recursive: true,
	})); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("register cAdvisor's container metrics: %w", err)
	}
	if err := c.registry.Register(metrics.NewPrometheusMachineCollector(m, c.metrics)); err != nil {
		_ = m.Stop()
		return nil, fmt.Errorf("register cAdvisor's machine metrics: %w", err)
	}
	return m, nil
}

// waitForRootStats waits, at most one housekeeping interval, for the root
// container's first stats: Start begins each container's housekeeping at
// once but asynchronously, and a scrape let in before it would find no
// container series at all.
func (c *Collector) waitForRootStats(ctx context.Context, m manager.Manager) {
	timeout := time.NewTimer(c.interval)
	defer timeout.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		infos, err := m.GetRequestedContainersInfo("/", info.RequestOptions{IdType: info.TypeName, Count: 1})
		if err == nil && infos["/"] != nil && len(infos["/"].Stats) > 0 {
			return
		}
		select {
		case <-ctx.Done(): // shutting down: nobody is waiting for the stats
			return
		case <-timeout.C:
			c.logger.Warn("cAdvisor has no stats of the root cgroup yet; serving without them", "waited", c.interval, "err", err)
			return
		case <-tick.C:
		}
	}
}

func (c *Collector) newManager(ctx context.Context) (manager.Manager, error) {
	cfg, why := c.config.guardEndpoints(ctx)
	c.runtimesWhy = why
	kept, err := claimProcessWide(c.interval, cfg)
	if err != nil {
		return nil, err
	}
	if len(kept) > 0 {
		c.logger.Warn("Another cAdvisor in this process set its process-wide settings first; they stay", "kept", strings.Join(kept, "; "))
	}
	maxInterval := max(60*time.Second, c.interval)
	allowDynamic := true
	m, err := manager.New(
		// Keep two housekeeping rounds of stats: the exporter reads only the
		// latest one, and rates are computed by PromQL, not by cAdvisor.
		memory.New(2*c.interval+time.Second, nil),
		sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: &maxInterval, AllowDynamic: &allowDynamic},
		c.metrics,
		c.prefixes,
		c.envAllow,
		"", // no perf events config: perf_event metrics stay empty unless configured
		0,  // resctrl interval: resctrl is off by default
	)
	if err != nil {
		return nil, fmt.Errorf("create cAdvisor manager: %w", err)
	}
	return m, nil
}

// Handler serves cAdvisor's metrics in the exposition format, as
// /metrics/cadvisor of the kubelet does. A scrape that arrives before Run
// has started the manager waits for it as long as the scrape's context
// allows, then gets 503 with the reason.
func (c *Collector) Handler() http.Handler {
	// A container that fails to report must not fail the whole scrape;
	// cAdvisor counts such failures in container_scrape_error. What the
	// registry drops (a collector's panic, a duplicate series) is logged,
	// as it is nowhere else.
	metricsHandler := exposition.Handler(c.Gatherer(), c.logger)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-c.started:
		case <-r.Context().Done():
			http.Error(w, "cAdvisor is still starting", http.StatusServiceUnavailable)
			return
		}
		if c.startErr != nil {
			http.Error(w, c.startErr.Error(), http.StatusServiceUnavailable)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
}

// Gatherer gathers what Handler serves: cAdvisor's families less those the
// config's families: groups leave out. It gathers nothing until Run has
// started cAdvisor.
func (c *Collector) Gatherer() prometheus.Gatherer {
	return families.Gatherer(c.registry, c.config.Families.Keep)
}

// Lookup returns what cAdvisor knows of a container by its id (its cgroup
// path): the name (its first alias), image, labels and runtime that its
// workload identity is resolved from, exactly as this collector's own
// labels resolve it, so other collectors that pass it to the shared
// workload.Cache label their series the same way and find the same cache
// entry. It never waits: before cAdvisor has discovered a container it is
// not known, as for any container in its first moments.
func (c *Collector) Lookup(id string) (workload.Metadata, bool) {
	select {
	case <-c.started:
	default:
		return workload.Metadata{}, false
	}
	if c.manager == nil || !c.manager.Exists(id) {
		return workload.Metadata{}, false
	}
	infos, err := c.manager.GetRequestedContainersInfo(id, info.RequestOptions{IdType: info.TypeName, Count: 1})
	if err != nil {
		return workload.Metadata{}, false
	}
	ci, found := infos[id]
	if !found || ci == nil {
		return workload.Metadata{}, false
	}
	return metadataOf(ci), true
}

// metadataOf is what cAdvisor tells the workload resolvers about ci.
func metadataOf(ci *info.ContainerInfo) workload.Metadata {
	md := workload.Metadata{Image: ci.Spec.Image, Labels: ci.Spec.Labels, Runtime: ci.Namespace}
	if len(ci.Aliases) > 0 {
		md.Name = ci.Aliases[0]
	}
	return md
}

// withWorkload adds each container's workload labels to those of labels,
// which keeps cAdvisor's own (id, name, image, container_label_*,
// container_env_*). image is replaced by the identity's, which is the
// same Spec.Image made safe for a label value. The identity is computed
// once per cgroup, not per scrape: the cache keeps it until cAdvisor
// forgets the container (forgetDeleted).
//
// Every value is then made a valid label value (workload.LabelValue; the
// GPU collector writes its id label the same way, so the two still join).
// cAdvisor's collector builds its series with MustNewConstMetric: one
// cgroup whose name is not valid UTF-8 (any user with a delegated cgroup
// subtree can mkdir one) would panic it part-way, and every container
// after that one in its map's order would be missing from the scrape.
func withWorkload(labels metrics.ContainerLabelsFunc, cache *workload.Cache) metrics.ContainerLabelsFunc {
	return func(ci *info.ContainerInfo) map[string]string {
		set := labels(ci)
		cache.Get(ci.Name, metadataOf(ci)).AddTo(set)
		for k, v := range set {
			if !utf8.ValidString(v) {
				set[k] = workload.LabelValue(v)
			}
		}
		return set
	}
}

// forgetDeleted is the manager's event sink: it drops the identity of each
// container cAdvisor destroys, when its cgroup is gone. A scrape or a GPU
// cycle that was reading the container at that moment may cache it again;
// such strays are bounded by the cache's MaxEntries.
type forgetDeleted struct{ cache *workload.Cache }

func (f forgetDeleted) AddEvent(e *info.Event) error {
	if e.EventType == info.EventContainerDeletion {
		f.cache.Forget(e.ContainerName)
	}
	return nil
}

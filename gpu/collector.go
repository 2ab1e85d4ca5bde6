package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscope/gpuscope/workload"
)

// Options are what the rest of gpuscope gives the GPU collector.
type Options struct {
	Config Config
	// Interval between samples; the caller resolves Config.Interval = 0 to
	// the global scrape interval. 0 here means Config.Interval, else 15s.
	Interval time.Duration
	// Hostname is the value of the Hostname label (default os.Hostname).
	Hostname string
	// Logger gets one line per state change; nil discards.
	Logger *slog.Logger
	// ProcRoot is where /proc is mounted (default "/proc").
	ProcRoot string
	// ContainerLookup, when set, gives what cAdvisor knows of a container
	// by its id (cgroup path): its name for the name label, and the
	// metadata its workload identity is resolved from. cAdvisor's side
	// resolves from the same metadata, so both find one cached identity.
	ContainerLookup func(id string) (workload.Metadata, bool)
	// Workloads gives each container its workload labels (workload,
	// runtime, image, compose_*, slurm_*). Share it with the cAdvisor
	// collector's so the two label a container alike; nil means a cache
	// of this collector's own.
	Workloads *workload.Cache
	// NVML replaces the real library, for tests (go-nvml's mock). nil
	// means nvml.New(), loaded on first use.
	NVML nvml.Interface
	// NVIDIADevices are glob patterns of files that exist only where
	// NVIDIA GPUs and their kernel driver are (default /dev/nvidia[0-9]*
	// and /proc/driver/nvidia/gpus/*). Backend auto without a loadable
	// libnvidia-ml reports "no GPUs" only when none matches; otherwise the
	// collector is down (a GPU node without the driver's libraries, e.g. a
	// container without the NVIDIA runtime).
	NVIDIADevices []string
	// Now replaces time.Now for sample timestamps and the backend's clock.
	Now func() time.Time
	// KernelLog is where the NVML backend reads the kernel's log for the
	// XIDs NVML may not deliver (79 fallen off the bus, 119 and 120 GSP
	// errors): default /dev/kmsg, which needs root or CAP_SYSLOG; "-"
	// reads none.
	KernelLog string
	// NewBackend, when set, makes the backend in place of the one
	// Config.Backend names, from what New resolved of these Options; it
	// must be set for backend sim, whose simulator is gpu/sim's. nil
	// means NVML for auto and nvml, nothing for none.
	NewBackend func(*BackendEnv) (Backend, error)
}

// Collector samples GPUs on its own ticker and serves the latest complete
// sample as a prometheus.Collector. Register it in the registry served at
// /metrics/gpu; Collect never waits on the driver.
type Collector struct {
	backend  Backend
	env      *BackendEnv
	logger   *slog.Logger
	interval time.Duration
	timeout  time.Duration
	auto     bool
	now      func() time.Time
	d        *descs

	snap    atomic.Pointer[snapshot]
	running atomic.Bool

	// Owned by whichever goroutine runs the cycle; cycles never overlap.
	opened     bool
	lastErrMsg map[errKey]string
	// failures counts consecutive cycles that could not open the backend
	// or read any GPU; the next open waits until reopenAt (backoff).
	failures int
	reopenAt time.Time
	openErr  error
	// restarts counts consecutive opens that found only a new process
	// can read the GPUs (ErrRestartNeeded).
	restarts int
	// denied are the fields the driver refused gpuscope's user, logged once.
	denied fieldSet

	mu     sync.Mutex // guards the self-monitoring state below
	up     bool
	reason string
	// noGPUs is backend auto finding no driver: not a failure, a machine
	// without NVIDIA GPUs; backend_info then says "none".
	noGPUs   bool
	errCount map[errKey]float64
	cycles   float64
	timeouts float64
	lastDur  float64
	lastOK   time.Time
	// renderErrs counts series left out of the exposition (render);
	// renderLogged is whether the first one was logged.
	renderErrs   float64
	renderLogged bool
}

type errKey struct{ gpu, field string }

var _ prometheus.Collector = (*Collector)(nil)

// errDisabled is the "reason" of backend none.
var errDisabled = errors.New("GPU collection disabled (gpu.backend: none)")

// New builds a collector. It starts nothing and touches no driver, so it
// cannot fail for want of one; it fails only on a bad config.
func New(o Options) (*Collector, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = time.Duration(o.Config.Interval)
	}
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	if o.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("read host name for the %s label: %w", o.Config.HostnameLabel, err)
		}
		o.Hostname = h
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Workloads == nil {
		o.Workloads = workload.NewCache(nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NVIDIADevices == nil {
		o.NVIDIADevices = []string{"/dev/nvidia[0-9]*", "/proc/driver/nvidia/gpus/*"}
	}
	timeout := time.Duration(o.Config.Timeout)
	if timeout <= 0 {
		timeout = o.Interval
	}
	enabled := o.Config.Families.enabledFields()
	withHost := o.Config.HostnameLabel != HostnameLabelNone

	c := &Collector{
		env:        newBackendEnv(&o, enabled, withHost),
		logger:     o.Logger,
		interval:   o.Interval,
		timeout:    timeout,
		auto:       o.Config.Backend == BackendAuto,
		now:        o.Now,
		d:          newDescs(enabled, o.Config.HostnameLabel, o.Config.Families.PerProcess),
		lastErrMsg: map[errKey]string{},
		errCount:   map[errKey]float64{},
	}
	switch {
	case o.NewBackend != nil:
		b, err := o.NewBackend(c.env)
		if err != nil {
			// Unwrapped: a backend's config errors name their key
			// (gpu.sim.count: ...), as Config.Validate's do.
			return nil, err
		}
		c.backend = b
	case o.Config.Backend == BackendAuto, o.Config.Backend == BackendNVML:
		lib := o.NVML
		if lib == nil {
			lib = nvml.New()
		}
		c.backend = newNVMLBackend(lib, &o, c.env)
	case o.Config.Backend == BackendSim:
		return nil, fmt.Errorf("gpu.backend: %s needs the simulator, which the caller makes (Options.NewBackend, gpu/sim)", BackendSim)
	case o.Config.Backend == BackendNone:
		c.backend = noneBackend{}
	}
	c.d.backend = c.backend.Name()
	return c, nil
}

// Run samples every interval until ctx ends, then closes the backend
// (NVML handle, event loop, the simulator's CPU burners). It returns nil
// when ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("gpu collector is already running")
	}
	defer c.running.Store(false)
	results := make(chan cycleResult, 1)
	inflight := false
	deadline := time.NewTimer(c.timeout)
	deadline.Stop()
	start := func() {
		if inflight {
			// The previous cycle is hung in the driver; starting another
			// would only pile up goroutines stuck on the same call.
			return
		}
		inflight = true
		go func() { results <- c.runCycle(ctx) }()
		deadline.Reset(c.timeout)
	}

	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	start()
	for {
		select {
		case <-ctx.Done():
			return c.stop(inflight, results)
		case <-ticker.C:
			start()
		case res := <-results:
			inflight = false
			deadline.Stop()
			c.publish(res)
			if res.fatal != nil {
				// The backend is not open: there is nothing to close.
				c.logger.Error("GPU collector stopping gpuscope so that it is started again", "err", res.fatal)
				return fmt.Errorf("gpu collector: %w", res.fatal)
			}
		case <-deadline.C:
			c.mu.Lock()
			c.timeouts++
			c.mu.Unlock()
			c.setUp(false, fmt.Errorf("sampling cycle still running after %s", c.timeout))
			// The sample being served is now over two intervals old (one
			// interval between cycles, plus the timeout): serve only each
			// GPU's XID series and when it last answered.
			if snap := c.snap.Load(); snap != nil {
				c.snap.Store(&snapshot{s: snap.s.stale()})
			}
		}
	}
}

func (c *Collector) stop(inflight bool, results <-chan cycleResult) error {
	if inflight {
		// A cycle gives up on hung GPU reads when ctx ends, so it returns
		// at once unless the hang is outside them (NVML init).
		grace := time.NewTimer(min(c.timeout, time.Second))
		defer grace.Stop()
		select {
		case <-results:
			inflight = false
		case <-grace.C:
		}
	}
	if inflight {
		// Shutting NVML down under a hung call could crash the process.
		c.logger.Warn("GPU sampling cycle still hung at shutdown; leaving the backend open")
		return nil
	}
	if c.opened {
		if err := c.backend.Close(); err != nil {
			c.logger.Warn("Closing GPU backend failed", "err", err)
		}
		c.opened = false
	}
	return nil
}

type cycleResult struct {
	s       *Sample
	openErr error
	// fatal ends Run: only a new process can read the GPUs again.
	fatal error
	dur   time.Duration
}

// maxBackoff bounds the wait between two attempts to open the backend.
const maxBackoff = 5 * time.Minute

// backoff is the wait before the next open after n consecutive failures:
// one interval, doubling up to maxBackoff.
func (c *Collector) backoff(n int) time.Duration {
	d := c.interval
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, max(maxBackoff, c.interval))
}

// fail records a failed open or an unreadable cycle and schedules the next
// open. Half an interval of slack keeps ticker jitter from skipping a tick.
func (c *Collector) fail(now time.Time) {
	c.failures++
	c.reopenAt = now.Add(c.backoff(c.failures) - c.interval/2)
}

func (c *Collector) runCycle(ctx context.Context) cycleResult {
	start := time.Now()
	now := c.now()
	if !c.opened {
		if c.openErr != nil && now.Before(c.reopenAt) {
			return cycleResult{openErr: c.openErr, dur: time.Since(start)}
		}
		if err := c.backend.Open(ctx); err != nil {
			c.openErr = err
			c.fail(now)
			res := cycleResult{openErr: err, dur: time.Since(start)}
			if errors.Is(err, ErrRestartNeeded) {
				c.restarts++
			} else {
				c.restarts = 0
			}
			if c.restarts >= restartVotes {
				res.fatal = err
			}
			return res
		}
		c.opened, c.openErr, c.restarts = true, nil, 0
	}
	// The cycle of the container attribution brackets the backend's:
	// pids and names are cached for as long as GPUs list them.
	c.env.grouper.beginCycle()
	s := c.backend.Sample(ctx, now)
	c.env.grouper.endCycle()
	switch {
	case s.reinit != nil:
		// The driver went away (unloaded, upgraded) or nothing answers:
		// shut NVML down and initialise it again, with backoff.
		c.logger.Warn("Re-initialising the GPU backend", "err", s.reinit)
		if err := c.backend.Close(); err != nil {
			c.logger.Warn("Closing GPU backend failed", "err", err)
		}
		c.opened = false
		c.openErr = fmt.Errorf("re-initialising after: %w", s.reinit)
		c.fail(now)
	case s.read > 0:
		c.failures = 0
	}
	return cycleResult{s: s, dur: time.Since(start)}
}

// collectOnce runs one cycle synchronously; tests and benchmarks use it in
// place of Run.
func (c *Collector) collectOnce(ctx context.Context) {
	c.publish(c.runCycle(ctx))
}

// SampleOnce runs one sampling cycle now and serves its sample, as Run
// does every interval, for callers that drive the clock themselves: the
// tests of a Backend made outside this package. It fails while Run runs.
// The backend it opens stays open for the next call, or until Run ends.
func (c *Collector) SampleOnce(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("gpu collector is already running")
	}
	defer c.running.Store(false)
	c.collectOnce(ctx)
	return nil
}

func (c *Collector) publish(res cycleResult) {
	c.mu.Lock()
	c.lastDur = res.dur.Seconds()
	if res.openErr == nil {
		c.cycles++
		c.lastOK = res.s.time
	}
	c.mu.Unlock()
	if res.openErr != nil {
		c.snap.Store(nil)
		c.setUp(false, res.openErr)
		return
	}
	c.recordErrors(res.s.errs)
	c.logDenied(res.s)
	c.snap.Store(&snapshot{s: res.s})
	if res.s.read == 0 {
		// A cycle that read no GPU is a collector that does not work,
		// whatever the reason; GPUCollectorDown must fire.
		c.setUp(false, noGPURead(res.s))
		return
	}
	c.setUp(true, nil)
}

// noGPURead is the reason of a cycle that read no GPU.
func noGPURead(s *Sample) error {
	switch {
	case s.reinit != nil:
		return fmt.Errorf("no GPU could be read: %w", s.reinit)
	case len(s.errs) > 0:
		return fmt.Errorf("no GPU could be read (GPU %q: %s): %w", s.errs[0].gpu, s.errs[0].field, s.errs[0].err)
	case len(s.gpus) == 0:
		return errors.New("the driver reports no GPUs")
	}
	return errors.New("no GPU could be read")
}

// setUp records whether the backend works and logs only changes, so that
// a machine without a driver says so once, not at every cycle.
func (c *Collector) setUp(up bool, reason error) {
	msg := ""
	if reason != nil {
		msg = reason.Error()
	}
	c.mu.Lock()
	changed := c.up != up || c.reason != msg
	c.up, c.reason = up, msg
	c.noGPUs = !up && c.auto && errors.Is(reason, errNoDriver)
	c.mu.Unlock()
	if !changed {
		return
	}
	switch {
	case up:
		c.logger.Info("GPU collector up", "backend", c.backend.Name())
	case errors.Is(reason, errNoDriver) && c.auto:
		c.logger.Info("No NVIDIA driver found; no GPUs to monitor", "backend", BackendAuto)
	case errors.Is(reason, errDisabled):
		c.logger.Info("GPU collection disabled", "backend", BackendNone)
	default:
		c.logger.Warn("GPU collector down", "backend", c.backend.Name(), "err", reason)
	}
}

// logDenied logs, once per field, what the driver does not let gpuscope's
// user read. Running as root, or with profiling open to all users
// (NVreg_RestrictProfilingToAdminUsers=0), gives it back.
func (c *Collector) logDenied(s *Sample) {
	var denied fieldSet
	for i := range s.gpus {
		denied |= s.gpus[i].denied
	}
	if denied&^c.denied == 0 {
		return
	}
	for f := Field(0); f < numFields; f++ {
		if denied.has(f) && !c.denied.has(f) {
			c.logger.Info("The driver does not let gpuscope's user read this field; it is reported unsupported",
				"field", fields[f].name, "uid", os.Getuid(), "hint", "run as root, or for DCGM_FI_PROF_* set the nvidia module option NVreg_RestrictProfilingToAdminUsers=0")
		}
	}
	c.denied |= denied
}

// recordErrors counts failed reads and logs each (GPU, field) when its
// error first appears or changes, and again when it goes away.
func (c *Collector) recordErrors(errs []fieldError) {
	if len(errs) == 0 && len(c.lastErrMsg) == 0 {
		return
	}
	seen := make(map[errKey]struct{}, len(errs))
	c.mu.Lock()
	for _, e := range errs {
		c.errCount[errKey{e.gpu, e.field}]++
	}
	c.mu.Unlock()
	for _, e := range errs {
		k := errKey{e.gpu, e.field}
		seen[k] = struct{}{}
		if msg := e.err.Error(); c.lastErrMsg[k] != msg {
			c.lastErrMsg[k] = msg
			c.logger.Warn("GPU read failed", "gpu", e.gpu, "field", e.field, "err", e.err)
		}
	}
	for k := range c.lastErrMsg {
		if _, ok := seen[k]; !ok {
			delete(c.lastErrMsg, k)
			c.logger.Info("GPU read works again", "gpu", k.gpu, "field", k.field)
		}
	}
}

// noneBackend is backend "none": no GPUs, gpuscope_gpu_collector_up 0.
type noneBackend struct{}

func (noneBackend) Name() string                              { return BackendNone }
func (noneBackend) Open(context.Context) error                { return errDisabled }
func (noneBackend) Sample(context.Context, time.Time) *Sample { return &Sample{} }
func (noneBackend) Close() error                              { return nil }

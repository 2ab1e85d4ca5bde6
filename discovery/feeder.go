// Package discovery feeds target groups to Prometheus's scrape manager and
// notifier: the groups of static_configs directly, and anything else
// through Prometheus's discovery manager, started the first time a config
// needs it.
//
// Why not always the discovery manager: an idle one is not idle. Its
// sender (prometheus v0.316.0 discovery/manager.go) waits on an
// exponential back-off that starts at 100 ms and is reset whenever nothing
// was sent for longer than the update interval (5 s), which at rest is
// every time: it wakes ten times a second, forever. Measured on the
// development machine, one such manager costs 0.24-0.26 % of a core and
// two (scrape and notify) were about two thirds of an idle appliance's CPU
// (BENCHMARKS.md, "Where idle time goes"). A default gpuscope's targets
// are all static (its built-in jobs, an agent's nodes listed in
// nodes.static, Alertmanagers in static_configs), so it needs none.
package discovery

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	promdiscovery "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

// Options configure a Feeder.
type Options struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	SDMetrics  *promdiscovery.SDMetrics
	// Name is the discovery manager's name ("scrape", "notify"), as in
	// its metrics' name label.
	Name string
}

// Feeder sends the target groups of each set (job, or Alertmanager
// config) on SyncCh, as promdiscovery.Manager does, whole every time.
type Feeder struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	out    chan map[string][]*targetgroup.Group

	mu        sync.Mutex
	discovery *promdiscovery.Manager // nil until a config needs it
	done      chan error             // the discovery manager's Run result
	wg        sync.WaitGroup         // the forwarder
}

// New creates a Feeder; its owner calls Stop, which ends a discovery
// manager that a config started.
func New(o Options) *Feeder {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Feeder{opts: o, ctx: ctx, cancel: cancel, out: make(chan map[string][]*targetgroup.Group, 1)}
}

// SyncCh is the channel the scrape manager or notifier reads.
func (f *Feeder) SyncCh() <-chan map[string][]*targetgroup.Group { return f.out }

// static returns the target groups of cfgs when every one of its
// configs is a static_configs, and false otherwise. A set with no config
// gets no groups, so that its old targets are dropped, as the discovery
// manager does.
func static(cfgs map[string]promdiscovery.Configs) (map[string][]*targetgroup.Group, bool) {
	groups := make(map[string][]*targetgroup.Group, len(cfgs))
	for name, cs := range cfgs {
		groups[name] = []*targetgroup.Group{}
		for _, c := range cs {
			static, ok := c.(promdiscovery.StaticConfig)
			if !ok {
				return nil, false
			}
			groups[name] = append(groups[name], static...)
		}
	}
	return groups, true
}

// ApplyConfig takes the sets' discovery configs. All static, and no
// discovery manager started before: their groups are sent at once.
// Otherwise they go to the discovery manager, started now if needed and
// kept from then on (its metrics are registered once per process).
func (f *Feeder) ApplyConfig(cfgs map[string]promdiscovery.Configs) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.discovery == nil {
		if groups, ok := static(cfgs); ok {
			f.send(groups)
			return nil
		}
		if err := f.startDiscovery(); err != nil {
			return err
		}
	}
	return f.discovery.ApplyConfig(cfgs)
}

// send replaces an update the reader has not taken yet: each update is
// whole, so only the newest counts.
func (f *Feeder) send(groups map[string][]*targetgroup.Group) {
	select {
	case <-f.out:
	default:
	}
	f.out <- groups
}

func (f *Feeder) startDiscovery() error {
	if f.ctx.Err() != nil {
		return errors.New("target feeder stopped")
	}
	dm := promdiscovery.NewManager(f.ctx, f.opts.Logger, f.opts.Registerer, f.opts.SDMetrics, promdiscovery.Name(f.opts.Name))
	if dm == nil {
		return errors.New("create " + f.opts.Name + " discovery manager")
	}
	f.opts.Logger.Info("Service discovery other than static_configs configured: starting the discovery manager")
	f.discovery, f.done = dm, make(chan error, 1)
	go func() { f.done <- dm.Run() }()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			select {
			case <-f.ctx.Done():
				return
			case groups, ok := <-dm.SyncCh():
				if !ok { // the manager has stopped
					return
				}
				f.mu.Lock()
				f.send(groups)
				f.mu.Unlock()
			}
		}
	}()
	return nil
}

// Stop stops the discovery manager if one was started, and waits for it.
func (f *Feeder) Stop() {
	f.cancel()
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	if done != nil {
		<-done
		f.wg.Wait()
	}
}

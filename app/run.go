package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// runner runs the components of `serve` and `agent` and stops them in
// reverse start order.
//
// Why not oklog/run, as Prometheus: its actors start together and wait
// on gates, and its interrupts run in the order actors were added. Here
// start order is the dependency order (the web server first, so that
// /-/healthy answers during a long WAL replay; the TSDB before anything
// that appends to it; the rule manager after the notifier it sends to),
// and stopping must undo it exactly: the rule manager's last evaluations
// go to the notifier, which drains before the scrape loops stop, whose
// last appends must commit before the TSDB closes, which must close
// before the web server stops answering /-/ready. One list, started
// forwards and stopped backwards, says that once.
type runner struct {
	mu     sync.Mutex
	stops  []stage
	failed chan error // a component that stopped on its own
}

type stage struct {
	name string
	stop func() error
}

func newRunner() *runner { return &runner{failed: make(chan error, 16)} }

// start runs fn in a goroutine with a context of its own, cancelled when
// the runner stops it. If fn returns before that, the runner's wait ends
// with its error.
func (r *runner) start(name string, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stopping atomic.Bool
	go func() {
		err := fn(ctx)
		if !stopping.Load() && err != nil {
			// wait returns it; stopping it later has nothing more to say.
			r.failed <- fmt.Errorf("%s: %w", name, err)
			err = nil
		}
		done <- err
	}()
	r.onStop(name, func() error {
		stopping.Store(true)
		cancel()
		return <-done
	})
}

// onStop registers what releases a resource acquired in start order (the
// TSDB, the remote-write queues): it runs in reverse order with the rest.
func (r *runner) onStop(name string, stop func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, stage{name, stop})
}

// stopAll stops everything started, last first.
func (r *runner) stopAll() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for i := len(r.stops) - 1; i >= 0; i-- {
		if err := r.stops[i].stop(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("stop %s: %w", r.stops[i].name, err))
		}
	}
	r.stops = nil
	return errors.Join(errs...)
}

// events are what ends or changes a running appliance besides its
// context: a reload or quit asked over HTTP. A nil channel never fires.
// Signals are the binary's: it cancels the context and calls Reload.
type events struct {
	reload <-chan chan error // POST /-/reload: answered with the result
	apply  func() error      // what a reload request runs
	quit   <-chan struct{}   // POST /-/quit
	ready  func(ready bool)  // /-/ready's state, false once stopping
	logger *slog.Logger
}

// wait blocks until ctx ends (SIGINT, SIGTERM, Stop), /-/quit, or a
// component fails; the error is the failed component's.
func (r *runner) wait(ctx context.Context, ev events) error {
	for {
		select {
		case <-ctx.Done():
			ev.logger.Info("Received shutdown signal, stopping")
			ev.ready(false)
			return nil
		case <-ev.quit:
			ev.logger.Info("Received /-/quit, stopping")
			ev.ready(false)
			return nil
		case err := <-r.failed:
			ev.ready(false)
			return err
		case rc := <-ev.reload:
			rc <- ev.apply()
		}
	}
}

package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunnerStopsInReverseOrder: components stop last first, each only
// once the one after it has returned (a component slow to stop holds up
// those started before it, never overtaken); release functions registered
// with onStop take their place in the order; a component's own
// context.Canceled is not an error, any other error on stop is, named.
func TestRunnerStopsInReverseOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			stopped []string
		)
		record := func(name string) {
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, name)
		}
		r := newRunner()
		component := func(name string, slow time.Duration, err error) {
			r.start(name, func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(slow) // a drain on stop: the fake clock's
				record(name)
				if err != nil {
					return err
				}
				return ctx.Err()
			})
		}
		component("web", 0, nil)
		r.onStop("tsdb", func() error { record("tsdb"); return nil })
		component("scrape", time.Minute, nil)
		component("notify", 10*time.Second, errors.New("queue not drained"))
		component("rules", 0, nil)

		start := time.Now()
		err := r.stopAll()
		require.EqualError(t, err, "stop notify: queue not drained")
		require.Equal(t, []string{"rules", "notify", "scrape", "tsdb", "web"}, stopped)
		require.Equal(t, 70*time.Second, time.Since(start), "each stop waited for the one after it, one at a time")
		require.NoError(t, r.stopAll(), "a second stop has nothing left to stop")
	})
}

// TestRunnerWait: wait ends on the context, on /-/quit, or with the error
// of a component that stopped by itself (named), and says the appliance
// is no longer ready each time; a reload asked meanwhile is answered
// with apply's result, and the wait goes on. A component that returns
// while being stopped is not a failure. The failure is reported once:
// stopping the failed component returns nothing more (it returned its
// error from stopAll too, so Run's error said it twice).
func TestRunnerWait(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	synctest.Test(t, func(t *testing.T) {
		var readiness []bool
		ready := func(b bool) { readiness = append(readiness, b) }

		// A component fails after a minute: wait returns its error.
		r := newRunner()
		r.start("web", func(ctx context.Context) error { <-ctx.Done(); return nil })
		r.start("gpu", func(ctx context.Context) error {
			select {
			case <-time.After(time.Minute):
				return errors.New("NVML gone")
			case <-ctx.Done():
				return nil
			}
		})
		reload := make(chan chan error)
		applied := 0
		go func() {
			time.Sleep(10 * time.Second)
			answer := make(chan error)
			reload <- answer
			require.EqualError(t, <-answer, "bad config")
		}()
		start := time.Now()
		err := r.wait(context.Background(), events{reload: reload, ready: ready, logger: logger,
			apply: func() error { applied++; return errors.New("bad config") }})
		require.EqualError(t, err, "gpu: NVML gone")
		require.Equal(t, time.Minute, time.Since(start))
		require.Equal(t, 1, applied, "the reload was answered and the wait went on")
		require.Equal(t, []bool{false}, readiness)
		require.NoError(t, r.stopAll(), "the failure is wait's to report, once")

		// The context ends: no error, and the components stopped then
		// are not failures.
		r = newRunner()
		r.start("scrape", func(ctx context.Context) error { <-ctx.Done(); return errors.New("stopped mid-scrape") })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.wait(ctx, events{ready: ready, logger: logger}))
		require.EqualError(t, r.stopAll(), "stop scrape: stopped mid-scrape", "its error on stop is reported by stopAll, not as a failure")
		select {
		case err := <-r.failed:
			t.Fatalf("a component stopped by the runner counted as failed: %v", err)
		default:
		}

		// /-/quit.
		r = newRunner()
		quit := make(chan struct{})
		go func() { time.Sleep(time.Second); close(quit) }()
		require.NoError(t, r.wait(context.Background(), events{quit: quit, ready: ready, logger: logger}))
		require.Equal(t, []bool{false, false, false}, readiness)
	})
}

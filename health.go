package main

import (
	"context"
	"sync"
	"time"

	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/web"
)

// healthRefresh is how old the overview page's Health block may be: the
// checks open NVML, probe the runtimes' sockets and walk the data
// directory, too much for every page load.
const healthRefresh = time.Minute

// healthTimeout bounds one run of the checks (each network check has its
// own, shorter, timeout).
const healthTimeout = 30 * time.Second

// healthBlock runs `gpuscope doctor`'s checks for the overview page in
// the background, at most once per healthRefresh, and serves the last
// result, so that a page load never waits on a socket or a node.
type healthBlock struct {
	run   func(ctx context.Context) []doctor.Check
	every time.Duration // healthRefresh

	mu      sync.Mutex
	checks  []web.HealthCheck
	at      time.Time
	running bool
	done    chan struct{} // closed when the running refresh ends
}

func newHealthBlock(run func(ctx context.Context) []doctor.Check) *healthBlock {
	return &healthBlock{run: run, every: healthRefresh}
}

// Checks returns the last checks and starts a refresh when they are
// stale. Before the first run has ended it says the checks are running.
func (h *healthBlock) Checks(context.Context) []web.HealthCheck {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.running && time.Since(h.at) > h.every {
		h.running = true
		h.done = make(chan struct{})
		go h.refresh(h.done)
	}
	if h.checks == nil {
		return []web.HealthCheck{{Name: "doctor", Status: doctor.StatusWarn,
			Summary: "the checks of gpuscope doctor are running (the first time after start)",
			Hint:    "reload the page in a few seconds, or run gpuscope doctor on the host"}}
	}
	return h.checks
}

func (h *healthBlock) refresh(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	var checks []web.HealthCheck
	for _, c := range h.run(ctx) {
		checks = append(checks, web.HealthCheck(c))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks, h.at, h.running = checks, time.Now(), false
}

// wait blocks until a running refresh has ended, so that none outlives
// the appliance (the checks hold NVML open while they run).
func (h *healthBlock) wait() {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

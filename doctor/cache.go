package doctor

import (
	"context"
	"slices"
	"sync"
	"time"
)

// DefaultCacheRefresh is how old the overview page's Health block may be:
// the checks open NVML, probe the runtimes' sockets and walk the data
// directory, too much for every page load.
const DefaultCacheRefresh = time.Minute

// pendingRefresh is how old checks may be while one of them is Pending:
// right after a start, the page would otherwise say "first scrape
// pending" for a minute after the first scrapes landed.
const pendingRefresh = 5 * time.Second

// cacheTimeout bounds one run of the checks (each network check has its
// own, shorter, timeout).
const cacheTimeout = 30 * time.Second

// Cache runs the checks for the overview page in the background, at most
// once per refresh period, and serves the last result, so that a page
// load never waits on a socket or a node.
type Cache struct {
	run     func(ctx context.Context) []Check
	every   time.Duration
	pending time.Duration // the refresh period while a check is Pending

	mu      sync.Mutex
	checks  []Check
	at      time.Time
	running bool
	done    chan struct{} // closed when the running refresh ends
}

// NewCache serves what run returns, refreshed at most every refresh (0:
// DefaultCacheRefresh). It starts nothing: the first Checks does.
func NewCache(run func(ctx context.Context) []Check, refresh time.Duration) *Cache {
	if refresh <= 0 {
		refresh = DefaultCacheRefresh
	}
	return &Cache{run: run, every: refresh, pending: min(pendingRefresh, refresh)}
}

// Checks returns the last checks and starts a refresh when they are
// stale. Before the first run has ended it says the checks are running.
func (c *Cache) Checks(context.Context) []Check {
	c.mu.Lock()
	defer c.mu.Unlock()
	every := c.every
	if slices.ContainsFunc(c.checks, func(c Check) bool { return c.Pending }) {
		every = c.pending
	}
	if !c.running && time.Since(c.at) > every {
		c.running = true
		c.done = make(chan struct{})
		go c.refresh(c.done)
	}
	if c.checks == nil {
		return []Check{{Name: "doctor", Status: StatusWarn,
			Summary: "the checks of gpuscope doctor are running (the first time after start)",
			Hint:    "reload the page in a few seconds, or run gpuscope doctor on the host"}}
	}
	return c.checks
}

func (c *Cache) refresh(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), cacheTimeout)
	defer cancel()
	checks := c.run(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks, c.at, c.running = checks, time.Now(), false
}

// Wait blocks until a running refresh has ended, so that none outlives
// the appliance (the checks hold NVML open while they run).
func (c *Cache) Wait() {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

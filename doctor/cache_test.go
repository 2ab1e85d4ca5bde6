package doctor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCache: the page's Health block says the checks are running until
// their first run ends, then serves the last run, starting a new one in
// the background only when it is stale; a page load never waits for the
// checks.
func TestCache(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	c := NewCache(func(context.Context) []Check {
		<-release
		runs.Add(1)
		return []Check{{Name: "nvml", Status: StatusWarn, Summary: "no NVIDIA driver found, GPU metrics off", Hint: "install it"}}
	}, 0)
	first := c.Checks(context.Background())
	require.Len(t, first, 1)
	require.Equal(t, "doctor", first[0].Name, "while the first run is blocked: %+v", first)
	require.Equal(t, StatusWarn, first[0].Status)
	require.Equal(t, first, c.Checks(context.Background()), "a second load starts no second run")
	close(release)
	c.Wait()
	got := c.Checks(context.Background())
	require.Equal(t, []Check{{Name: "nvml", Status: StatusWarn, Summary: "no NVIDIA driver found, GPU metrics off", Hint: "install it"}}, got)
	require.Equal(t, int32(1), runs.Load(), "fresh: not run again")

	c.every = 0 // stale at once
	c.Checks(context.Background())
	c.Wait()
	require.Equal(t, int32(2), runs.Load(), "stale: run again in the background")
}

// TestCachePending: checks that wait on a first scrape are asked again
// within seconds, not served for the whole refresh period.
func TestCachePending(t *testing.T) {
	var runs atomic.Int32
	c := NewCache(func(context.Context) []Check {
		n := runs.Add(1)
		return []Check{{Name: "scrape/gpu", Status: StatusOK, Summary: "1 target, first scrape pending", Pending: n == 1}}
	}, time.Hour)
	c.pending = 10 * time.Millisecond
	c.Checks(context.Background())
	c.Wait()
	require.True(t, c.Checks(context.Background())[0].Pending, "the first answer is pending")
	c.Wait()
	time.Sleep(20 * time.Millisecond)
	c.Checks(context.Background())
	c.Wait()
	require.Equal(t, int32(2), runs.Load(), "pending: asked again after the short period")
	require.False(t, c.Checks(context.Background())[0].Pending)
	time.Sleep(20 * time.Millisecond)
	c.Checks(context.Background())
	c.Wait()
	require.Equal(t, int32(2), runs.Load(), "settled: served for the refresh period (an hour)")
}

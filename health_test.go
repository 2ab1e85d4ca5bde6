package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/web"
)

// TestHealthBlock: the page's Health block says the checks are running
// until their first run ends, then serves the last run, starting a new
// one in the background only when it is stale; a page load never waits
// for the checks.
func TestHealthBlock(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	h := newHealthBlock(func(context.Context) []doctor.Check {
		<-release
		runs.Add(1)
		return []doctor.Check{{Name: "nvml", Status: doctor.StatusWarn, Summary: "no NVIDIA driver found, GPU metrics off", Hint: "install it"}}
	})
	first := h.Checks(context.Background())
	require.Len(t, first, 1)
	require.Equal(t, "doctor", first[0].Name, "while the first run is blocked: %+v", first)
	require.Equal(t, doctor.StatusWarn, first[0].Status)
	require.Equal(t, first, h.Checks(context.Background()), "a second load starts no second run")
	close(release)
	h.wait()
	got := h.Checks(context.Background())
	require.Equal(t, []web.HealthCheck{{Name: "nvml", Status: doctor.StatusWarn, Summary: "no NVIDIA driver found, GPU metrics off", Hint: "install it"}}, got)
	require.Equal(t, int32(1), runs.Load(), "fresh: not run again")

	h.every = 0 // stale at once
	h.Checks(context.Background())
	h.wait()
	require.Equal(t, int32(2), runs.Load(), "stale: run again in the background")
}

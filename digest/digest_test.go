package digest

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/notifier"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/accounting"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeReporter struct {
	mu      sync.Mutex
	queries []accounting.Query
	runs    []accounting.Run
}

func (f *fakeReporter) Report(_ context.Context, q accounting.Query) (accounting.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	return accounting.Report{Runs: f.runs}, nil
}

type fakeSender struct {
	mu     sync.Mutex
	alerts []*notifier.Alert
}

func (f *fakeSender) Send(alerts ...*notifier.Alert) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alerts = append(f.alerts, alerts...)
}

func (f *fakeSender) sent() []*notifier.Alert {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*notifier.Alert(nil), f.alerts...)
}

func ptr(v float64) *float64 { return &v }

// TestSend: one alert per user with their sums, the runs of an unknown
// user in the admin summary only, over the configured period up to the
// send time.
func TestSend(t *testing.T) {
	rep := &fakeReporter{runs: []accounting.Run{
		{User: "alice", GPUHours: 3, IdleGPUHours: 1, SMShareAvg: 0.5, GPUMemoryMaxBytes: 2 << 30, EnergyKWh: ptr(0.9), Cost: ptr(7.77), Currency: "EUR"},
		{User: "alice", GPUHours: 1, SMShareAvg: 0.1, GPUMemoryMaxBytes: 1 << 30, EnergyKWh: ptr(0.3), Cost: ptr(1.23), Currency: "EUR"},
		{User: "bob", GPUHours: 2, SMShareAvg: 0.9, EnergyKWh: ptr(0.6), Cost: ptr(5), Currency: "EUR"},
		{GPUHours: 0.5},
		{User: "carol", GPUHours: 0.00412},
	}}
	snd := &fakeSender{}
	ext, _ := url.Parse("http://gpu-01:9089/")
	d, err := New(Options{Reporter: rep, Sender: snd, ExternalURL: ext})
	require.NoError(t, err)
	require.NoError(t, d.ApplyConfig(Config{Schedule: "Mon 08:00", AdminSummary: true}))
	end := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	sent, err := d.Send(context.Background(), end)
	require.NoError(t, err)
	require.Equal(t, Sent{Start: end.Add(-7 * 24 * time.Hour), End: end, Users: []string{"alice", "bob", "carol"}, Admin: true}, sent)
	require.Equal(t, []accounting.Query{{Start: end.Add(-7 * 24 * time.Hour), End: end}}, rep.queries)

	alerts := snd.sent()
	require.Len(t, alerts, 4)
	require.Equal(t, "0.00412", alerts[2].Annotations.Get("gpu_hours"), "a short job's GPU-hours are not 0.00")
	alice := alerts[0]
	require.Equal(t, `{alertname="GPUUsageDigest", digest="user", period="2026-11-23T08:00:00Z/2026-11-30T08:00:00Z", severity="info", user="alice"}`, alice.Labels.String())
	require.Equal(t, "4.00", alice.Annotations.Get("gpu_hours"))
	require.Equal(t, "1.00", alice.Annotations.Get("idle_gpu_hours"))
	require.Equal(t, "40", alice.Annotations.Get("sm_share_avg_percent"), "(0.5×3 + 0.1×1) / 4")
	require.Equal(t, "2.0 GiB", alice.Annotations.Get("gpu_memory_peak"))
	require.Equal(t, "1.20", alice.Annotations.Get("energy_kwh"))
	require.Equal(t, "9.00", alice.Annotations.Get("cost"))
	require.Equal(t, "GPU use of alice from 2026-11-23 to 2026-11-30: 4.00 GPU-hours", alice.Annotations.Get("summary"))
	require.Contains(t, alice.Annotations.Get("description"), "Idle GPU-hours (held at under 5% SM share): 1.00\n")
	require.Equal(t, end, alice.StartsAt)
	require.Equal(t, end.Add(time.Hour), alice.EndsAt)
	require.Equal(t, fmt.Sprintf("http://gpu-01:9089/api/v1/workloads?by=user&end=%d&start=%d", end.Unix(), end.Add(-7*24*time.Hour).Unix()), alice.GeneratorURL)

	admin := alerts[3]
	require.Equal(t, "admin", admin.Labels.Get("digest"))
	require.Empty(t, admin.Labels.Get("user"))
	require.Equal(t, "6.50", admin.Annotations.Get("gpu_hours"), "every run, the unknown user's too")
	require.Equal(t, "5", admin.Annotations.Get("runs"))
	require.Equal(t, "3", admin.Annotations.Get("users"))
	require.Regexp(t, `(?m)^USER\s+RUNS\s+GPU-H`, admin.Annotations.Get("description"))
	require.Regexp(t, `(?m)^\(unknown\)\s+1\s+0\.50`, admin.Annotations.Get("description"))
}

// TestSchedule: the next due time by the calendar, across a daylight
// saving change, and what a bad schedule gets.
func TestSchedule(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, tc := range []struct {
		schedule string
		now      time.Time
		want     time.Time
	}{
		{"Mon 08:00", time.Date(2026, 12, 2, 19, 30, 0, 0, time.UTC), time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)},
		{"monday 08:00", time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), time.Date(2026, 12, 14, 8, 0, 0, 0, time.UTC)},
		{"Mon 08:00", time.Date(2026, 12, 7, 7, 59, 0, 0, time.UTC), time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)},
		{"08:00", time.Date(2026, 12, 2, 19, 30, 0, 0, time.UTC), time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)},
		// Clocks go forward on 29 March 2026 in Paris: still 08:00.
		{"Mon 08:00", time.Date(2026, 3, 27, 12, 0, 0, 0, paris), time.Date(2026, 3, 30, 8, 0, 0, 0, paris)},
	} {
		s, err := parseSchedule(tc.schedule)
		require.NoError(t, err)
		got := s.next(tc.now)
		require.True(t, tc.want.Equal(got), "%s after %s: %s, want %s", tc.schedule, tc.now, got, tc.want)
	}
	for _, bad := range []string{"", "Mon", "Mo 08:00", "Mon 8am", "Mon 25:00", "Mon Tue 08:00", "Monk 08:00"} {
		require.EqualError(t, Config{Schedule: bad}.Validate(),
			`digests.schedule: "`+bad+`" is not a day and time or a time ("Mon 08:00" weekly, "08:00" daily)`, bad)
	}
	require.ErrorContains(t, Config{Schedule: "08:00", Period: model.Duration(-time.Hour)}.Validate(), "is negative (e.g. 7d)")
	require.Equal(t, 24*time.Hour, Config{Schedule: "08:00"}.period())
	require.Equal(t, 7*24*time.Hour, Config{Schedule: "Fri 17:00"}.period())
}

// TestRunSendsWhenDue: Run sends the digests once the clock reaches the
// due time, for the period ending then, and not again until the next;
// disabled, it sends nothing.
func TestRunSendsWhenDue(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 7, 59, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	rep := &fakeReporter{runs: []accounting.Run{{User: "alice", GPUHours: 1}}}
	snd := &fakeSender{}
	d, err := New(Options{Reporter: rep, Sender: snd, Now: clock, Poll: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, d.ApplyConfig(Config{Enabled: true, Schedule: "Mon 08:00"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, snd.sent(), "not before 08:00")
	advance(2 * time.Minute)
	require.Eventually(t, func() bool { return len(snd.sent()) == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	require.Len(t, snd.sent(), 1, "once")
	rep.mu.Lock()
	require.Equal(t, time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), rep.queries[0].End, "the period ends at the due time")
	rep.mu.Unlock()

	require.NoError(t, d.ApplyConfig(Config{Enabled: false, Schedule: "Mon 08:00"}))
	advance(7 * 24 * time.Hour)
	time.Sleep(50 * time.Millisecond)
	require.Len(t, snd.sent(), 1, "disabled")
	cancel()
	require.NoError(t, <-done)
}

// TestRunFollowsAReloadedSchedule: a reload that changes the schedule
// moves the next digest to the new time; the old one sends nothing.
func TestRunFollowsAReloadedSchedule(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC) // a Monday
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	rep := &fakeReporter{runs: []accounting.Run{{User: "alice", GPUHours: 1}}}
	snd := &fakeSender{}
	d, err := New(Options{Reporter: rep, Sender: snd, Now: clock, Poll: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, d.ApplyConfig(Config{Enabled: true, Schedule: "Mon 08:00"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)

	require.NoError(t, d.ApplyConfig(Config{Enabled: true, Schedule: "Mon 09:00"}))
	time.Sleep(50 * time.Millisecond)
	advance(90 * time.Minute) // 08:30: the old time has passed
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, snd.sent(), "not at the schedule the reload replaced")
	advance(time.Hour) // 09:30
	require.Eventually(t, func() bool { return len(snd.sent()) == 1 }, 5*time.Second, time.Millisecond)
	rep.mu.Lock()
	require.Equal(t, time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC), rep.queries[0].End, "the period ends at the new due time")
	rep.mu.Unlock()
	cancel()
	require.NoError(t, <-done)
}

package accounting

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeriod: since and month, and what each bad one gets.
func TestPeriod(t *testing.T) {
	now := time.Date(2026, 12, 2, 19, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, since, month string
		start, end         time.Time
		err                string
	}{
		{name: "default a week", start: now.Add(-7 * 24 * time.Hour), end: now},
		{name: "since", since: "24h", start: now.Add(-24 * time.Hour), end: now},
		{name: "a past month", month: "2026-11", start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), end: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{name: "this month ends now", month: "2026-12", start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), end: now},
		{name: "both", since: "7d", month: "2026-11", err: "since 7d and month 2026-11 both say what to report: give one"},
		{name: "month unparsable", month: "November", err: `month "November" is not a year and month (e.g. 2026-11)`},
		{name: "month to come", month: "2027-01", err: "month 2027-01 has not begun"},
		{name: "since not a duration", since: "a week", err: `since "a week" is not a positive duration (e.g. 30m, 24h, 7d)`},
		{name: "since negative", since: "-1h", err: `since "-1h" is not a positive duration (e.g. 30m, 24h, 7d)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, end, err := Period(tc.since, tc.month, now)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.start, start)
			require.Equal(t, tc.end, end)
		})
	}
}

// TestUnixTimeAtTheMillisecond: a run's start and end, read from PromQL as
// float seconds, are the stored milliseconds, without the float's noise
// (the newcomer trial's "03:36:03.818000078Z").
func TestUnixTimeAtTheMillisecond(t *testing.T) {
	for v, want := range map[float64]string{
		1796614563.818: "2026-12-07T03:36:03.818Z",
		1796614563:     "2026-12-07T03:36:03Z",
		1796614563.999: "2026-12-07T03:36:03.999Z",
		0.001:          "1970-01-01T00:00:00.001Z",
	} {
		require.Equal(t, want, unixTime(v).Format(time.RFC3339Nano), "%f", v)
	}
}

package accounting

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// DefaultSince is how far back a report looks when asked nothing else.
const DefaultSince = 7 * 24 * time.Hour

// Period is the range of a report asked by since (a Prometheus duration
// back from now, default DefaultSince) or month (YYYY-MM, a calendar month
// in UTC, to now if it is this one), which exclude each other: what
// `gpuscope workloads --since/--month` and /api/v1/workloads?since=&month=
// take.
func Period(since, month string, now time.Time) (start, end time.Time, err error) {
	if month != "" {
		if since != "" {
			return start, end, fmt.Errorf("since %s and month %s both say what to report: give one", since, month)
		}
		start, err = time.Parse("2006-01", month)
		if err != nil {
			return start, end, fmt.Errorf("month %q is not a year and month (e.g. 2026-11)", month)
		}
		if start.After(now) {
			return start, end, fmt.Errorf("month %s has not begun", month)
		}
		end = start.AddDate(0, 1, 0)
		if end.After(now) {
			end = now
		}
		return start, end, nil
	}
	if since == "" {
		return now.Add(-DefaultSince), now, nil
	}
	d, err := model.ParseDuration(since)
	if err != nil || d <= 0 {
		return start, end, fmt.Errorf("since %q is not a positive duration (e.g. 30m, 24h, 7d)", since)
	}
	return now.Add(-time.Duration(d)), now, nil
}

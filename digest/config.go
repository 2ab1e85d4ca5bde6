package digest

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Config is the `digests:` section of the gpuscope config file.
type Config struct {
	// Enabled sends the digests on Schedule. Off by default: they go to
	// whoever the alertmanager: routes send GPUUsageDigest to.
	Enabled bool `yaml:"enabled"`
	// Schedule is when: "Mon 08:00" weekly on that day, "08:00" daily,
	// in the server's local time zone (TZ), 24-hour clock.
	Schedule string `yaml:"schedule"`
	// Period is what a digest covers, up to its send time. 0: a week for
	// a weekly schedule, a day for a daily one.
	Period model.Duration `yaml:"period"`
	// AdminSummary sends, beside each user's digest, one with every
	// user's figures (digest="admin").
	AdminSummary bool `yaml:"admin_summary"`
}

// DefaultConfig is the section's default: off, weekly on Monday at
// 08:00, with the admin summary.
func DefaultConfig() Config {
	return Config{Schedule: "Mon 08:00", AdminSummary: true}
}

// Validate checks the schedule and the period.
func (c Config) Validate() error {
	if _, err := parseSchedule(c.Schedule); err != nil {
		return err
	}
	if c.Period < 0 {
		return fmt.Errorf("digests.period: %s is negative (e.g. 7d)", c.Period)
	}
	return nil
}

// period is what a digest of c covers.
func (c Config) period() time.Duration {
	if c.Period > 0 {
		return time.Duration(c.Period)
	}
	if s, err := parseSchedule(c.Schedule); err == nil && !s.weekly {
		return 24 * time.Hour
	}
	return 7 * 24 * time.Hour
}

// schedule is a parsed Schedule.
type schedule struct {
	weekly       bool
	weekday      time.Weekday
	hour, minute int
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

func parseSchedule(v string) (schedule, error) {
	bad := func() (schedule, error) {
		return schedule{}, fmt.Errorf(`digests.schedule: %q is not a day and time or a time ("Mon 08:00" weekly, "08:00" daily)`, v)
	}
	var s schedule
	fields := strings.Fields(v)
	switch len(fields) {
	case 1:
	case 2:
		d, ok := weekdays[strings.ToLower(fields[0])[:min(3, len(fields[0]))]]
		if !ok || (len(fields[0]) > 3 && !strings.HasPrefix(strings.ToLower(d.String()), strings.ToLower(fields[0]))) {
			return bad()
		}
		s.weekly, s.weekday = true, d
	default:
		return bad()
	}
	t, err := time.Parse("15:04", fields[len(fields)-1])
	if err != nil {
		return bad()
	}
	s.hour, s.minute = t.Hour(), t.Minute()
	return s, nil
}

// next is the first time of s after now, in now's location, read from
// the calendar (so a day with a daylight-saving change is still 08:00).
func (s schedule) next(now time.Time) time.Time {
	y, m, d := now.Date()
	t := time.Date(y, m, d, s.hour, s.minute, 0, 0, now.Location())
	for !t.After(now) || (s.weekly && t.Weekday() != s.weekday) {
		y, m, d = t.Date()
		t = time.Date(y, m, d+1, s.hour, s.minute, 0, 0, now.Location())
	}
	return t
}

// Package digest sends the scheduled usage digests: the run report of
// the period grouped by user (the accounting package's), as one alert per
// user and one summary for the admin, through the notifier to the
// Alertmanagers, so that the routes and receivers already configured (and
// the users: section's owner_email, owner_chat and owner_receiver) deliver
// them.
package digest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/notifier"

	"github.com/gpuscope/gpuscope/accounting"
)

// AlertName is the alertname of every digest.
const AlertName = "GPUUsageDigest"

// Kinds of digest, the digest label.
const (
	KindUser  = "user"
	KindAdmin = "admin"
)

// lifetime is how long a digest alert is active: long enough for any
// group_wait and a retry of its notification, short of a repeat_interval
// (4h by default), so it is sent once.
const lifetime = time.Hour

// Reporter computes the run report; *accounting.Reporter is one.
type Reporter interface {
	Report(ctx context.Context, q accounting.Query) (accounting.Report, error)
}

// Sender queues alerts for the Alertmanagers; *notifier.Manager is one.
type Sender interface {
	Send(alerts ...*notifier.Alert)
}

// Options configure a Digest.
type Options struct {
	Reporter Reporter
	Sender   Sender
	// ExternalURL is gpuscope's address as users reach it, for each
	// digest's link to its report. Nil: no link.
	ExternalURL *url.URL
	Logger      *slog.Logger
	// Now is the wall clock (nil: time.Now); tests replace it.
	Now func() time.Time
	// Poll is how often Run looks at the clock (0: a minute): the next
	// digest is due at a time of the calendar, which a sleeping machine
	// or a changed clock moves against a timer.
	Poll time.Duration
}

// Digest sends the digests on the configured schedule, and on request.
type Digest struct {
	o    Options
	mu   sync.Mutex
	cfg  Config
	wake chan struct{}
}

// New checks the options; Run starts the schedule.
func New(o Options) (*Digest, error) {
	if o.Reporter == nil || o.Sender == nil {
		return nil, errors.New("digest: a reporter and a sender are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Poll == 0 {
		o.Poll = time.Minute
	}
	return &Digest{o: o, cfg: DefaultConfig(), wake: make(chan struct{}, 1)}, nil
}

// ApplyConfig takes a new digests: section; the old one stays if it is
// not valid.
func (d *Digest) ApplyConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	d.cfg = c
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

func (d *Digest) config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Run sends each digest when it is due, until ctx ends. The due time is
// computed from the wall clock at each look, not from the start of the
// process: a restart does not move it (a digest due while gpuscope was
// down is not sent late).
func (d *Digest) Run(ctx context.Context) error {
	var due time.Time // the next due time, zero while disabled
	for {
		cfg := d.config()
		now := d.o.Now()
		switch {
		case !cfg.Enabled:
			due = time.Time{}
		case due.IsZero():
			s, _ := parseSchedule(cfg.Schedule) // validated by ApplyConfig
			due = s.next(now)
			d.o.Logger.Debug("Next usage digest", "at", due)
		case !now.Before(due):
			if _, err := d.Send(ctx, due); err != nil && ctx.Err() == nil {
				d.o.Logger.Error("Cannot send the usage digests", "due", due, "err", err)
			}
			due = time.Time{}
			continue
		}
		t := time.NewTimer(d.o.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-d.wake:
			due = time.Time{} // a new schedule
		case <-t.C:
		}
		t.Stop()
	}
}

// Sent is what Send sent: the period and one line per digest.
type Sent struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Users are the users who got a digest; Admin is whether the summary
	// was sent.
	Users []string `json:"users"`
	Admin bool     `json:"admin"`
}

// Send sends the digests of the period that ends at end (zero: now): the
// report grouped by user, an alert per user who held a GPU or ran a
// workload in it, and the admin summary if configured. Runs whose user is
// not known are in the summary only.
func (d *Digest) Send(ctx context.Context, end time.Time) (Sent, error) {
	cfg := d.config()
	if end.IsZero() {
		end = d.o.Now()
	}
	end = end.Truncate(time.Second)
	start := end.Add(-cfg.period())
	rep, err := d.o.Reporter.Report(ctx, accounting.Query{Start: start, End: end})
	if err != nil {
		return Sent{}, fmt.Errorf("report %s to %s: %w", start.Format(time.RFC3339), end.Format(time.RFC3339), err)
	}
	groups := accounting.GroupRuns(rep.Runs, []string{"user"})
	sent := Sent{Start: start, End: end}
	var alerts []*notifier.Alert
	for _, g := range groups {
		if u := g.Key["user"]; u != "" {
			alerts = append(alerts, d.alert(KindUser, u, start, end, userAnnotations(g, start, end)))
			sent.Users = append(sent.Users, u)
		}
	}
	if cfg.AdminSummary {
		a, err := adminAnnotations(groups, start, end)
		if err != nil {
			return Sent{}, err
		}
		alerts = append(alerts, d.alert(KindAdmin, "", start, end, a))
		sent.Admin = true
	}
	if len(alerts) > 0 {
		d.o.Sender.Send(alerts...)
	}
	d.o.Logger.Info("Sent the usage digests", "start", start, "end", end, "users", len(sent.Users), "admin", sent.Admin)
	return sent, nil
}

func (d *Digest) alert(kind, user string, start, end time.Time, annotations map[string]string) *notifier.Alert {
	ls := map[string]string{
		"alertname": AlertName,
		"digest":    kind,
		"severity":  "info",
		// Each period's digest is an alert of its own: one sent again
		// for the same period (on request) is the same alert.
		"period": period(start, end),
	}
	if user != "" {
		ls["user"] = user
	}
	a := &notifier.Alert{
		Labels:      labels.FromMap(ls),
		Annotations: labels.FromMap(annotations),
		StartsAt:    end,
		EndsAt:      end.Add(lifetime),
	}
	if d.o.ExternalURL != nil {
		u := d.o.ExternalURL.JoinPath("api/v1/workloads")
		q := url.Values{"by": {"user"}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)}}
		u.RawQuery = q.Encode()
		a.GeneratorURL = u.String()
	}
	return a
}

// period is the label value of a digest's period: its start and end,
// RFC 3339 in UTC, as an ISO 8601 interval.
func period(start, end time.Time) string {
	return start.UTC().Format(time.RFC3339) + "/" + end.UTC().Format(time.RFC3339)
}

// figures are a group's figures as the digest's annotations carry them:
// plain numbers in the API's units (see decimal; the SM share as a
// percentage), "" where unknown.
func figures(g accounting.Group) map[string]string {
	f := map[string]string{
		"runs":                  strconv.Itoa(g.Runs),
		"gpu_hours":             decimal(g.GPUHours),
		"idle_gpu_hours":        decimal(g.IdleGPUHours),
		"sm_share_avg_percent":  strconv.FormatFloat(100*g.SMShareAvg, 'f', 0, 64),
		"gpu_memory_peak_bytes": strconv.FormatFloat(g.GPUMemoryMaxBytes, 'f', 0, 64),
		"gpu_memory_peak":       accounting.HumanBytes(g.GPUMemoryMaxBytes),
	}
	if g.EnergyKWh != nil {
		f["energy_kwh"] = decimal(*g.EnergyKWh)
	}
	if g.Cost != nil {
		f["cost"] = strconv.FormatFloat(*g.Cost, 'f', 2, 64)
		f["currency"] = g.Currency
	}
	return f
}

func userAnnotations(g accounting.Group, start, end time.Time) map[string]string {
	a := figures(g)
	a["period_start"], a["period_end"] = start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)
	a["summary"] = fmt.Sprintf("GPU use of %s from %s to %s: %s GPU-hours", g.Key["user"], day(start), day(end), a["gpu_hours"])
	a["description"] = fmt.Sprintf(`Your GPU use from %s to %s (UTC), as gpuscope's run report has it:
Runs: %s
GPU-hours: %s
Idle GPU-hours (held at under 5%% SM share): %s
Mean SM share while held: %s%%
Peak GPU memory: %s
Energy: %s
Cost: %s`, start.UTC().Format("2006-01-02 15:04"), end.UTC().Format("2006-01-02 15:04"),
		a["runs"], a["gpu_hours"], a["idle_gpu_hours"], a["sm_share_avg_percent"], a["gpu_memory_peak"],
		orUnknown(a["energy_kwh"], " kWh"), orUnknown(a["cost"], " "+a["currency"]))
	return a
}

func adminAnnotations(groups []accounting.Group, start, end time.Time) (map[string]string, error) {
	var total accounting.Group
	users, runs := 0, 0
	for _, g := range groups {
		if g.Key["user"] != "" {
			users++
		}
		runs += g.Runs
	}
	for _, g := range accounting.GroupRuns(runsOf(groups), nil) {
		total = g
	}
	total.Runs = runs
	a := figures(total)
	a["users"] = strconv.Itoa(users)
	a["period_start"], a["period_end"] = start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)
	a["summary"] = fmt.Sprintf("GPU use by user from %s to %s: %d users, %s GPU-hours, %s idle", day(start), day(end), users, a["gpu_hours"], a["idle_gpu_hours"])
	var b bytes.Buffer
	if err := accounting.WriteGroupTable(&b, []string{"user"}, groups); err != nil {
		return nil, fmt.Errorf("render the admin digest: %w", err)
	}
	// The table is the description, as every template shows it: fixed
	// width in the email, plain text in chat.
	a["description"] = b.String()
	return a, nil
}

// runsOf turns groups back into one run each carrying their sums, for a
// grand total by GroupRuns (each group's SM share weighted by its
// GPU-hours, as for runs).
func runsOf(groups []accounting.Group) []accounting.Run {
	out := make([]accounting.Run, 0, len(groups))
	for _, g := range groups {
		out = append(out, accounting.Run{
			GPUHours: g.GPUHours, IdleGPUHours: g.IdleGPUHours, SMShareAvg: g.SMShareAvg,
			GPUMemoryMaxBytes: g.GPUMemoryMaxBytes, EnergyKWh: g.EnergyKWh, Cost: g.Cost, Currency: g.Currency,
			CO2Grams: g.CO2Grams, CPUCoreSeconds: g.CPUCoreSeconds,
		})
	}
	return out
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

func orUnknown(v, unit string) string {
	if v == "" {
		return "unknown"
	}
	return v + unit
}

// decimal is v to two decimals, or to three significant digits below
// 0.1, so that a short job's 0.004 GPU-hours do not read as none.
func decimal(v float64) string {
	if v == 0 || math.Abs(v) >= 0.1 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', min(2-int(math.Floor(math.Log10(math.Abs(v)))), 12), 64)
}

package web

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/gpuscope/gpuscope/alertmanager"
	"github.com/gpuscope/gpuscope/doctor"
)

// The overview's Notifications block: where alerts go (each receiver's
// last attempt and its result), the active silences, and the alerts the
// embedded Alertmanager does not send now and why. Read-only: changes go
// through amtool or the API. NewNotifications makes it from the embedded
// Alertmanager's status (OverviewOptions.Notifications).

// Notifications is what the block shows, as of one moment.
type Notifications struct {
	// Nobody says why alerts reach nobody; "" when they reach someone.
	Nobody string
	// Fix says how to make them reach someone.
	Fix string
	// External names the Alertmanagers of alerting.alertmanagers, which
	// get every alert too; "" for none.
	External string
	// Err is why the rest is missing (the Alertmanager is not running).
	Err        string
	Deliveries []Delivery
	Silences   []Silence
	Alerts     []NotifiedAlert
}

// Delivery is one integration of a receiver and its attempts since start.
type Delivery struct {
	Receiver    string
	Integration string // webhook[0], email[1], ...
	// LastAttempt is zero when it was never tried.
	LastAttempt, LastSuccess time.Time
	// LastError is the last attempt's error; "" when it succeeded.
	LastError          string
	Attempts, Failures int
}

// Silence is an active or pending silence.
type Silence struct {
	ID, CreatedBy, Comment, Matchers string
	StartsAt, EndsAt                 time.Time
}

// NotifiedAlert is an alert the embedded Alertmanager holds.
type NotifiedAlert struct {
	Labels map[string]string
	// SilencedBy are silence IDs; InhibitedBy the inhibiting alerts,
	// named; MutedBy the time intervals muting it now.
	SilencedBy, InhibitedBy, MutedBy []string
}

// NewNotifications is the block for the embedded Alertmanager's status st
// (statusErr: why it has none), with externalAlertmanagers the number of
// alerting.alertmanagers set, which get every alert too.
func NewNotifications(st alertmanager.Status, statusErr error, externalAlertmanagers int) *Notifications {
	n := &Notifications{Fix: doctor.AlertsHint}
	if k := externalAlertmanagers; k > 0 {
		n.External = fmt.Sprintf("the Alertmanagers of alerting.alertmanagers (%d set%s)", k, map[bool]string{true: "s"}[k > 1])
	} else {
		n.Nobody = st.Nobody
	}
	if statusErr != nil {
		n.Err = statusErr.Error()
	}
	for _, d := range st.Deliveries {
		n.Deliveries = append(n.Deliveries, Delivery{
			Receiver:    d.Receiver,
			Integration: fmt.Sprintf("%s[%d]", d.Integration, d.Index),
			LastAttempt: d.LastAttempt,
			LastSuccess: d.LastSuccess,
			LastError:   d.LastError,
			Attempts:    d.Attempts,
			Failures:    d.Failures,
		})
	}
	for _, s := range st.Silences {
		n.Silences = append(n.Silences, Silence{ID: s.ID, CreatedBy: s.CreatedBy, Comment: s.Comment,
			Matchers: s.Matchers, StartsAt: s.StartsAt, EndsAt: s.EndsAt})
	}
	for _, al := range st.Alerts {
		ls := make(map[string]string, len(al.Labels))
		for k, v := range al.Labels {
			ls[string(k)] = string(v)
		}
		n.Alerts = append(n.Alerts, NotifiedAlert{Labels: ls, SilencedBy: al.SilencedBy,
			InhibitedBy: al.InhibitedBy, MutedBy: al.MutedBy})
	}
	return n
}

//go:embed overview/notifications.html
var notificationsFS embed.FS

func init() {
	template.Must(overviewTemplate.ParseFS(notificationsFS, "overview/notifications.html"))
}

// notificationsView is the block as the template renders it: times as
// ages at the page's evaluation time.
type notificationsView struct {
	Nobody, Fix, External, Err string
	Receivers                  []receiverView
	Silences                   []silenceView
	Suppressed                 []suppressedView
	Held                       int
	URL                        string
}

type receiverView struct {
	Name, Integration string
	Status            string // ok, fail, never
	Ago, SuccessAgo   string
	Error             string
	Attempts          int
	Failures          int
}

type silenceView struct {
	ID, CreatedBy, Comment, Matchers string
	Pending                          bool
	Starts, Until, Left              string
}

type suppressedView struct {
	Name, Where string
	Reason      string // silenced, inhibited, muted
	By          string
}

// notifications fills in the page's Notifications block (serve only).
func (h *Handler) notifications(ctx context.Context, p *overviewPage, o OverviewOptions) {
	if o.Notifications == nil || p.Agent {
		return
	}
	n := o.Notifications(ctx)
	if n == nil {
		return
	}
	p.Notifications = notificationsFor(n, p.EvalTime, strings.TrimSuffix(h.opts.ExternalURL.String(), "/"))
}

func notificationsFor(n *Notifications, now time.Time, url string) *notificationsView {
	v := &notificationsView{Nobody: n.Nobody, Fix: n.Fix, External: n.External, Err: n.Err, Held: len(n.Alerts), URL: url}
	ago := func(t time.Time) string { return humanDuration(now.Sub(t)) }
	for _, d := range n.Deliveries {
		r := receiverView{Name: d.Receiver, Integration: d.Integration, Status: "never", Error: d.LastError,
			Attempts: d.Attempts, Failures: d.Failures}
		if !d.LastAttempt.IsZero() {
			r.Status, r.Ago = "ok", ago(d.LastAttempt)
			if d.LastError != "" {
				r.Status = "fail"
			}
		}
		if !d.LastSuccess.IsZero() {
			r.SuccessAgo = ago(d.LastSuccess)
		}
		v.Receivers = append(v.Receivers, r)
	}
	authors := map[string]string{}
	for _, s := range n.Silences {
		authors[s.ID] = s.CreatedBy
		v.Silences = append(v.Silences, silenceView{
			ID: s.ID, CreatedBy: s.CreatedBy, Comment: s.Comment, Matchers: s.Matchers,
			Pending: s.StartsAt.After(now),
			Starts:  s.StartsAt.UTC().Format("2006-01-02 15:04 UTC"),
			Until:   s.EndsAt.UTC().Format("2006-01-02 15:04 UTC"),
			Left:    humanDuration(s.EndsAt.Sub(now)),
		})
	}
	for _, a := range n.Alerts {
		sv := suppressedView{Name: a.Labels["alertname"], Where: where(a.Labels)}
		switch {
		case len(a.SilencedBy) > 0:
			var by []string
			for _, id := range a.SilencedBy {
				s := "by silence " + id
				if who := authors[id]; who != "" {
					s += " of " + who
				}
				by = append(by, s)
			}
			sv.Reason, sv.By = "silenced", strings.Join(by, ", ")
		case len(a.InhibitedBy) > 0:
			sv.Reason, sv.By = "inhibited", "by "+strings.Join(a.InhibitedBy, ", ")
		case len(a.MutedBy) > 0:
			sv.Reason, sv.By = "muted", "by time interval "+strings.Join(a.MutedBy, ", ")
		default:
			continue
		}
		v.Suppressed = append(v.Suppressed, sv)
	}
	slices.SortStableFunc(v.Suppressed, func(x, y suppressedView) int { return strings.Compare(x.Name, y.Name) })
	return v
}

// where is an alert's node, GPU and workload, as the notifications say
// them.
func where(ls map[string]string) string {
	var parts []string
	if n := ls["instance"]; n != "" {
		parts = append(parts, "node "+n)
	}
	if g := ls["gpu"]; g != "" {
		parts = append(parts, "GPU "+g)
	}
	if w := ls["workload"]; w != "" {
		parts = append(parts, "workload "+w)
	}
	return strings.Join(parts, ", ")
}

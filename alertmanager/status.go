package alertmanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/alertmanager/alert"
	"github.com/prometheus/alertmanager/dispatch"
	"github.com/prometheus/alertmanager/marker"
	"github.com/prometheus/alertmanager/notify"
	"github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/alertmanager/silence"
	"github.com/prometheus/alertmanager/silence/silencepb"
	"github.com/prometheus/common/model"
)

// What the overview page shows of the embedded Alertmanager (Status):
// where each receiver's last attempt went, the active silences, and the
// alerts it holds with what holds their notifications back. Alertmanager
// keeps counts of attempts and failures (its notify metrics) and the
// last successful notification of each group (the nflog), but not when a
// receiver was last tried nor its last error: a recorder around each
// integration keeps those, since start. The rest is Alertmanager's own:
// its silences, and each alert's status as its API predicts it (the
// silencer and inhibitor writing to a fresh marker) with the time
// intervals that mute its group (the group marker).

// Delivery is one integration of a receiver (webhook_configs[0],
// email_configs[1], ...) and its attempts since gpuscope started.
type Delivery struct {
	Receiver    string
	Integration string // webhook, email, slack, ...
	Index       int    // its position in the receiver's list of that kind
	// LastAttempt is when a notification was last tried (each retry is an
	// attempt); zero when none was since start.
	LastAttempt time.Time
	// LastError is the last attempt's error; "" when it succeeded.
	LastError string
	// LastSuccess is when a notification last went through.
	LastSuccess        time.Time
	Attempts, Failures int
}

// Silence is an active or pending silence.
type Silence struct {
	ID, CreatedBy, Comment string
	// Matchers are the silence's matchers as amtool writes them
	// (alertname="X", gpu=~"0|1"); several sets, any of which matches,
	// are joined by " or ".
	Matchers         string
	StartsAt, EndsAt time.Time
}

// Alert is an alert the embedded Alertmanager holds and what it does with
// it now.
type Alert struct {
	Labels   model.LabelSet
	StartsAt time.Time
	// Receivers are those of the routes it matched.
	Receivers []string
	// SilencedBy are the IDs of the silences that suppress it.
	SilencedBy []string
	// InhibitedBy are the alerts that inhibit it, as "alertname on
	// instance" (their fingerprint when gone).
	InhibitedBy []string
	// MutedBy are the time intervals that mute a group of it now.
	MutedBy []string
}

// Status is what the overview page shows of the embedded Alertmanager.
type Status struct {
	// Nobody says why alerts reach nobody; "" when they reach someone.
	Nobody     string
	Deliveries []Delivery
	Silences   []Silence
	Alerts     []Alert
}

// ErrNotRunning is Status's error before Run serves and after it stops.
var ErrNotRunning = errors.New("the embedded Alertmanager is not running")

// Status returns the receivers' last attempts, the silences and the alerts
// held, as of now.
func (a *Alertmanager) Status(ctx context.Context) (Status, error) {
	s := Status{Nobody: a.Nobody()}
	a.mu.Lock()
	inst, b := a.running, a.pending
	a.mu.Unlock()
	if inst == nil || b == nil {
		return s, ErrNotRunning
	}
	s.Deliveries = a.deliveries.list(b)
	var err error
	if s.Silences, err = a.activeSilences(ctx); err != nil {
		return s, err
	}
	s.Alerts, err = a.heldAlerts(ctx, inst)
	return s, err
}

func (a *Alertmanager) activeSilences(ctx context.Context) ([]Silence, error) {
	sils, _, err := a.silences.Query(ctx, silence.QState(silence.SilenceStateActive, silence.SilenceStatePending))
	if err != nil {
		return nil, fmt.Errorf("query silences: %w", err)
	}
	out := make([]Silence, 0, len(sils))
	for _, sil := range sils {
		out = append(out, Silence{
			ID:        sil.GetId(),
			CreatedBy: sil.GetCreatedBy(),
			Comment:   sil.GetComment(),
			Matchers:  matcherText(sil),
			StartsAt:  sil.GetStartsAt().AsTime(),
			EndsAt:    sil.GetEndsAt().AsTime(),
		})
	}
	slices.SortFunc(out, func(x, y Silence) int { return x.EndsAt.Compare(y.EndsAt) })
	return out, nil
}

// matcherText writes a silence's matchers as amtool does.
func matcherText(sil *silencepb.Silence) string {
	sets := [][]*silencepb.Matcher{sil.GetMatchers()}
	if ms := sil.GetMatcherSets(); len(ms) > 0 {
		sets = sets[:0]
		for _, set := range ms {
			sets = append(sets, set.GetMatchers())
		}
	}
	types := map[silencepb.Matcher_Type]labels.MatchType{
		silencepb.Matcher_EQUAL: labels.MatchEqual, silencepb.Matcher_NOT_EQUAL: labels.MatchNotEqual,
		silencepb.Matcher_REGEXP: labels.MatchRegexp, silencepb.Matcher_NOT_REGEXP: labels.MatchNotRegexp,
	}
	var texts []string
	for _, set := range sets {
		var ms []string
		for _, m := range set {
			// The matcher as written; its regexp was checked when the
			// silence was set, so it compiles.
			if lm, err := labels.NewMatcher(types[m.GetType()], m.GetName(), m.GetPattern()); err == nil {
				ms = append(ms, lm.String())
			}
		}
		texts = append(texts, strings.Join(ms, ", "))
	}
	return strings.Join(texts, " or ")
}

// heldAlerts are the alerts of the dispatcher's groups that are still
// active, each once, with the receivers of its groups and its status.
func (a *Alertmanager) heldAlerts(ctx context.Context, inst *instance) ([]Alert, error) {
	groups, receivers, err := inst.dispatcher.Load().Groups(ctx,
		func(*dispatch.Route) bool { return true },
		func(al *alert.Alert, now time.Time) bool { return al.EndsAt.IsZero() || al.EndsAt.After(now) })
	if err != nil {
		return nil, fmt.Errorf("alert groups: %w", err)
	}
	inhibitor := inst.inhibitor.Load()
	byFP := map[model.Fingerprint]int{}
	var out []Alert
	for _, g := range groups {
		mutedBy, _ := a.groupMarker.Muted(g.RouteID, g.GroupKey)
		for _, al := range g.Alerts {
			fp := al.Fingerprint()
			i, seen := byFP[fp]
			if !seen {
				// As the API predicts it: the silencer and inhibitor write
				// to a fresh marker, so that a silence set a moment ago
				// shows before the group's next flush.
				m := marker.NewAlertMarker()
				mctx := marker.WithContext(ctx, m)
				inhibitor.Mutes(mctx, al.Labels)
				a.silencer.Mutes(mctx, al.Labels)
				st := m.Status(fp)
				i = len(out)
				byFP[fp] = i
				out = append(out, Alert{
					Labels:      al.Labels,
					StartsAt:    al.StartsAt,
					Receivers:   receivers[fp],
					SilencedBy:  st.SilencedBy,
					InhibitedBy: a.alertNames(inst, st.InhibitedBy),
				})
			}
			for _, name := range mutedBy {
				if !slices.Contains(out[i].MutedBy, name) {
					out[i].MutedBy = append(out[i].MutedBy, name)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(x, y Alert) int {
		return strings.Compare(string(x.Labels[model.AlertNameLabel]), string(y.Labels[model.AlertNameLabel]))
	})
	return out, nil
}

// alertNames names the alerts of fingerprints fps (the inhibitor's
// sources) as "alertname on instance".
func (a *Alertmanager) alertNames(inst *instance, fps []string) []string {
	var out []string
	for _, s := range fps {
		name := s
		if fp, err := model.ParseFingerprint(s); err == nil {
			if al, err := inst.alerts.Get(fp); err == nil {
				name = string(al.Labels[model.AlertNameLabel])
				if n := al.Labels["instance"]; n != "" {
					name += " on " + string(n)
				}
				if g := al.Labels["gpu"]; g != "" {
					name += " GPU " + string(g)
				}
			}
		}
		out = append(out, name)
	}
	return out
}

// deliveries records each integration's attempts, by receiver, kind and
// index, across config reloads (an integration keeps its record while
// its receiver keeps the same name and position).
type deliveries struct {
	mu sync.Mutex
	m  map[deliveryKey]*Delivery
}

type deliveryKey struct {
	receiver, integration string
	index                 int
}

func (d *deliveries) record(k deliveryKey, at time.Time, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[deliveryKey]*Delivery{}
	}
	r := d.m[k]
	if r == nil {
		r = &Delivery{Receiver: k.receiver, Integration: k.integration, Index: k.index}
		d.m[k] = r
	}
	r.Attempts++
	r.LastAttempt = at
	r.LastError = ""
	if err != nil {
		r.Failures++
		r.LastError = err.Error()
		return
	}
	r.LastSuccess = at
}

// list returns the deliveries of b's integrations in the order of the
// config's receivers, those never tried included.
func (d *deliveries) list(b *built) []Delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Delivery
	for _, r := range b.conf.Receivers {
		for _, i := range b.receivers[r.Name] {
			k := deliveryKey{r.Name, i.Name(), i.Index()}
			if rec := d.m[k]; rec != nil {
				out = append(out, *rec)
				continue
			}
			out = append(out, Delivery{Receiver: k.receiver, Integration: k.integration, Index: k.index})
		}
	}
	return out
}

// recorded is an integration that reports each attempt to deliveries.
type recorded struct {
	integration *notify.Integration
	key         deliveryKey
	deliveries  *deliveries
}

func (r *recorded) Notify(ctx context.Context, alerts ...*alert.Alert) (bool, error) {
	retry, err := r.integration.Notify(ctx, alerts...)
	r.deliveries.record(r.key, time.Now(), err)
	return retry, err
}

// recordIntegrations wraps each integration of receiver name so that d
// records its attempts.
func recordIntegrations(name string, is []notify.Integration, d *deliveries) []notify.Integration {
	out := make([]notify.Integration, len(is))
	for k := range is {
		i := &is[k]
		out[k] = notify.NewIntegration(
			&recorded{integration: i, key: deliveryKey{name, i.Name(), i.Index()}, deliveries: d},
			i, i.Name(), i.Index(), name)
	}
	return out
}

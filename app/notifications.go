package app

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/doctor"
	"github.com/gpuscope/gpuscope/web"
)

// notifications is the overview page's Notifications block: the embedded
// Alertmanager's receivers, silences and the alerts it holds back, and
// whether alerts reach anyone at all (the doctor's alerts check, said
// where the alerts are shown).
func (a *Appliance) notifications(ctx context.Context) *web.Notifications {
	n := &web.Notifications{Fix: doctor.AlertsHint}
	if k := len(a.config.Load().Prometheus.AlertingConfig.AlertmanagerConfigs); k > 0 {
		n.External = fmt.Sprintf("the Alertmanagers of alerting.alertmanagers (%d set%s)", k, map[bool]string{true: "s"}[k > 1])
	}
	s, err := a.am.Status(ctx)
	if err != nil {
		n.Err = err.Error()
	}
	if n.External == "" {
		n.Nobody = s.Nobody
	}
	for _, d := range s.Deliveries {
		n.Deliveries = append(n.Deliveries, web.Delivery{
			Receiver:    d.Receiver,
			Integration: fmt.Sprintf("%s[%d]", d.Integration, d.Index),
			LastAttempt: d.LastAttempt,
			LastSuccess: d.LastSuccess,
			LastError:   d.LastError,
			Attempts:    d.Attempts,
			Failures:    d.Failures,
		})
	}
	for _, s := range s.Silences {
		n.Silences = append(n.Silences, web.Silence{ID: s.ID, CreatedBy: s.CreatedBy, Comment: s.Comment,
			Matchers: s.Matchers, StartsAt: s.StartsAt, EndsAt: s.EndsAt})
	}
	for _, al := range s.Alerts {
		ls := make(map[string]string, len(al.Labels))
		for k, v := range al.Labels {
			ls[string(k)] = string(v)
		}
		n.Alerts = append(n.Alerts, web.NotifiedAlert{Labels: ls, SilencedBy: al.SilencedBy,
			InhibitedBy: al.InhibitedBy, MutedBy: al.MutedBy})
	}
	return n
}

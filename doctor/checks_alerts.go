package doctor

import (
	"context"
	"fmt"
	"strings"
)

// AlertsHint is how to make alerts reach someone (the overview page says
// it too).
const AlertsHint = `add a receiver to the alertmanager: section of the config file, e.g. receivers: [{name: ops, webhook_configs: [{url: "http://hook.example/"}]}] (docs/notifications.md), or point alerting.alertmanagers at an Alertmanager`

// alertChecks: whether a firing alert reaches anyone, through the
// embedded Alertmanager's receivers or the Alertmanagers of
// alerting.alertmanagers. Evaluating 24 alerts for nobody is what a user
// who chose one binary finds out at 3 a.m.
func alertChecks(_ context.Context, o *Options) []Check {
	am := o.Config.Alertmanager
	external := len(o.Config.Prometheus.AlertingConfig.AlertmanagerConfigs)
	others := ""
	if external > 0 {
		others = fmt.Sprintf("the Alertmanagers of alerting.alertmanagers (%d set%s)", external, plural(external))
	}
	switch {
	case am != nil && am.Reaches():
		summary := "alerts reach receiver" + plural(len(am.Receivers())) + " " + strings.Join(am.Receivers(), ", ") + " through the embedded Alertmanager"
		if others != "" {
			summary += ", and " + others
		}
		return []Check{ok("alerts", summary)}
	case others != "":
		return []Check{ok("alerts", "alerts go to "+others+"; the embedded Alertmanager sends none")}
	}
	why := "the alertmanager: section has no receivers"
	if am != nil {
		why = am.Nobody()
	}
	return []Check{warn("alerts", "alerts reach nobody: "+why, AlertsHint)}
}

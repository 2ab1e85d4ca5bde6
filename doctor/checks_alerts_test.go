package doctor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func TestAlertChecks(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         Check
	}{
		{"the defaults: nobody", "", Check{Name: "alerts", Status: StatusWarn,
			Summary: "alerts reach nobody: the alertmanager: section has no receivers", Hint: AlertsHint}},
		{"receivers without a notifier", "alertmanager:\n  route: {receiver: a}\n  receivers: [{name: a}]\n", Check{Name: "alerts", Status: StatusWarn,
			Summary: "alerts reach nobody: no receiver the routes lead to has a notifier (webhook_configs, email_configs, slack_configs, ...)", Hint: AlertsHint}},
		{"a webhook", "alertmanager:\n  receivers: [{name: ops, webhook_configs: [{url: 'http://hook/'}]}]\n", Check{Name: "alerts", Status: StatusOK,
			Summary: "alerts reach receiver ops through the embedded Alertmanager"}},
		{"two receivers and an external Alertmanager", "alerting:\n  alertmanagers: [{static_configs: [{targets: ['am:9093']}]}]\nalertmanager:\n  receivers: [{name: a, webhook_configs: [{url: 'http://a/'}]}, {name: b, webhook_configs: [{url: 'http://b/'}]}]\n",
			Check{Name: "alerts", Status: StatusOK, Summary: "alerts reach receivers a, b through the embedded Alertmanager, and the Alertmanagers of alerting.alertmanagers (1 set)"}},
		{"an external Alertmanager only", "alerting:\n  alertmanagers: [{static_configs: [{targets: ['am:9093']}]}]\n", Check{Name: "alerts", Status: StatusOK,
			Summary: "alerts go to the Alertmanagers of alerting.alertmanagers (1 set); the embedded Alertmanager sends none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load([]byte(tc.config), "gpuscope.yml", nil)
			require.NoError(t, err)
			o := Options{Config: cfg}
			require.Equal(t, []Check{tc.want}, alertChecks(context.Background(), &o))
		})
	}
}

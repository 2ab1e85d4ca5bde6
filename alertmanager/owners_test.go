package alertmanager

import (
	"testing"

	"github.com/prometheus/alertmanager/dispatch"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/stretchr/testify/require"
)

var testUsers = Users{
	"alice": {Email: "alice@lab.example", Chat: "@alice", Receiver: "team-vision"},
	"bob":   {Email: "bob$1@lab.example"},
	"1001":  {Chat: "@carol"}, // a uid passwd does not name
}

// TestUsersRelabel: an alert naming a user of the section gets their
// email, chat handle and receiver; one naming nobody there, or no user,
// gets none; a $ in a value is kept as written.
func TestUsersRelabel(t *testing.T) {
	rcs := testUsers.AlertRelabelConfigs()
	for _, rc := range rcs {
		require.NoError(t, rc.Validate(model.UTF8Validation))
	}
	for _, tc := range []struct {
		user string
		want map[string]string
	}{
		{"alice", map[string]string{OwnerEmailLabel: "alice@lab.example", OwnerChatLabel: "@alice", OwnerReceiverLabel: "team-vision"}},
		{"bob", map[string]string{OwnerEmailLabel: "bob$1@lab.example"}},
		{"1001", map[string]string{OwnerChatLabel: "@carol"}},
		{"alice2", map[string]string{}},
		{"", map[string]string{}},
	} {
		t.Run(tc.user, func(t *testing.T) {
			lb := labels.NewBuilder(labels.FromStrings("alertname", "GPUHeldIdle", "user", tc.user))
			require.True(t, relabel.ProcessBuilder(lb, rcs...))
			out := lb.Labels()
			got := map[string]string{}
			for _, l := range []string{OwnerEmailLabel, OwnerChatLabel, OwnerReceiverLabel} {
				if v := out.Get(l); v != "" {
					got[l] = v
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestWithOwnerRoutes: a user's receiver gets the alerts that name them
// and the route tree goes on to its own receivers, its root's included
// (which Alertmanager skips for an alert a child matched); alerts naming
// nobody are routed as before. The text has the routes too.
func TestWithOwnerRoutes(t *testing.T) {
	c, err := Load(`
route:
  receiver: admin
  routes:
    - matchers: [severity="critical"]
      receiver: oncall
receivers:
  - name: admin
  - name: oncall
  - name: team-vision
`, "")
	require.NoError(t, err)
	require.NoError(t, testUsers.CheckReceivers(c))
	with, err := c.WithOwnerRoutes(testUsers)
	require.NoError(t, err)
	require.Contains(t, with.Text, `owner_receiver="team-vision"`)
	again, err := Load(with.Text, "")
	require.NoError(t, err, "the text loads as it is")
	require.Equal(t, with.Alertmanager.Route.Routes[0].Receiver, again.Alertmanager.Route.Routes[0].Receiver)
	require.Equal(t, "admin", with.Alertmanager.Route.Receiver)

	tree := dispatch.NewRoute(with.Alertmanager.Route, nil)
	receivers := func(ls model.LabelSet) []string {
		var out []string
		for _, r := range tree.Match(ls) {
			out = append(out, r.RouteOpts.Receiver)
		}
		return out
	}
	require.Equal(t, []string{"team-vision", "oncall"}, receivers(model.LabelSet{"severity": "critical", OwnerReceiverLabel: "team-vision"}))
	require.Equal(t, []string{"team-vision", "admin"}, receivers(model.LabelSet{"severity": "warning", OwnerReceiverLabel: "team-vision"}))
	require.Equal(t, []string{"admin"}, receivers(model.LabelSet{"severity": "warning"}))

	unchanged, err := c.WithOwnerRoutes(Users{"bob": {Email: "bob@lab.example"}})
	require.NoError(t, err)
	require.Same(t, c, unchanged, "no receiver named: the config as it was")

	require.EqualError(t, Users{"alice": {Receiver: "team-nlp"}}.CheckReceivers(c),
		`users.alice.receiver: "team-nlp" is not a receiver of the alertmanager: section (it has admin, oncall, team-vision)`)
}

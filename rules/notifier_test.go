package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/notifier"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/test/bufconn"
)

// receiver is an Alertmanager API v2 alerts endpoint that hands on what
// it is posted.
func receiver(got chan<- models.PostableAlerts) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var alerts models.PostableAlerts
		if req.URL.Path != "/api/v2/alerts" || json.NewDecoder(req.Body).Decode(&alerts) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		got <- alerts
	})
}

// TestNotifierEmbedded: with an embedded Alertmanager, every alert goes
// to it over its in-memory listener (its address resolves nowhere) and to
// the Alertmanagers of the config, with the external labels and the alert
// relabelling applied to both, and it is listed among them.
func TestNotifierEmbedded(t *testing.T) {
	external := make(chan models.PostableAlerts, 16)
	srv := httptest.NewServer(receiver(external))
	defer srv.Close()
	embedded := make(chan models.PostableAlerts, 16)
	l := bufconn.Listen(1 << 16)
	self := &http.Server{Handler: receiver(embedded)}
	go func() { _ = self.Serve(l) }()
	defer self.Close()

	reg := prometheus.NewRegistry()
	sd, err := discovery.CreateAndRegisterSDMetrics(reg)
	require.NoError(t, err)
	const address = "gpuscope.invalid:9089"
	n, err := NewNotifier(NotifierOptions{Registerer: reg, SDMetrics: sd, DrainOnShutdown: true,
		Embedded: &Embedded{Address: address, Dial: func(ctx context.Context) (net.Conn, error) { return l.DialContext(ctx) }}})
	require.NoError(t, err)
	cfg := loadPromConfig(t, fmt.Sprintf(`
global: {external_labels: {cluster: lab}}
alerting:
  alert_relabel_configs: [{action: labeldrop, regex: scratch}]
  alertmanagers:
    - static_configs: [{targets: [%q]}]
`, strings.TrimPrefix(srv.URL, "http://")))
	require.NoError(t, n.ApplyConfig(cfg, nil))
	require.Len(t, cfg.AlertingConfig.AlertmanagerConfigs, 1, "the config given is not changed")

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	require.Eventually(t, func() bool { return len(n.Manager().Alertmanagers()) == 2 }, 30*time.Second, 50*time.Millisecond)
	require.ElementsMatch(t, []string{srv.URL + "/api/v2/alerts", "http://" + address + "/api/v2/alerts"}, urls(n.Manager().Alertmanagers()))

	n.Manager().Send(&notifier.Alert{
		Labels:   labels.FromStrings("alertname", "GPUFellOffBus", "gpu", "0", "scratch", "x"),
		StartsAt: time.Now(),
	})
	for name, ch := range map[string]chan models.PostableAlerts{"external": external, "embedded": embedded} {
		select {
		case alerts := <-ch:
			require.Len(t, alerts, 1, name)
			require.Equal(t, models.LabelSet{"alertname": "GPUFellOffBus", "gpu": "0", "cluster": "lab"}, alerts[0].Labels, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("no alert reached the %s Alertmanager", name)
		}
	}
	stop()
	require.NoError(t, <-done)
}

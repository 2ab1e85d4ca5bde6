package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	promdiscovery "github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/notifier"

	"github.com/gpuscope/gpuscope/discovery"
)

// DefaultNotificationQueueCapacity is Prometheus's
// --alertmanager.notification-queue-capacity.
const DefaultNotificationQueueCapacity = 10000

// NotifierOptions configure alert delivery.
type NotifierOptions struct {
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// SDMetrics are the service discovery metrics, registered once per
	// process and shared with the scrape discovery.
	SDMetrics *promdiscovery.SDMetrics
	// QueueCapacity is how many alerts wait for delivery before the oldest
	// are dropped (0: DefaultNotificationQueueCapacity).
	QueueCapacity int
	// DrainOnShutdown sends the queued alerts before Run returns.
	DrainOnShutdown bool
	// Embedded is the Alertmanager inside this process (serve's); nil
	// for none.
	Embedded *Embedded
}

// Embedded is an Alertmanager reached over an in-memory listener. The
// notifier sends to it as to those of alerting.alertmanagers (one more
// Alertmanager set, added to every config, listed in
// /api/v1/alertmanagers and counted in prometheus_notifications_*), so
// that resends, external labels, alert relabelling and the queue are
// Prometheus's, and only the connection differs: requests for Address
// dial Dial instead of the network.
type Embedded struct {
	// Address is the host:port the set's URL names: gpuscope's own, where
	// the same API is served to others.
	Address string
	Dial    func(ctx context.Context) (net.Conn, error)
}

// Notifier delivers alerts to the Alertmanagers of the config's
// alerting.alertmanagers (API v2), found by their own service discovery,
// and to the embedded one, with the global external_labels added.
type Notifier struct {
	manager  *notifier.Manager
	targets  *discovery.Feeder
	embedded *Embedded
}

// NewNotifier creates the notifier and its discovery; Run starts them.
func NewNotifier(o NotifierOptions) (*Notifier, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SDMetrics == nil {
		return nil, errors.New("notifier: SDMetrics is required")
	}
	if o.QueueCapacity == 0 {
		o.QueueCapacity = DefaultNotificationQueueCapacity
	}
	feed := discovery.New(discovery.Options{
		Logger:     o.Logger.With("component", "discovery manager notify"),
		Registerer: o.Registerer,
		SDMetrics:  o.SDMetrics,
		Name:       "notify",
	})
	m := notifier.NewManager(&notifier.Options{
		QueueCapacity:   o.QueueCapacity,
		DrainOnShutdown: o.DrainOnShutdown,
		Registerer:      o.Registerer,
		Do:              do(o.Embedded),
	}, model.UTF8Validation, o.Logger.With("component", "notifier"))
	return &Notifier{manager: m, targets: feed, embedded: o.Embedded}, nil
}

// do sends a notifier request as Prometheus does, except that one for
// the embedded Alertmanager goes over its in-memory connection.
func do(e *Embedded) func(context.Context, *http.Client, *http.Request) (*http.Response, error) {
	var self *http.Client
	if e != nil {
		self = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return e.Dial(ctx) },
		}}
	}
	return func(ctx context.Context, client *http.Client, req *http.Request) (*http.Response, error) {
		if self != nil && req.URL.Host == e.Address {
			client = self
		}
		if client == nil {
			client = http.DefaultClient
		}
		return client.Do(req.WithContext(ctx))
	}
}

// Manager is the notifier manager: the rule manager sends to it and the
// HTTP API lists its Alertmanagers.
func (n *Notifier) Manager() *notifier.Manager { return n.manager }

// ApplyConfig takes the Alertmanagers, alert relabelling and external
// labels of cfg, and adds the embedded Alertmanager. owners are relabel
// configs that run before alerting.alert_relabel_configs, so that the
// user's own relabelling sees what they add (the users: section's
// owner_email, owner_chat and owner_receiver by the user label).
func (n *Notifier) ApplyConfig(cfg *promconfig.Config, owners []*relabel.Config) error {
	c := *cfg
	if len(owners) > 0 {
		c.AlertingConfig.AlertRelabelConfigs = append(slices.Clone(owners), cfg.AlertingConfig.AlertRelabelConfigs...)
	}
	if n.embedded != nil {
		c.AlertingConfig.AlertmanagerConfigs = append(slices.Clone(cfg.AlertingConfig.AlertmanagerConfigs), embeddedConfig(n.embedded.Address))
	}
	cfg = &c
	if err := n.manager.ApplyConfig(cfg); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	sd := map[string]promdiscovery.Configs{}
	for k, v := range cfg.AlertingConfig.AlertmanagerConfigs.ToMap() {
		sd[k] = v.ServiceDiscoveryConfigs
	}
	if err := n.targets.ApplyConfig(sd); err != nil {
		return fmt.Errorf("notify discovery: %w", err)
	}
	return nil
}

// embeddedConfig is the Alertmanager set of the embedded Alertmanager:
// Prometheus's defaults (API v2, 10 s timeout), one static target.
func embeddedConfig(address string) *promconfig.AlertmanagerConfig {
	c := promconfig.DefaultAlertmanagerConfig
	c.ServiceDiscoveryConfigs = promdiscovery.Configs{promdiscovery.StaticConfig{{
		Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(address)}},
		Source:  "embedded",
	}}}
	return &c
}

// Run delivers alerts until ctx ends, then sends what is queued (with
// DrainOnShutdown) and stops discovery. Stop the rule manager first: its
// last evaluations may still send.
func (n *Notifier) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.manager.Run(n.targets.SyncCh())
	}()
	<-ctx.Done()
	n.manager.Stop()
	<-done
	// Discovery stops after the notifier has drained.
	n.targets.Stop()
	return nil
}

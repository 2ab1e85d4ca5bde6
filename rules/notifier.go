package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	promdiscovery "github.com/prometheus/prometheus/discovery"
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
}

// Notifier delivers alerts to the Alertmanagers of the config's
// alerting.alertmanagers (API v2), found by their own service discovery,
// with the global external_labels added.
type Notifier struct {
	manager *notifier.Manager
	targets *discovery.Feeder
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
	}, model.UTF8Validation, o.Logger.With("component", "notifier"))
	return &Notifier{manager: m, targets: feed}, nil
}

// Manager is the notifier manager: the rule manager sends to it and the
// HTTP API lists its Alertmanagers.
func (n *Notifier) Manager() *notifier.Manager { return n.manager }

// ApplyConfig takes the Alertmanagers, alert relabelling and external
// labels of cfg.
func (n *Notifier) ApplyConfig(cfg *promconfig.Config) error {
	if err := n.manager.ApplyConfig(cfg); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	c := map[string]promdiscovery.Configs{}
	for k, v := range cfg.AlertingConfig.AlertmanagerConfigs.ToMap() {
		c[k] = v.ServiceDiscoveryConfigs
	}
	if err := n.targets.ApplyConfig(c); err != nil {
		return fmt.Errorf("notify discovery: %w", err)
	}
	return nil
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

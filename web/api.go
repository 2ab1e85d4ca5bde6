package web

import (
	"context"
	"github.com/grafana/regexp"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/notifier"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/notifications"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"
)

// APIOptions are what the Prometheus HTTP API v1 reads from the appliance.
type APIOptions struct {
	QueryEngine promql.QueryEngine
	Queryable   storage.SampleAndChunkQueryable
	Exemplars   storage.ExemplarQueryable
	TSDB        apiv1.TSDBAdminStats
	TSDBDir     string
	// Appendable receives remote-write and OTLP pushes; nil unless a
	// receiver is enabled.
	Appendable storage.AppendableV2

	ScrapeManager *scrape.Manager   // nil: no targets (agent-less tests)
	RuleManager   *rules.Manager    // nil: no rules
	Notifier      *notifier.Manager // nil: no Alertmanagers
	Config        func() promconfig.Config
	Flags         map[string]string
	RuntimeInfo   func() (apiv1.RuntimeInfo, error)
	BuildInfo     *apiv1.PrometheusVersion

	EnableAdmin               bool
	EnableRemoteWriteReceiver bool
	EnableOTLPReceiver        bool
	LookbackDelta             time.Duration
	QueryTimeout              time.Duration
	Parser                    parser.Parser

	// Workloads serves /api/v1/workloads, the run report; nil: 404.
	Workloads WorkloadReporter
	// Digests serves POST /api/v1/digests/send, the usage digests now
	// (privileged, as the admin API); nil: 404.
	Digests DigestSender
}

// newAPI is the one call of apiv1.NewAPI in gpuscope. Its parameter list
// changes in most Prometheus releases; the module version is pinned in
// go.mod and every argument is named here, so an upgrade is one edit.
func newAPI(o APIOptions, listenAddress string, externalURL *url.URL, cors *regexp.Regexp,
	ready func(http.HandlerFunc) http.HandlerFunc, gatherer prometheus.Gatherer, registerer prometheus.Registerer, logger *slog.Logger,
) *apiv1.API {
	var (
		scrapePools = func(context.Context) apiv1.ScrapePoolsRetriever { return scrapeRetriever{o.ScrapeManager} }
		targets     = func(context.Context) apiv1.TargetRetriever { return scrapeRetriever{o.ScrapeManager} }
		alertmgrs   = func(context.Context) apiv1.AlertmanagerRetriever { return alertmanagerRetriever{o.Notifier} }
		ruleGroups  = func(context.Context) apiv1.RulesRetriever { return rulesRetriever{o.RuleManager} }
	)
	var appendable storage.AppendableV2
	if o.EnableRemoteWriteReceiver || o.EnableOTLPReceiver {
		appendable = o.Appendable
	}
	return apiv1.NewAPI(
		o.QueryEngine,
		o.Queryable,
		appendable,
		o.Exemplars,
		scrapePools,
		targets,
		alertmgrs,
		o.Config,
		o.Flags,
		apiv1.GlobalURLOptions{
			ListenAddress: listenAddress,
			Host:          externalURL.Host,
			Scheme:        externalURL.Scheme,
		},
		ready,
		o.TSDB,
		o.TSDBDir,
		o.EnableAdmin,
		false, // enableSearch: the experimental search API is not offered
		0,     // maxSearchLimit
		logger,
		ruleGroups,
		0, 0, 0, // remote read limits: remote read is not served
		false, // isAgent
		cors,
		o.RuntimeInfo,
		o.BuildInfo,
		func() []notifications.Notification { return nil },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		gatherer,
		registerer,
		nil, // statsRenderer: Prometheus's default
		o.EnableRemoteWriteReceiver,
		// Remote-write messages accepted: v1 and v2, Prometheus's flag
		// default (nil would refuse every message with 415).
		remoteapi.MessageTypes{remoteapi.WriteV1MessageType, remoteapi.WriteV2MessageType},
		o.EnableOTLPReceiver,
		false, // otlpDeltaToCumulative
		false, // otlpNativeDeltaIngestion
		o.LookbackDelta,
		false, // enableTypeAndUnitLabels
		false, // appendMetadata
		nil,   // overrideErrorCode: Prometheus's status codes (400/422/503)
		nil,   // featureRegistry: /features is not offered
		apiv1.OpenAPIOptions{ExternalURL: externalURL.String(), Version: o.BuildInfo.Version},
		o.Parser,
		false, // enableQueryCost
		o.QueryTimeout,
	)
}

// registerAPI mounts the API's routes under /api/v1.
func registerAPI(api *apiv1.API) http.Handler {
	r := route.New().WithPrefix("/api/v1")
	api.Register(r)
	return r
}

// The retrievers below stand in for components that are absent, so the
// API's /targets, /rules and /alerts answer with empty lists instead of
// dereferencing nil.

type scrapeRetriever struct{ m *scrape.Manager }

func (s scrapeRetriever) ScrapePools() []string {
	if s.m == nil {
		return nil
	}
	return s.m.ScrapePools()
}

func (s scrapeRetriever) TargetsActive() map[string][]*scrape.Target {
	if s.m == nil {
		return nil
	}
	return s.m.TargetsActive()
}

func (s scrapeRetriever) TargetsDropped() map[string][]*scrape.Target {
	if s.m == nil {
		return nil
	}
	return s.m.TargetsDropped()
}

func (s scrapeRetriever) TargetsDroppedCounts() map[string]int {
	if s.m == nil {
		return nil
	}
	return s.m.TargetsDroppedCounts()
}

func (s scrapeRetriever) ScrapePoolConfig(name string) (*promconfig.ScrapeConfig, error) {
	if s.m == nil {
		return nil, errNoScrapeManager
	}
	return s.m.ScrapePoolConfig(name)
}

type alertmanagerRetriever struct{ m *notifier.Manager }

func (a alertmanagerRetriever) Alertmanagers() []*url.URL {
	if a.m == nil {
		return nil
	}
	return a.m.Alertmanagers()
}

func (a alertmanagerRetriever) DroppedAlertmanagers() []*url.URL {
	if a.m == nil {
		return nil
	}
	return a.m.DroppedAlertmanagers()
}

type rulesRetriever struct{ m *rules.Manager }

func (r rulesRetriever) RuleGroups() []*rules.Group {
	if r.m == nil {
		return nil
	}
	return r.m.RuleGroups()
}

func (r rulesRetriever) AlertingRules() []*rules.AlertingRule {
	if r.m == nil {
		return nil
	}
	return r.m.AlertingRules()
}

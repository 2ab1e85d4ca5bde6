package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const selfSel = `instance=~"$instance"`

// self watches gpuscope itself through its own /metrics (job gpuscope),
// where Prometheus's TSDB, scrape, engine and rule metrics live.
func self() *dashboard.DashboardBuilder {
	return newDashboard(UIDSelf, "gpuscope / gpuscope itself",
		"The appliance's own health: ingestion, active series, scrapes, rule evaluation, TSDB size and retention, CPU and memory.").
		WithVariable(datasourceVariable()).
		WithVariable(labelVariable("instance", "Node", `label_values(prometheus_tsdb_head_series, instance)`)).
		WithRow(dashboard.NewRowBuilder("Ingestion")).
		WithPanel(timeseriesPanel("Samples ingested", "Samples appended to the TSDB head per second.", unitOpsPerSec,
			target(`rate(prometheus_tsdb_head_samples_appended_total{`+selfSel+`}[$__rate_interval])`, "{{instance}} {{type}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Active series", "Series in the TSDB head.", unitCount,
			target(`prometheus_tsdb_head_series{`+selfSel+`}`, "{{instance}}")).
			Min(0)).
		WithRow(dashboard.NewRowBuilder("Scrapes")).
		WithPanel(timeseriesPanel("Scrape duration", "How long each job's scrapes take; near the interval means the target is too slow or too big.", unitSeconds,
			target(`max by (job) (scrape_duration_seconds)`, "{{job}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Targets down", "Targets per job whose last scrape failed (up == 0). TargetDown fires after 5 minutes.", unitCount,
			target(`sum by (job) (up == bool 0)`, "{{job}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Samples per scrape", "Samples each job's targets expose; growth here is series growth.", unitCount,
			target(`sum by (job) (scrape_samples_scraped)`, "{{job}}")).
			Min(0)).
		WithRow(dashboard.NewRowBuilder("Rules")).
		WithPanel(timeseriesPanel("Rule group evaluation time", "Duration of the last evaluation of each rule group; above its interval, evaluations are skipped.", unitSeconds,
			target(`max by (rule_group) (prometheus_rule_group_last_duration_seconds{`+selfSel+`})`, "{{rule_group}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Rule evaluation failures", "Failed rule evaluations per second, per group. GpuscopeRuleEvaluationFailing watches this.", unitOpsPerSec,
			target(`sum by (rule_group) (rate(prometheus_rule_evaluation_failures_total{`+selfSel+`}[$__rate_interval]))`, "{{rule_group}}")).
			Min(0)).
		WithRow(dashboard.NewRowBuilder("Storage and process")).
		WithPanel(timeseriesPanel("TSDB size", "Bytes of persisted blocks and of the write-ahead log.", unitBytes,
			target(`prometheus_tsdb_storage_blocks_bytes{`+selfSel+`}`, "blocks {{instance}}"),
			target(`prometheus_tsdb_wal_storage_size_bytes{`+selfSel+`}`, "WAL {{instance}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Retention", "Configured retention time, and how far back data goes now.", unitSeconds,
			target(`prometheus_tsdb_retention_limit_seconds{`+selfSel+`}`, "retention {{instance}}"),
			target(`time() - prometheus_tsdb_lowest_timestamp_seconds{`+selfSel+`}`, "oldest sample age {{instance}}")).
			Min(0)).
		WithPanel(timeseriesPanel("CPU", "Cores used by the gpuscope process.", unitCores,
			target(`rate(process_cpu_seconds_total{job="gpuscope", `+selfSel+`}[$__rate_interval])`, "{{instance}}")).
			Min(0)).
		WithPanel(timeseriesPanel("Memory", "Resident memory of the gpuscope process and the Go heap in use.", unitBytes,
			target(`process_resident_memory_bytes{job="gpuscope", `+selfSel+`}`, "RSS {{instance}}"),
			target(`go_memstats_heap_inuse_bytes{job="gpuscope", `+selfSel+`}`, "heap {{instance}}")).
			Min(0))
}

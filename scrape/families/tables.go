package families

// Cadvisor is `cadvisor.families:`, the groups of cAdvisor's families
// that no built-in rule, dashboard or page reads. All are off by default.
// Whole metric sets nothing reads (cpuLoad, among others) are off through
// `cadvisor.disable_metrics` instead, so cAdvisor does not even collect
// them.
type Cadvisor struct {
	MemoryDetail   bool `yaml:"memory_detail"`
	CPUDetail      bool `yaml:"cpu_detail"`
	NetworkDetail  bool `yaml:"network_detail"`
	PressureDetail bool `yaml:"pressure_detail"`
	DiskDetail     bool `yaml:"disk_detail"`
	SpecDetail     bool `yaml:"spec_detail"`
}

// CadvisorSection is the diet of the cAdvisor collector.
var CadvisorSection = Section{
	Name: "cadvisor",
	Groups: []Group{
		{
			Key: "memory_detail",
			Names: []string{
				"container_memory_kernel_usage", "container_memory_mapped_file",
				"container_memory_swap", "container_memory_failcnt",
				"container_memory_max_usage_bytes", "container_memory_total_active_file_bytes",
				"container_memory_total_inactive_file_bytes", "container_memory_failures_total",
				"container_memory_events_high_total", "container_memory_events_max_total",
				"container_memory_file_dirty_bytes", "container_memory_file_writeback_bytes",
				"container_memory_pgscan_total", "container_memory_pgsteal_total",
				"container_memory_workingset_refault_file_total", "container_memory_workingset_refault_anon_total",
			},
			Why: "page faults, reclaim, swap, kernel, mapped, dirty and active/inactive file memory, the peak usage",
		},
		{
			Key: "cpu_detail",
			Names: []string{
				"container_cpu_user_seconds_total", "container_cpu_system_seconds_total",
				"container_cpu_cfs_throttled_seconds_total",
				"container_cpu_cfs_burst_periods_total", "container_cpu_cfs_burst_seconds_total",
			},
			Why: "user/system split of container_cpu_usage_seconds_total, throttled time (throttled periods stay), CFS burst",
		},
		{
			Key: "network_detail",
			Names: []string{
				"container_network_receive_packets_total", "container_network_receive_packets_dropped_total",
				"container_network_receive_errors_total", "container_network_transmit_packets_total",
				"container_network_transmit_packets_dropped_total", "container_network_transmit_errors_total",
			},
			Why: "packets, drops and errors per interface (bytes stay)",
		},
		{
			Key:      "pressure_detail",
			Prefixes: []string{"container_pressure_"},
			Why:      "PSI stall time of CPU and memory, and the \"full\" stall of I/O (the \"some\" I/O stall stays)",
		},
		{
			Key:      "disk_detail",
			Prefixes: []string{"container_fs_", "container_blkio_"},
			Why:      "per-device I/O counts, sectors, merges, time, io.cost, inodes (read and written bytes, usage and limit stay)",
		},
		{
			Key: "spec_detail",
			Names: []string{
				"container_spec_cpu_shares", "container_spec_memory_reservation_limit_bytes",
				"container_spec_memory_swap_limit_bytes", "container_health_state",
			},
			Why: "CPU shares, memory reservation and swap limits, Docker health check state",
		},
	},
	Kept: []string{
		// Read by the Workloads dashboard's rules.
		"container_pressure_io_waiting_seconds_total",
		"container_fs_reads_bytes_total", "container_fs_writes_bytes_total",
		// Documented: the disk holding Docker's layers (docs/install.md, the image).
		"container_fs_usage_bytes", "container_fs_limit_bytes",
	},
}

// On reports whether the group with the key is turned on.
func (c Cadvisor) On(key string) bool {
	switch key {
	case "memory_detail":
		return c.MemoryDetail
	case "cpu_detail":
		return c.CPUDetail
	case "network_detail":
		return c.NetworkDetail
	case "pressure_detail":
		return c.PressureDetail
	case "disk_detail":
		return c.DiskDetail
	case "spec_detail":
		return c.SpecDetail
	}
	return false
}

// Keep reports whether cAdvisor's family name is exposed.
func (c Cadvisor) Keep(name string) bool { return CadvisorSection.Keep(name, c.On) }

// Self is `self_metrics.families:`, the groups of the process's own
// families (Go runtime, Prometheus's engine, TSDB, scrape and rule
// internals, the embedded Alertmanager's) that no built-in rule,
// dashboard or page reads. Off by default. Remote write's and the notifier's families are not grouped:
// docs/remote-write.md "Scale out" tunes the queue by them, and they exist only when
// remote write or Alertmanager is configured.
type Self struct {
	GoRuntime    bool `yaml:"go_runtime"`
	QueryEngine  bool `yaml:"query_engine"`
	TSDBDetail   bool `yaml:"tsdb_detail"`
	ScrapeDetail bool `yaml:"scrape_detail"`
	RuleDetail   bool `yaml:"rule_detail"`
	HTTP         bool `yaml:"http"`
	// AlertmanagerDetail is the embedded Alertmanager's internals: half
	// the process's series without it.
	AlertmanagerDetail bool `yaml:"alertmanager_detail"`
}

// SelfSection is the diet of the process's own metrics.
var SelfSection = Section{
	Name: "self_metrics",
	Groups: []Group{
		{Key: "go_runtime", Prefixes: []string{"go_"},
			Why: "GC pauses, the memstats breakdown, scheduler and GOGC/GOMEMLIMIT settings (heap in use and goroutines stay)"},
		{Key: "query_engine", Prefixes: []string{"prometheus_engine_"},
			Why: "query timings by phase, queries in flight"},
		{Key: "tsdb_detail", Prefixes: []string{"prometheus_tsdb_"},
			Why: "compaction, chunk, WAL fsync and out-of-order histograms, head internals (series, samples, sizes, retention and every failure counter stay)"},
		{Key: "scrape_detail", Prefixes: []string{"prometheus_target_", "prometheus_sd_"},
			Why: "scrape pool and discovery internals, interval and sync histograms (`up` and `scrape_*` of every target stay)"},
		{Key: "rule_detail", Prefixes: []string{"prometheus_rule_"},
			Why: "per-group evaluation timings, samples and timestamps (failures, last duration and missed iterations stay)"},
		{Key: "http", Prefixes: []string{"promhttp_", "prometheus_http_", "net_conntrack_"},
			Why: "the /metrics handler's and HTTP clients' own counters"},
		{Key: "alertmanager_detail", Prefixes: []string{"alertmanager_"},
			Why: "the embedded Alertmanager's dispatcher, notification log, silence and API internals and its notification latency (notifications sent and failed, requests, alerts and silences by state stay)"},
	},
	Kept: []string{
		// Read by the gpuscope dashboard.
		"go_memstats_heap_inuse_bytes", "go_goroutines", "go_info",
		"prometheus_tsdb_head_series", "prometheus_tsdb_head_samples_appended_total",
		"prometheus_tsdb_storage_blocks_bytes", "prometheus_tsdb_wal_storage_size_bytes",
		"prometheus_tsdb_lowest_timestamp_seconds", "prometheus_tsdb_retention_limit_seconds",
		"prometheus_rule_group_last_duration_seconds",
		// Read by the built-in alerts (gpuscope.meta).
		"prometheus_rule_evaluation_failures_total",
		"prometheus_tsdb_checkpoint_creations_failed_total", "prometheus_tsdb_compactions_failed_total",
		"prometheus_tsdb_head_truncations_failed_total", "prometheus_tsdb_mmap_chunk_corruptions_total",
		"prometheus_tsdb_reloads_failures_total", "prometheus_tsdb_wal_corruptions_total",
		"prometheus_tsdb_wal_truncations_failed_total", "prometheus_tsdb_wal_writes_failed_total",
		// Documented in docs/metrics.md and docs/security.md: retention, storage and
		// ingestion health a user checks by hand.
		"prometheus_tsdb_head_chunks", "prometheus_tsdb_head_min_time_seconds", "prometheus_tsdb_head_max_time_seconds",
		"prometheus_tsdb_blocks_loaded", "prometheus_tsdb_compactions_total", "prometheus_tsdb_retention_limit_bytes",
		"prometheus_tsdb_time_retentions_total", "prometheus_tsdb_size_retentions_total",
		"prometheus_tsdb_out_of_order_samples_total",
		"prometheus_rule_group_iterations_missed_total",
		// Documented in docs/notifications.md: whether alerts reach
		// their receivers, and what the embedded Alertmanager holds.
		"alertmanager_notifications_total", "alertmanager_notifications_failed_total",
		"alertmanager_notification_requests_total", "alertmanager_notification_requests_failed_total",
		"alertmanager_alerts", "alertmanager_silences",
	},
}

// On reports whether the group with the key is turned on.
func (s Self) On(key string) bool {
	switch key {
	case "go_runtime":
		return s.GoRuntime
	case "query_engine":
		return s.QueryEngine
	case "tsdb_detail":
		return s.TSDBDetail
	case "scrape_detail":
		return s.ScrapeDetail
	case "rule_detail":
		return s.RuleDetail
	case "http":
		return s.HTTP
	case "alertmanager_detail":
		return s.AlertmanagerDetail
	}
	return false
}

// Keep reports whether the process's own family name is exposed.
func (s Self) Keep(name string) bool { return SelfSection.Keep(name, s.On) }

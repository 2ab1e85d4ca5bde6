// Package rules is where gpuscope alerts: Prometheus's rule manager
// running the built-in rule pack (pack/*.yml, embedded, with promtool-format
// unit tests in pack/tests) and the user's rule_files, and the notifier that
// sends what fires to Alertmanager. It is Prometheus's rules/ and
// notifier/ side by side, as a user's prometheus.yml sees them: rule_files
// and alerting.alertmanagers in one config.
package rules

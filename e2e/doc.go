// Package e2e builds the gpuscope binary and tests it from the outside, the
// way users and Grafana meet it: as a process with flags, a config file, a
// data directory and an HTTP API, beside the real runtimes (Docker, Podman,
// Slurm), Chromium and the neighbours it replaces or feeds (Prometheus,
// Alertmanager, promtool, VictoriaMetrics). What needs no separate process
// runs in process instead, in app/.
//
// Its tests are behind the e2e build tag, run on their own (scripts/test
// e2e, CONTRIBUTING.md): go test -tags e2e -p 1 ./e2e. The soak tests
// (the soak tag as well) run last: scripts/test soak.
package e2e

// Package accounting answers who used the machine's GPUs and CPUs, for
// how long, how well and at what energy cost: one run report per
// workload, computed with PromQL over gpuscope's own TSDB.
//
// Why no second store: every input is already a series. cAdvisor's give
// each cgroup's start, last sighting, CPU and memory; the GPU collector's
// per-container series say which cgroup held which GPU and its SM share;
// the recording rules of the built-in group gpuscope.accounting
// (rules/pack/accounting.yml) sample, once per evaluation interval, what
// each workload holds and its share of each GPU's power, so the report
// integrates them (value × interval, summed over the range) and reads a
// week of a cluster in a few queries. Alerts that named a workload are in
// the TSDB too, as the rule manager's ALERTS series.
//
// A run is one cgroup of one workload on one node: instance and id (the
// cgroup path, which holds the container id) plus the workload labels
// (see package workload). Keeping id apart keeps two containers that
// reuse a name apart.
//
// Reporter computes the report where the TSDB is, for /api/v1/workloads;
// Client asks a gpuscope for it over that API, and WriteTable, WriteCSV
// and WriteJSON print it, for `gpuscope workloads`.
package accounting

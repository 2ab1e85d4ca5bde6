#!/usr/bin/env bash
# Opens the built-in dashboards over a full day of a cluster's data through
# the real appliance and its HTTP API, as Grafana would: the figure
# bench/cluster.sh can give only after running for 24 hours.
#
#   bench/dayload.sh [nodes=64] [loads=5]
#
# The day is BenchmarkDashboardLoad's (bench/dashboards_test.go): NODES
# nodes of 8 GPUs and 10 containers each, every series the dashboards read
# at 15 s for 24 h, the built-in recording rules backfilled over it and
# compacted as a running appliance would have it. It is generated once
# (minutes; about 1 GB at 64 nodes) under $TMPDIR by running the
# benchmark's cheapest case, and reused after. A copy of it becomes the
# data directory of `gpuscope serve` (its own collectors off, the
# built-in rules on), and bench/dashload opens each dashboard LOADS times over the 24 h that end
# where the data ends (variables on All, Grafana's step, six requests in
# flight): as Grafana opens it (collapsed rows closed), the same with the
# answers read but not decoded (the appliance's part), and with every row
# opened. It prints each dashboard's median and maximum load.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bench/dayload.sh [nodes=64] [loads=5]" >&2
  echo "bench/dayload.sh: $1" >&2
  exit 2
}
posint() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
(($# <= 2)) || usage "at most two arguments, got $#"
nodes=${1:-64}
{ posint "$nodes" && ((nodes <= 512)); } || usage "nodes must be a whole number from 1 to 512, got '$nodes'"
loads=${2:-5}
posint "$loads" || usage "loads must be a whole number above 0, got '$loads'"

source bench/lib.sh
dashload_build

# The benchmark's cheapest case opens the day, generating it the first
# time, and names its directory: the name (and its data version) is the
# benchmark's to keep.
echo "$me: opening $nodes nodes' day (generated the first time: minutes)" >&2
GPUSCOPE_BENCH_NODES=$nodes CGO_CFLAGS="-Wno-deprecated-declarations" \
  go test -run '^$' -bench 'BenchmarkDashboardLoad/gpuscope-self/recorded' -benchtime 1x -timeout 90m -v ./bench/ >"$work/bench.out" 2>&1 ||
  { echo "$me: the benchmark failed:" >&2; tail -20 "$work/bench.out" >&2; exit 1; }
day=$(sed -n 's/.*day of data in \(.*\)$/\1/p' "$work/bench.out" | head -1)
[[ -f "$day/complete" ]] || { echo "$me: the benchmark named no finished day of data:" >&2; tail -20 "$work/bench.out" >&2; exit 1; }
end=$(cat "$day/complete")

# The copy is the appliance's to compact and extend; the day stays as it is.
cp -a "$day" "$work/data"
rm -f "$work/data/complete"
cat >"$work/serve.yml" <<EOF
global:
  scrape_interval: 15s
cadvisor: {enabled: false}
gpu: {backend: none}
rules: {builtin: {enabled: true}}
EOF
port=$(freeport)
"$bin" serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port \
  --storage.tsdb.path="$work/data" --node.name=appliance >"$work/serve.log" 2>&1 &
pid=$!; pids+=($pid)
until curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null; do
  kill -0 "$pid" 2>/dev/null || { echo "$me: the appliance stopped; the end of its log:" >&2; tail -5 "$work/serve.log" >&2; exit 1; }
  sleep 0.5
done
echo "nodes=$nodes day_end=$end load_average=$(cut -d' ' -f1-3 /proc/loadavg)"

# closed: as Grafana opens the dashboards, answers decoded as a Go client
# decodes them (on the same cores); undecoded: the same, answers read but
# not decoded, the appliance's part alone; open: every collapsed row open.
for mode in closed undecoded open; do
  flags=()
  [[ $mode == open ]] && flags=(-open-rows)
  [[ $mode == undecoded ]] && flags=(-decode=false)
  # Rounds one after the other: one dashboard load at a time.
  "$dashload" -url "http://127.0.0.1:$port" -range 24h -end "$end" -rounds "$loads" \
    "${flags[@]}" >"$work/dashload-$mode.out" ||
    { echo "$me: dashboard loads failed; the end of the appliance's log:" >&2; tail -5 "$work/serve.log" >&2; exit 1; }
  sed -n "s/^dashboard=/rows=$mode dashboard=/p" "$work/dashload-$mode.out"
done
echo "load_average_at_end=$(cut -d' ' -f1-3 /proc/loadavg)"

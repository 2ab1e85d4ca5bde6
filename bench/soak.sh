#!/usr/bin/env bash
# Soak: N `gpuscope agent`s (8 simulated GPUs each, as bench/cluster.sh) and
# one `gpuscope serve` scraping them through its nodes: section at 15 s,
# with the built-in rules and a dashboard's queries once a minute, for an
# hour. Every minute it samples the appliance's RSS (and its anonymous
# part), Go heap, goroutines (go_goroutines), open files
# (process_open_fds), head series and chunks, and the agents' summed RSS
# and largest fd count; at the end it prints the table and a verdict.
#
#   bench/soak.sh [minutes=60] [nodes=16] [block=10m] [retention=]
#
# block is the head's block range (serve's hidden
# --storage.tsdb.min-block-duration, as Prometheus's): the default 2h would
# compact the head only after 3 h, so the hour runs with 10m blocks and
# sees the whole cycle (head compaction, WAL truncation and checkpoint,
# block compaction) several times. Pass 2h and 240 minutes or more for the
# production setting.
#
# retention (--storage.tsdb.retention.time; empty: serve's default, 15d)
# bounds the number of blocks. Every open block keeps its index's symbol
# and postings-offset tables in memory and its files mapped, so until
# retention starts deleting blocks, RSS grows with the block count by
# design; a run that is to tell a leak from that needs a retention short
# enough to be reached (20m with 10m blocks: from about minute 35 the
# appliance holds 2-3 blocks and the head).
#
# Verdict, over the samples after the first head compaction (and, with a
# retention, after the first block deleted for it): the slope of RSS
# (least squares, MB/hour), and max-min of goroutines and open fds. FLAT
# when |RSS slope| is under 5 % of the mean RSS per hour and goroutines and
# fds vary by no more than 10 (scrapes and queries in flight come and go;
# a leak grows without bound).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-60}
nodes=${2:-16}
block=${3:-10m}
retention=${4:-}

source bench/lib.sh

# The simulated GPUs' containers are real cgroups of the soak's own, and
# every cAdvisor (the agents' and the appliance's) watches only those: on a
# shared machine other people's cgroups come and go (tests, builds), and
# each new one would be 17 cAdvisors' new series, growth that is not
# gpuscope's. Without root (no cgroups to make) every cgroup is watched
# and the head series column shows the churn.
soak=gpuscope-soak-$$
allow="[]"
if [[ $EUID -eq 0 ]]; then
  for c in train-a train-b leaky input membound hot; do
    for ctl in cpu cpuacct memory pids blkio; do
      [[ -d /sys/fs/cgroup/$ctl ]] && mkdir -p "/sys/fs/cgroup/$ctl/$soak/$c" 2>/dev/null || true
    done
  done
  allow="[/$soak]"
  on_exit+=('for ctl in cpu cpuacct memory pids blkio; do rmdir /sys/fs/cgroup/$ctl/$soak/* /sys/fs/cgroup/$ctl/$soak 2>/dev/null; done')
fi

cat >"$work/agent.yml" <<EOF
global:
  scrape_interval: 15s
cadvisor:
  raw_cgroup_prefix_allowlist: $allow
gpu:
  backend: sim
  sim:
    count: 8
    time_scale: 30
    gpus:
      - {scenario: training, container: /$soak/train-a}
      - {scenario: training, container: /$soak/train-a}
      - {scenario: training, container: /$soak/train-b}
      - {scenario: leak, container: /$soak/leaky}
      - {scenario: input-bound, container: /$soak/input}
      - {scenario: memory-bound, container: /$soak/membound}
      - {scenario: thermal, container: /$soak/hot}
      - {scenario: idle}
EOF

agent_pids=()
static=""
for i in $(seq -w 1 "$nodes"); do
  port=$(freeport)
  "$bin" agent --config.file="$work/agent.yml" --web.listen-address=127.0.0.1:$port \
    --node.name=node-$i >"$work/agent-$i.log" 2>&1 &
  pids+=($!); agent_pids+=($!)
  ready "$port"
  static+="    - {address: 127.0.0.1:$port, name: node-$i}"$'\n'
done

cat >"$work/serve.yml" <<EOF
global:
  scrape_interval: 15s
cadvisor:
  raw_cgroup_prefix_allowlist: $allow
nodes:
  static:
$static
EOF
port=$(freeport)
"$bin" serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port \
  --storage.tsdb.path="$work/data" --storage.tsdb.min-block-duration="$block" \
  ${retention:+--storage.tsdb.retention.time="$retention"} \
  --node.name=appliance >"$work/serve.log" 2>&1 &
pid=$!; pids+=($pid)
ready "$port"

# value QUERY: the first result's value of an instant query ("nan" if none).
value() {
  curl -sS "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "nan")' 2>/dev/null || echo nan
}
# dashboard: range queries over the last hour at a 1-minute step, as an
# open Grafana dashboard refreshing once a minute.
dashboard() {
  local now; now=$(date +%s)
  for q in 'avg by (instance) (DCGM_FI_DEV_GPU_UTIL)' \
           'sum by (instance) (DCGM_FI_DEV_FB_USED)' \
           'sum by (instance) (rate(container_cpu_usage_seconds_total[5m]))'; do
    curl -sS -o /dev/null "http://127.0.0.1:$port/api/v1/query_range" --data-urlencode "query=$q" \
      --data-urlencode "start=$((now - 3600))" --data-urlencode "end=$now" --data-urlencode step=60 || true
  done
}
kb() { awk -v k="$2:" '$1==k{print $2}' "/proc/$1/status"; }

echo "soak: $nodes nodes at 15s, $minutes min, block range $block, retention ${retention:-default}, appliance pid $pid, work $work" >&2
printf '%-4s %8s %8s %8s %6s %5s %8s %8s %5s %10s %6s %6s %4s\n' min rss_mb anon_mb heap_mb gorout fds series chunks comp agents_mb a_fds blocks ret >"$work/table"
t0=$(date +%s)
for m in $(seq 1 "$minutes"); do
  wait_s=$((t0 + m * 60 - $(date +%s)))
  ((wait_s > 0)) && sleep "$wait_s"
  dashboard
  arss=0; afds=0
  for a in "${agent_pids[@]}"; do
    arss=$((arss + $(kb "$a" VmRSS)))
    n=$(ls "/proc/$a/fd" | wc -l); ((n > afds)) && afds=$n
  done
  printf '%-4d %8.1f %8.1f %8.1f %6s %5s %8s %8s %5s %10.1f %6d %6s %4s\n' "$m" \
    "$(awk -v k="$(kb "$pid" VmRSS)" 'BEGIN{print k/1024}')" \
    "$(awk -v k="$(kb "$pid" RssAnon)" 'BEGIN{print k/1024}')" \
    "$(awk -v b="$(value 'go_memstats_heap_inuse_bytes{job="gpuscope"}')" 'BEGIN{print b/1048576}')" \
    "$(value 'go_goroutines{job="gpuscope"}')" "$(value 'process_open_fds{job="gpuscope"}')" \
    "$(value 'prometheus_tsdb_head_series')" "$(value 'prometheus_tsdb_head_chunks')" \
    "$(value 'prometheus_tsdb_compactions_total')" \
    "$(awk -v k="$arss" 'BEGIN{print k/1024}')" "$afds" \
    "$(value 'prometheus_tsdb_blocks_loaded')" "$(value 'prometheus_tsdb_time_retentions_total')" | tee -a "$work/table" >&2
done

echo
cat "$work/table"
echo
awk -v nodes="$nodes" -v minutes="$minutes" -v block="$block" -v retention="$retention" 'NR>1 && $9>0 && (retention=="" || $13>0) {
    n++; x=$1; y=$2; sx+=x; sy+=y; sxx+=x*x; sxy+=x*y
    if (n==1) { first=$1; gmin=gmax=$5; fmin=fmax=$6; amin=amax=$10; smin=smax=$7; bmin=bmax=$12 }
    if ($12<bmin) bmin=$12; if ($12>bmax) bmax=$12
    if ($7<smin) smin=$7; if ($7>smax) smax=$7
    if ($5<gmin) gmin=$5; if ($5>gmax) gmax=$5
    if ($6<fmin) fmin=$6; if ($6>fmax) fmax=$6
    if ($10<amin) amin=$10; if ($10>amax) amax=$10
    asx+=x; asy+=$3; asxy+=x*$3
  }
  END {
    if (n < 3) { print "verdict: NO VERDICT: fewer than 3 samples after the first head compaction" (retention=="" ? "" : " and retention deletion"); exit 1 }
    d=n*sxx-sx*sx
    slope=60*(n*sxy-sx*sy)/d; mean=sy/n
    aslope=60*(n*asxy-asx*asy)/d
    printf "after the first head compaction%s (minute %d on, %d samples): RSS mean %.1f MB, slope %+.2f MB/h (%+.1f%%/h); anon slope %+.2f MB/h\n", retention=="" ? "" : " and retention deletion", first, n, mean, slope, 100*slope/mean, aslope
    printf "head series %d..%d; blocks %d..%d\n", smin, smax, bmin, bmax
    printf "goroutines %d..%d (max-min %d); open fds %d..%d (max-min %d); agents total RSS %.0f..%.0f MB\n", gmin, gmax, gmax-gmin, fmin, fmax, fmax-fmin, amin, amax
    flat = (slope < 0 ? -slope : slope) < 0.05*mean && gmax-gmin <= 10 && fmax-fmin <= 10
    printf "verdict: %s (%d nodes, %d min, block range %s, retention %s)\n", flat ? "FLAT" : "GROWTH", nodes, minutes, block, retention=="" ? "default" : retention
    exit flat ? 0 : 1
  }' "$work/table"

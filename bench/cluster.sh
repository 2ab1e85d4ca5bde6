#!/usr/bin/env bash
# A small cluster on one machine: N `gpuscope agent`s (8 simulated GPUs
# each, with processes in containers) and one `gpuscope serve` scraping them
# through its nodes: section at the default 15 s.
#
#   bench/cluster.sh [minutes=10] [nodes=16]
#
# After a warm-up (series created, cAdvisor's first housekeeping done) it
# measures over the window: the appliance's CPU (utime+stime from
# /proc/<pid>/stat), RSS at the end and peak (VmHWM), its anonymous part
# (RssAnon: the rest is the mapped 70 MB binary, page cache the kernel can
# drop), Go heap in use, and prometheus_tsdb_head_series, giving RSS and
# heap per active series, in total and over a node-less appliance; and the
# same CPU/RSS figures for the agents (median, min and max over the N).
#
# Every agent runs its own in-process cAdvisor on this one host, so all of
# them see the same cgroups: right for load (each does a real node's
# work), but their container series are copies of each other's.
# The appliance runs with its own collectors off (--gpu.backend=none,
# cadvisor disabled) so its figures are the cost of the nodes alone.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
nodes=${2:-16}

source bench/lib.sh

cat >"$work/agent.yml" <<'EOF'
global:
  scrape_interval: 15s
gpu:
  backend: sim
  sim:
    count: 8
    time_scale: 30
    gpus:
      - {scenario: training, container: /bench/train-a}
      - {scenario: training, container: /bench/train-a}
      - {scenario: training, container: /bench/train-b}
      - {scenario: leak, container: /bench/leaky}
      - {scenario: input-bound, container: /bench/input}
      - {scenario: memory-bound, container: /bench/membound}
      - {scenario: thermal, container: /bench/hot}
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
cadvisor: {enabled: false}
gpu: {backend: none}
nodes:
  static:
$static
EOF
port=$(freeport)
"$bin" serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port \
  --storage.tsdb.path="$work/data" --node.name=appliance >"$work/serve.log" 2>&1 &
pid=$!; pids+=($pid)
ready "$port"

# A second appliance without nodes gives the fixed cost (Go runtime, TSDB,
# engine, its own ~600 series) to take off for the marginal cost per series.
printf 'global:\n  scrape_interval: 15s\ncadvisor: {enabled: false}\ngpu: {backend: none}\n' >"$work/base.yml"
bport=$(freeport)
"$bin" serve --config.file="$work/base.yml" --web.listen-address=127.0.0.1:$bport \
  --storage.tsdb.path="$work/base" --node.name=baseline >"$work/base.log" 2>&1 &
bpid=$!; pids+=($bpid)
ready "$bport"

query() {
  local out
  for _ in 1 2 3; do
    out=$(curl -sS "http://127.0.0.1:${2:-$port}/api/v1/query" --data-urlencode "query=$1") && break
    sleep 1
  done
  if [[ "$out" != *'"status":"success"'* ]]; then
    echo "query $1 failed: $out" >&2
    tail -5 "$work/serve.log" >&2
    echo nan
    return
  fi
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["data"]["result"]; print(r[0]["value"][1] if r else "0")' "$out"
}

# Warm-up: two scrapes of every node create the series.
sleep 45
up=$(query 'sum(up{job=~"node-.*"})')
echo "nodes=$nodes targets_up=$up (want $((3 * nodes)))"

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
declare -A c0
for p in "$pid" "${agent_pids[@]}"; do c0[$p]=$(cpu "$p"); done
t0=$(date +%s.%N)
sleep $((minutes * 60))
t1=$(date +%s.%N)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')

kb() { awk -v k="$2:" '$1==k{print $2}' "/proc/$1/status"; }
series=$(query 'prometheus_tsdb_head_series')
heap=$(query 'go_memstats_heap_inuse_bytes{job="gpuscope"}')
samples=$(query 'sum(scrape_samples_scraped{job=~"node-.*"})')
recorded=$(query 'count({__name__=~".+:.+"})')
bseries=$(query 'prometheus_tsdb_head_series' "$bport")
bheap=$(query 'go_memstats_heap_inuse_bytes{job="gpuscope"}' "$bport")
awk -v c0="${c0[$pid]}" -v c1="$(cpu "$pid")" -v hz="$ticks" -v wall="$wall" \
  -v rss="$(kb "$pid" VmRSS)" -v hwm="$(kb "$pid" VmHWM)" -v anon="$(kb "$pid" RssAnon)" -v s="$series" -v heap="$heap" -v smp="$samples" -v rec="$recorded" \
  -v brss="$(kb "$bpid" VmRSS)" -v bs="$bseries" -v bheap="$bheap" 'BEGIN{
  cpu=(c1-c0)/hz
  printf "appliance: window=%.0fs cpu=%.1fs core%%=%.2f rss=%.0fMB (anon %.0fMB) peak_rss=%.0fMB heap_inuse=%.0fMB head_series=%d samples_per_scrape_round=%d recorded_series=%d\n",
    wall, cpu, 100*cpu/wall, rss/1024, anon/1024, hwm/1024, heap/1048576, s, smp, rec
  printf "per active series: rss=%.2fKB heap=%.2fKB; marginal over a node-less appliance (rss=%.0fMB, %d series): rss=%.2fKB heap=%.2fKB\n",
    rss*1024/s/1000, heap/s/1000, brss/1024, bs, (rss-brss)*1024/(s-bs)/1000, (heap-bheap)/(s-bs)/1000 }'

for p in "${agent_pids[@]}"; do
  echo "$(( $(cpu "$p") - ${c0[$p]} )) $(kb "$p" VmRSS) $(kb "$p" RssAnon)"
done >"$work/agents"
read -r cm cmin cmax < <(cut -d' ' -f1 "$work/agents" | median)
read -r rm rmin rmax < <(cut -d' ' -f2 "$work/agents" | median)
read -r am _ _ < <(cut -d' ' -f3 "$work/agents" | median)
awk -v n="$nodes" -v hz="$ticks" -v wall="$wall" -v cm="$cm" -v cmin="$cmin" -v cmax="$cmax" -v rm="$rm" -v rmin="$rmin" -v rmax="$rmax" -v am="$am" 'BEGIN{
  printf "agent (median of %d): cpu=%.1fs core%%=%.2f (min %.2f, max %.2f) rss=%.0fMB (min %.0f, max %.0f; anon %.0fMB)\n",
    n, cm/hz, 100*cm/hz/wall, 100*cmin/hz/wall, 100*cmax/hz/wall, rm/1024, rmin/1024, rmax/1024, am/1024 }'

#!/usr/bin/env bash
# A small cluster on one machine: N `gpuscope agent`s (8 simulated GPUs
# each, with processes in containers) and one `gpuscope serve` scraping them
# through its nodes: section at the default 15 s, with the built-in rules on
# and the four built-in dashboards loaded every minute.
#
#   bench/cluster.sh [minutes=10] [nodes=16]
#   NODES_STEPS="64 96 128" bench/cluster.sh [minutes=10]
#
# After a warm-up (series created, cAdvisor's first housekeeping done) it
# measures over the window: the appliance's CPU (utime+stime from
# /proc/<pid>/stat), RSS at the end and peak (VmHWM), its anonymous part
# (RssAnon: the rest is the mapped 70 MB binary, page cache the kernel can
# drop), Go heap in use, and prometheus_tsdb_head_series, giving RSS and
# heap per active series, in total and over a node-less appliance; and the
# same CPU/RSS figures for the agents (median, min and max over the N).
#
# During the window bench/dashload opens each of the appliance's four
# dashboards once a minute as Grafana would (variables on All, every
# panel's query over the last DASH_RANGE=24h at Grafana's step, six in
# flight) and the script prints each dashboard's median and maximum load.
# At the end it reads every target's `up` samples over the window from the
# appliance and counts the missed scrapes (a gap of more than one interval,
# a missing first or last scrape, or up == 0), and gives the slowest scrape
# and the longest interval between two scrapes.
# The load average is printed at the start and at the end of the window.
#
# With NODES_STEPS the whole measurement runs once per node count, in the
# order given, each on fresh processes, and stops at the first count where
# the appliance breaks: a scrape missed or a dashboard load over
# BREAK_MS=1000 ms. The last line says where.
#
# Every agent runs its own in-process cAdvisor on this one host, so all of
# them see the same cgroups: right for load (each does a real node's
# work), but their container series are copies of each other's.
# The appliance runs with its own collectors off (--gpu.backend=none,
# cadvisor disabled) so its figures are the cost of the nodes alone; its
# built-in rules are on (checked through /api/v1/rules). A fresh
# appliance has only the window's data: a 24 h range reads what exists,
# so loads reach their full cost only in a run of 24 h or more.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bench/cluster.sh [minutes=10] [nodes=16]" >&2
  echo "       NODES_STEPS=\"64 96 128\" bench/cluster.sh [minutes=10]" >&2
  echo "bench/cluster.sh: $1" >&2
  exit 2
}
posint() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
(($# <= 2)) || usage "at most two arguments, got $#"
minutes=${1:-10}
posint "$minutes" || usage "minutes must be a whole number above 0, got '$minutes'"
break_ms=${BREAK_MS:-1000}
posint "$break_ms" || usage "BREAK_MS must be a whole number of milliseconds above 0, got '$break_ms'"
dash_range=${DASH_RANGE:-24h}
[[ "$dash_range" =~ ^[1-9][0-9]*(s|m|h)$ ]] || usage "DASH_RANGE must be like 24h, 90m or 600s, got '$dash_range'"
steps=${NODES_STEPS:-}
if [[ -n "$steps" ]]; then
  (($# <= 1)) || usage "give the node counts either in NODES_STEPS or as the second argument, not both"
  for n in $steps; do
    { posint "$n" && ((n <= 512)); } || usage "NODES_STEPS: each count must be a whole number from 1 to 512, got '$n'"
  done
else
  nodes=${2:-16}
  { posint "$nodes" && ((nodes <= 512)); } || usage "nodes must be a whole number from 1 to 512, got '$nodes'"
fi

source bench/lib.sh
dashload_build

if [[ -n "$steps" ]]; then
  # One child per count, each with its own processes and work directory
  # (cleaned up by its own exit trap), sharing the binaries built here.
  for n in $steps; do
    echo "=== nodes=$n"
    NODES_STEPS='' GPUSCOPE_BIN="$bin" DASHLOAD_BIN="$dashload" bench/cluster.sh "$minutes" "$n" | tee "$work/step-$n"
    if verdict=$(grep '^verdict: ' "$work/step-$n") && [[ "$verdict" == *broken=yes* ]]; then
      echo "breaks at nodes=$n: ${verdict#*reason=}"
      exit 0
    fi
    [[ -n "${verdict:-}" ]] || { echo "nodes=$n: the run gave no verdict" >&2; exit 1; }
  done
  echo "held at every step: $steps"
  exit 0
fi

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

# started PID PORT LOG: wait until the process answers /-/ready; fail with
# its log's end if it exits first or is not ready within a minute (lib.sh's
# ready would wait for ever).
started() {
  local i
  for ((i = 0; i < 300; i++)); do
    curl -sf "http://127.0.0.1:$2/-/ready" >/dev/null && return
    kill -0 "$1" 2>/dev/null || break
    sleep 0.2
  done
  echo "process $1 on port $2 did not become ready; the end of $3:" >&2
  tail -5 "$3" >&2
  exit 1
}

# Each agent's cAdvisor holds two inotify instances, and the kernel allows
# fs.inotify.max_user_instances (often 128) per user: past it an agent
# stops at start ("inotify_init: too many open files").
limit=$(cat /proc/sys/fs/inotify/max_user_instances)
inuse=$( (find /proc/[0-9]*/fd -user "$(id -u)" -lname 'anon_inode:inotify' 2>/dev/null || true) | wc -l)
if ((inuse + 2 * nodes > limit)); then
  echo "bench/cluster.sh: $nodes agents need $((2 * nodes)) inotify instances; $inuse of this user's $limit (fs.inotify.max_user_instances) are in use." >&2
  echo "Raise the limit (sysctl -w fs.inotify.max_user_instances=$(((inuse + 2 * nodes + 127) / 128 * 128 + 128))) or run fewer nodes." >&2
  exit 1
fi

agent_pids=()
static=""
for i in $(seq -w 1 "$nodes"); do
  port=$(freeport)
  "$bin" agent --config.file="$work/agent.yml" --web.listen-address=127.0.0.1:$port \
    --node.name=node-$i >"$work/agent-$i.log" 2>&1 &
  pids+=($!); agent_pids+=($!)
  started $! "$port" "$work/agent-$i.log"
  static+="    - {address: 127.0.0.1:$port, name: node-$i}"$'\n'
done

cat >"$work/serve.yml" <<EOF
global:
  scrape_interval: 15s
cadvisor: {enabled: false}
gpu: {backend: none}
rules: {builtin: {enabled: true}}
nodes:
  static:
$static
EOF
port=$(freeport)
"$bin" serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port \
  --storage.tsdb.path="$work/data" --node.name=appliance >"$work/serve.log" 2>&1 &
pid=$!; pids+=($pid)
started "$pid" "$port" "$work/serve.log"

# A second appliance without nodes gives the fixed cost (Go runtime, TSDB,
# engine, its own ~600 series) to take off for the marginal cost per series.
printf 'global:\n  scrape_interval: 15s\ncadvisor: {enabled: false}\ngpu: {backend: none}\n' >"$work/base.yml"
bport=$(freeport)
"$bin" serve --config.file="$work/base.yml" --web.listen-address=127.0.0.1:$bport \
  --storage.tsdb.path="$work/base" --node.name=baseline >"$work/base.log" 2>&1 &
bpid=$!; pids+=($bpid)
started "$bpid" "$bport" "$work/base.log"

# query EXPR [PORT] [TIME]: the first value of an instant query, 0 if empty.
query() {
  local out
  for _ in 1 2 3; do
    out=$(curl -sS "http://127.0.0.1:${2:-$port}/api/v1/query" --data-urlencode "query=$1" ${3:+--data-urlencode "time=$3"}) && break
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
read -r groups rules < <(curl -sS "http://127.0.0.1:$port/api/v1/rules" | python3 -c '
import json, sys
g = json.load(sys.stdin)["data"]["groups"]
print(len(g), sum(len(x["rules"]) for x in g))')
echo "rules: groups=$groups rules=$rules"
if ((groups == 0)); then
  echo "the appliance evaluates no rules: the built-in pack should be on" >&2
  exit 1
fi

# alive: every agent and the appliance still run; else fail with the log.
alive() {
  local i=0 p
  for p in "${agent_pids[@]}"; do
    i=$((i + 1))
    if ! kill -0 "$p" 2>/dev/null; then
      echo "agent node-$(printf '%0*d' ${#nodes} "$i") (pid $p) stopped $1; the end of its log:" >&2
      tail -3 "$work/agent-$(printf '%0*d' ${#nodes} "$i").log" >&2
      exit 1
    fi
  done
  kill -0 "$pid" 2>/dev/null || { echo "the appliance stopped $1; the end of its log:" >&2; tail -5 "$work/serve.log" >&2; exit 1; }
}
alive "during the warm-up"

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
declare -A c0
for p in "$pid" "${agent_pids[@]}"; do c0[$p]=$(cpu "$p"); done
t0=$(date +%s.%N)
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
# One round of the four dashboards a minute, the last a minute before the
# window's end.
"$dashload" -url "http://127.0.0.1:$port" -range "$dash_range" -every 1m -for $((minutes * 60 - 30))s \
  >"$work/dashload.out" 2>"$work/dashload.err" &
dpid=$!; pids+=("$dpid")
sleep $((minutes * 60))
t1=$(date +%s.%N)
alive "during the window"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
dash_ok=yes
wait "$dpid" || dash_ok=no
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

# Dashboard loads: median and maximum per dashboard over the window.
if [[ $dash_ok == yes ]]; then
  sed -n 's/^dashboard=/dashboard: /p' "$work/dashload.out"
else
  echo "dashboard loads failed:" >&2
  tail -5 "$work/dashload.err" >&2
fi
dash_max=$(awk -F'max_ms=' '/^dashboard=/{if ($2+0 > m) m = $2+0} END{print m+0}' "$work/dashload.out")

# Missed scrapes: every target's up samples over the window, read at its
# end once the last scrapes are in. A target scraped every 15 s has one
# sample in each 15 s of the window; a gap of k intervals is k-1 missed
# scrapes, a first sample more than an interval after the start or a last
# one more than an interval before the end is one more, and so is up == 0.
sleep 20
end=$(awk -v t="$t1" 'BEGIN{printf "%.3f", t}')
W=$((minutes * 60))
curl -sS "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=up[${W}s]" --data-urlencode "time=$end" >"$work/up.json"
read -r targets missed down maxgap worst < <(python3 - "$work/up.json" "$end" "$W" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))["data"]["result"]
end, w, iv, tol = float(sys.argv[2]), float(sys.argv[3]), 15.0, 0.5
missed = down = 0
maxgap, worst = 0.0, "-"
for s in r:
    ts = [float(t) for t, _ in s["values"]]
    down += sum(1 for _, v in s["values"] if float(v) == 0)
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    m = sum(max(0, round(g / iv) - 1) for g in gaps)
    m += max(0, math.ceil((ts[0] - (end - w) - tol) / iv) - 1)
    m += max(0, math.floor((end - ts[-1] - tol) / iv))
    missed += m
    for g in gaps:
        if g > maxgap:
            maxgap, worst = g, s["metric"].get("job", "") + "/" + s["metric"].get("instance", "")
print(len(r), missed, down, maxgap, worst)
PY
)
slowest=$(query 'max(max_over_time(scrape_duration_seconds['"$W"'s]))' "$port" "$end")
slowest_at=$(curl -sS "http://127.0.0.1:$port/api/v1/query" --data-urlencode 'query=topk(1, max_over_time(scrape_duration_seconds['"$W"'s]))' --data-urlencode "time=$end" |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["metric"].get("job","")+"/"+r[0]["metric"].get("instance","") if r else "-")')
p99=$(query 'max(prometheus_target_interval_length_seconds{quantile="0.99"})' "$port" "$end")
# prometheus_target_* are off by default (self_metrics.families.scrape_detail):
# no series reads as 0 here.
[[ $p99 =~ ^[0-9.e+-]+$ && $p99 != 0 ]] && p99=$(printf '%.3fs' "$p99") || p99="n/a (self_metrics.families.scrape_detail off)"
awk -v t="$targets" -v want="$((3 * nodes + 1))" -v m="$missed" -v d="$down" -v g="$maxgap" -v gw="$worst" -v sl="$slowest" -v sw="$slowest_at" -v p99="$p99" 'BEGIN{
  printf "scrapes: targets=%d (want %d) missed=%d of which up==0 %d; longest interval %.2fs (%s); slowest scrape %.3fs (%s); interval p99 (max over intervals) %s\n",
    t, want, m + d, d, g, gw, sl, sw, p99 }'

# Goals of issue 18 and the verdict the NODES_STEPS mode reads.
cpu_pct=$(awk -v c0="${c0[$pid]}" -v c1="$(cpu "$pid")" -v hz="$ticks" -v wall="$wall" 'BEGIN{printf "%.2f", 100*(c1-c0)/hz/wall}')
rss_kb=$(kb "$pid" VmHWM)
goal() { if "$@"; then echo ok; else echo MISSED; fi; }
echo "goals: cpu<25% $(goal awk -v c="$cpu_pct" 'BEGIN{exit !(c < 25)}')" \
  "peak_rss<1GiB $(goal test "$rss_kb" -lt 1048576)" \
  "no_missed_scrape $(goal test $((missed + down)) -eq 0 -a "$targets" -eq $((3 * nodes + 1)))" \
  "dashboards<300ms $(goal test "$dash_ok" = yes -a "$dash_max" -lt 300)"
reason=()
((missed + down == 0)) || reason+=("$((missed + down)) scrapes missed")
((targets == 3 * nodes + 1)) || reason+=("$targets targets of $((3 * nodes + 1))")
[[ $dash_ok == yes ]] || reason+=("a dashboard load failed")
((dash_max <= break_ms)) || reason+=("a dashboard load took ${dash_max} ms")
if ((${#reason[@]})); then
  echo "verdict: nodes=$nodes broken=yes reason=$(IFS=';'; echo "${reason[*]}")"
else
  echo "verdict: nodes=$nodes broken=no reason=-"
fi

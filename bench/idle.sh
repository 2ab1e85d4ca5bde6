#!/usr/bin/env bash
# Idle cost of `gpuscope serve` with its built-in collection at the default
# 15 s: CPU seconds used over a window after warm-up, and peak RSS.
#
#   bench/idle.sh [seconds=300] [extra serve flags...]
#
# Prints one line: window, CPU seconds, % of one core, peak RSS (VmHWM),
# RSS and its anonymous part at the end, head series, and samples
# appended per second over the window. Run it a few times and quote the median: the machines are
# shared and noisy.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-300}
shift || true

source bench/lib.sh
port=$(freeport)
"$bin" serve --web.listen-address=127.0.0.1:$port --storage.tsdb.path="$work/data" "$@" >"$work/log" 2>&1 &
pid=$!; pids+=($pid)
ready "$port"

# Warm-up: the first scrapes create every series and cAdvisor's first
# housekeeping reads every cgroup; idle cost is what comes after.
sleep 30

ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
# One value of an instant query, "?" when it has none.
value() { curl -s "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "?")'; }
appended() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^prometheus_tsdb_head_samples_appended_total/{s+=$2} END{print s+0}'; }
c0=$(cpu); t0=$(date +%s.%N); a0=$(appended)
sleep "$window"
c1=$(cpu); t1=$(date +%s.%N); a1=$(appended)
hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
anon=$(awk '/RssAnon/{print $2}' "/proc/$pid/status")
series=$(value prometheus_tsdb_head_series)
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" -v hwm="$hwm" -v rss="$rss" -v anon="$anon" -v s="$series" -v a0="$a0" -v a1="$a1" 'BEGIN{
  cpu=(c1-c0)/hz; wall=t1-t0;
  printf "window=%.0fs cpu=%.2fs core%%=%.3f peak_rss=%.1fMB rss=%.1fMB rss_anon=%.1fMB head_series=%s samples_per_s=%.1f\n", wall, cpu, 100*cpu/wall, hwm/1024, rss/1024, anon/1024, s, (a1-a0)/wall }'

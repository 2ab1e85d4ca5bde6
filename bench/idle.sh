#!/usr/bin/env bash
# Idle cost of `gpuscope serve` with its built-in collection at the default
# 15 s: CPU seconds used over a window after warm-up, and peak RSS.
#
#   bench/idle.sh [seconds=300] [extra serve flags...]
#
# Prints one line: window, CPU seconds, % of one core, peak RSS (VmHWM) and
# RSS at the end. Run it a few times and quote the median: the machines are
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
c0=$(cpu); t0=$(date +%s.%N)
sleep "$window"
c1=$(cpu); t1=$(date +%s.%N)
hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
series=$(curl -s "http://127.0.0.1:$port/api/v1/query?query=prometheus_tsdb_head_series" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "?")')
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" -v hwm="$hwm" -v rss="$rss" -v s="$series" 'BEGIN{
  cpu=(c1-c0)/hz; wall=t1-t0;
  printf "window=%.0fs cpu=%.2fs core%%=%.3f peak_rss=%.1fMB rss=%.1fMB head_series=%s\n", wall, cpu, 100*cpu/wall, hwm/1024, rss/1024, s }'

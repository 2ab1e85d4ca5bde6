#!/usr/bin/env bash
# Time from starting `gpuscope serve` on an empty data directory to its
# /-/ready answering 200, and to the first successful scrape of each
# built-in job (cadvisor, gpu, gpuscope).
#
#   bench/startup.sh [runs=5] [extra serve flags...]
#
# One line per run and the medians. The ready time is what a service
# manager, a container health check or a test harness waits for; the
# scrape times show whether a collector still warming up holds data back.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true

source bench/lib.sh
now() { date +%s.%N; }
# targets_up PORT: the jobs whose targets are up, sorted.
targets_up() {
  curl -sS "http://127.0.0.1:$1/api/v1/targets" | python3 -c '
import json, sys
up = {t["labels"]["job"] for t in json.load(sys.stdin)["data"]["activeTargets"] if t["health"] == "up"}
print(" ".join(sorted(up)))'
}

printf '%-4s %8s %10s\n' run ready_s all_up_s >"$work/table"
for r in $(seq 1 "$runs"); do
  port=$(freeport)
  t0=$(now)
  "$bin" serve --web.listen-address=127.0.0.1:$port --storage.tsdb.path="$work/data-$r" "$@" >"$work/log-$r" 2>&1 &
  pid=$!; pids+=($pid)
  until curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null; do sleep 0.02; done
  t1=$(now)
  # The built-in jobs' first scrapes come at an offset within the 15 s
  # interval (Prometheus spreads targets by a hash), so this column is
  # bounded by the interval, not by start-up work.
  until [[ "$(targets_up "$port")" == "cadvisor gpu gpuscope" ]]; do sleep 0.1; done
  t2=$(now)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk -v r="$r" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN{printf "%-4d %8.2f %10.2f\n", r, b-a, c-a}' | tee -a "$work/table" >&2
done
echo
cat "$work/table"
read -r ready_m _ _ < <(tail -n +2 "$work/table" | awk '{print $2}' | median)
read -r up_m _ _ < <(tail -n +2 "$work/table" | awk '{print $3}' | median)
printf 'median ready: %.2f s\nmedian all built-in jobs up: %.2f s\n' "$ready_m" "$up_m"

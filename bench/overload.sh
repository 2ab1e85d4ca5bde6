#!/usr/bin/env bash
# Overload: one `gpuscope serve` with 8 simulated GPUs and cAdvisor scraped
# every second, and waves of C concurrent range queries over the last 24 h
# (10 s step; rates and averages over the GPU and cAdvisor series, as
# Grafana panels) for S seconds. Run as root, the appliance starts inside a
# memory cgroup limited to MEMORY_LIMIT, so that GOMEMLIMIT is derived from
# it; elsewhere it runs without one.
#
#   bench/overload.sh [seconds=120] [concurrency=50]
#
# Environment: GPUSCOPE_BIN (else built here), MEMORY_LIMIT (bytes, default
# 512 MiB; 0 = no cgroup), MAX_SAMPLES (--query.max-samples, default 5000)
# and QUERY_TIMEOUT (--query.timeout, default 2s): the limits are low so
# that the storm meets both; other serve flags in SERVE_ARGS (e.g.
# --query.max-concurrency=20).
#
# Report: queries by status (200, 422 execution, 503 timeout, other),
# latency p50/p90/max; scrapes expected (one a second per built-in job over
# the storm's window) against the samples of `up` and of each GPU's
# DCGM_FI_DEV_GPU_UTIL stored, and failed scrapes (up = 0); the longest
# scrape; peak RSS against GOMEMLIMIT and the cgroup's peak and OOM kills.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-120}
concurrency=${2:-50}
memory_limit=${MEMORY_LIMIT:-$((512 << 20))}
max_samples=${MAX_SAMPLES:-5000}
query_timeout=${QUERY_TIMEOUT:-2s}

source bench/lib.sh
cg=""
on_exit+=('[[ -z "$cg" ]] || rmdir "$cg" 2>/dev/null')

# A memory cgroup: below this shell's own (cgroup v1) or at the root of the
# unified hierarchy (v2).
limit_file=""
if ((memory_limit > 0)); then
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    cg=/sys/fs/cgroup/gpuscope-bench-overload-$$; limit_file=memory.max
  elif [[ -d /sys/fs/cgroup/memory ]]; then
    own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
    parent=/sys/fs/cgroup/memory$own; [[ -d "$parent" ]] || parent=/sys/fs/cgroup/memory
    cg=$parent/gpuscope-bench-overload-$$; limit_file=memory.limit_in_bytes
  fi
  if [[ -n "$cg" ]] && ! { mkdir "$cg" 2>/dev/null && echo "$memory_limit" >"$cg/$limit_file"; }; then
    echo "overload: cannot create memory cgroup $cg; running without a memory limit" >&2
    rmdir "$cg" 2>/dev/null || true; cg=""
  fi
fi

cat >"$work/serve.yml" <<'EOF'
global:
  scrape_interval: 1s
gpu:
  backend: sim
EOF
port=$(freeport)
args=(serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port
  --storage.tsdb.path="$work/data" --node.name=appliance
  --query.max-samples="$max_samples" --query.timeout="$query_timeout" ${SERVE_ARGS:-})
if [[ -n "$cg" ]]; then
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$bin" "${args[@]}" >"$work/serve.log" 2>&1 &
else
  "$bin" "${args[@]}" >"$work/serve.log" 2>&1 &
fi
pid=$!; pids+=($pid)
ready "$port"
url=http://127.0.0.1:$port

value() {
  curl -sS "$url/api/v1/query" --data-urlencode "query=$1" ${2:+--data-urlencode "time=$2"} |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(" ".join(x["metric"].get("job", x["metric"].get("gpu", "")) + "=" + x["value"][1] for x in r) if r else "none")'
}
gomemlimit=$(curl -sS "$url/api/v1/status/runtimeinfo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["GOMEMLIMIT"])')
concurrency_flag=$(curl -sS "$url/api/v1/status/flags" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["query.max-concurrency"])')
echo "overload: ${seconds}s of waves of $concurrency queries; max-samples $max_samples, timeout $query_timeout, max-concurrency $concurrency_flag; cgroup ${cg:-none} ($((memory_limit >> 20)) MiB); GOMEMLIMIT $((gomemlimit >> 20)) MiB; $(nproc) CPUs; work $work" >&2
grep -o 'msg="Set GOMEMLIMIT".*' "$work/serve.log" >&2 || true

echo "overload: 30 s of data first" >&2
sleep 30

# RSS once a second while the storm runs.
(while kill -0 "$pid" 2>/dev/null; do awk '$1=="VmRSS:"{print $2}' "/proc/$pid/status"; sleep 1; done) >"$work/rss" 2>/dev/null &
sampler=$!

start=$(date +%s)
python3 - "$url" "$seconds" "$concurrency" >"$work/queries" <<'EOF'
import json, sys, threading, time, urllib.error, urllib.parse, urllib.request
url, seconds, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
queries = [
    'rate(DCGM_FI_DEV_GPU_UTIL[1m])',
    'avg by (gpu) (avg_over_time(DCGM_FI_DEV_POWER_USAGE[5m]))',
    'sum by (__name__) ({job="gpu"})',
    'rate(container_cpu_usage_seconds_total[1m])',
    'avg by (__name__) ({job="cadvisor"})',
]
def one(i, out):
    now = int(time.time())
    body = urllib.parse.urlencode({"query": queries[i % len(queries)], "start": now - 86400, "end": now, "step": 10}).encode()
    t = time.monotonic()
    try:
        with urllib.request.urlopen(url + "/api/v1/query_range", body, timeout=300) as r:
            r.read(); code, etype = r.status, ""
    except urllib.error.HTTPError as e:
        code = e.code
        try: etype = json.loads(e.read()).get("errorType", "")
        except Exception: etype = "?"
    except Exception as e:
        code, etype = 0, type(e).__name__
    out[i] = (code, etype, time.monotonic() - t)
end = time.monotonic() + seconds
while time.monotonic() < end:
    out = [None] * n
    ts = [threading.Thread(target=one, args=(i, out)) for i in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    for code, etype, d in out: print(code, etype or "-", "%.3f" % d)
EOF
stop=$(date +%s)
kill "$sampler" 2>/dev/null || true
w=$((stop - start))
sleep 3

echo
echo "queries ($(wc -l <"$work/queries") in ${w}s):"
awk '{print "  " $1, $2}' "$work/queries" | sort | uniq -c
sort -n -k3 "$work/queries" | awk '{d[NR]=$3} END {printf "  latency p50 %.2fs p90 %.2fs max %.2fs\n", d[int(NR*0.5)+1], d[int(NR*0.9)+1], d[NR]}'
echo "scrapes over the storm's ${w}s window (expected ${w} per job, ±1):"
echo "  samples of up:           $(value "count_over_time(up[${w}s])" "$stop")"
echo "  failed scrapes (up = 0): $(value "count_over_time(up[${w}s]) - sum_over_time(up[${w}s])" "$stop")"
echo "  GPU utilization samples: $(value "count_over_time(DCGM_FI_DEV_GPU_UTIL[${w}s])" "$stop")"
echo "  longest scrape (s):      $(value "max_over_time(scrape_duration_seconds[${w}s])" "$stop")"
peak=$(sort -n "$work/rss" | tail -1)
echo "memory: peak RSS $((peak >> 10)) MiB, GOMEMLIMIT $((gomemlimit >> 20)) MiB"
if [[ -n "$cg" ]]; then
  if [[ -f "$cg/memory.max_usage_in_bytes" ]]; then
    echo "  cgroup: limit $((memory_limit >> 20)) MiB, peak $(($(cat "$cg/memory.max_usage_in_bytes") >> 20)) MiB, failcnt $(cat "$cg/memory.failcnt"), $(grep oom_kill "$cg/memory.oom_control" | tr '\n' ' ')"
  else
    echo "  cgroup: limit $((memory_limit >> 20)) MiB, peak $(($(cat "$cg/memory.peak" 2>/dev/null || echo 0) >> 20)) MiB, $(grep oom_kill "$cg/memory.events")"
  fi
fi
if kill -0 "$pid" 2>/dev/null; then echo "process: alive"; else echo "process: DEAD"; fi

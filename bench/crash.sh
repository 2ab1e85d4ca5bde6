#!/usr/bin/env bash
# Crash: `gpuscope serve` scrapes N counters at 1 s (bench/crashtarget:
# every counter holds the number of scrapes served, so a stored value
# names its scrape) for some minutes, is killed with SIGKILL just after
# the target answered a scrape (so while it appends and commits that
# scrape's samples), and is restarted on the same data directory.
#
#   bench/crash.sh [minutes=5] [series=100000]
#
# It reports the WAL and head-chunk size at the kill, the time to ready and
# the WAL replay time (the TSDB's own "WAL replay completed" line), head
# series before the kill and after the replay, the samples a query at a
# moment before the kill returns before and after, the samples lost, and
# the gap in a series against the downtime.
#
# A target's scrapes are sequential: the next starts once the previous
# one's commit returned. So when the target has served k scrapes at the
# kill, scrapes 1..k-1 were committed and each series must hold the values
# 1..k-1 after the restart (less any scrape that failed, which `up`
# records); scrape k was in flight and may or may not be there. "lost" is
# what is missing of 1..k-1. After the restart the values go on at k+1.
# Verdict: OK when nothing committed is lost and no counter resets.
#
# GPUSCOPE_BIN uses a built binary instead of building one; KEEP=1 keeps
# the work directory (data, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-5}
series=${2:-100000}

source bench/lib.sh
go build -o "$work/crashtarget" ./bench/crashtarget
ready() { until curl -sf "http://127.0.0.1:$1/-/ready" >/dev/null; do sleep 0.05; done; }
now() { date +%s.%N; }

tport=$(freeport)
"$work/crashtarget" -listen 127.0.0.1:$tport -series "$series" >"$work/target.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$tport/scrapes" >/dev/null; do sleep 0.1; done
scrapes() { curl -sf "http://127.0.0.1:$tport/scrapes" | awk '{print $1}'; }

cat >"$work/serve.yml" <<EOF
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: crash
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: [127.0.0.1:$tport]
EOF
port=$(freeport)
url=http://127.0.0.1:$port
serve() {
  "$bin" serve --config.file="$work/serve.yml" --web.listen-address=127.0.0.1:$port \
    --storage.tsdb.path="$work/data" --node.name=crash >>"$work/serve-$1.log" 2>&1 &
  pid=$!; pids+=($pid)
}

# query Q [TIME]: the value of a one-sample instant query ("nan" if none).
query() {
  curl -sS "$url/api/v1/query" --data-urlencode "query=$1" ${2:+--data-urlencode "time=$2"} |
    python3 -c 'import json,sys; d=json.load(sys.stdin); r=d.get("data",{}).get("result",[]); print(r[0]["value"][1] if r else "nan")'
}
# metric NAME: a sample of gpuscope's own /metrics, read directly.
metric() { curl -sS "$url/metrics" | awk -v m="$1" '$1==m{print $2}'; }

serve 1
ready "$port"
t0=$(now)
echo "crash: $series series at 1s for $minutes min, appliance pid $pid, work $work" >&2
for m in $(seq 1 "$minutes"); do
  sleep $(awk -v t0="$t0" -v m="$m" -v n="$(now)" 'BEGIN{s=t0+60*m-n; print (s>0?s:0)}')
  echo "  minute $m: scrapes served $(scrapes), head series $(metric prometheus_tsdb_head_series), RSS $(awk '$1=="VmRSS:"{printf "%.0f MB", $2/1024}' /proc/$pid/status)" >&2
done

# Before the kill: what a query at tq returns.
tq=$(now)
win() { awk -v a="$t0" -v b="$1" 'BEGIN{printf "%ds", b-a+5}'; }
samples_before=$(query "sum(count_over_time(crash_counter_total[$(win "$tq")]))" "$tq")
series_before=$(metric prometheus_tsdb_head_series)

# Kill right after the next scrape is served.
k0=$(scrapes)
while [[ $(scrapes) == "$k0" ]]; do sleep 0.005; done
kill -9 "$pid"
tk=$(now)
wait "$pid" 2>/dev/null || true
kk=$(scrapes)
served_ms=$(curl -sf "http://127.0.0.1:$tport/scrapes" | awk '{print $2}')
wal_mb=$(du -sm "$work/data/wal" | awk '{print $1}')
segs=$(ls "$work/data/wal" | grep -c '^[0-9]*$' || true)
chunks_mb=$(du -sm "$work/data/chunks_head" | awk '{print $1}')

# Restart on the same directory.
tr=$(now)
serve 2
ready "$port"
tready=$(now)
series_after=$(metric prometheus_tsdb_head_series)
replay=$(grep -m1 'WAL replay completed' "$work/serve-2.log" | grep -o 'total_replay_duration=[^ ]*' | cut -d= -f2)

# Five scrapes after the restart, all series stored.
until [[ $(query "count(crash_counter_total >= $((kk + 5)))") == "$series" ]]; do sleep 0.5; done
te=$(now)

samples_after=$(query "sum(count_over_time(crash_counter_total[$(win "$tq")]))" "$tq")
# Everything stored before the kill, by value: scrapes 1..kk-1 must all be
# there, scrape kk may be.
wk=$(win "$tk")
pre=$(query "sum(count_over_time(crash_counter_total[$wk]))" "$tk")
inflight=$(query "count(max_over_time(crash_counter_total[$wk]) == $kk) or vector(0)" "$tk")
minv=$(query "min(min_over_time(crash_counter_total[$wk]))" "$tk")
failed=$(query "sum(count_over_time(up{job=\"crash\"}[$wk]) - sum_over_time(up{job=\"crash\"}[$wk]))" "$tk")
resets=$(query "sum(resets(crash_counter_total[$(win "$te")]))" "$te")
# The gap, in the first series: last sample before the kill, first after.
gap=$(curl -sS "$url/api/v1/query" --data-urlencode "query=crash_counter_total{series=\"000000\"}[$(win "$te")]" --data-urlencode "time=$te" |
  python3 -c '
import json, sys
tk, tready, kk = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
v = [(float(t), int(x)) for t, x in json.load(sys.stdin)["data"]["result"][0]["values"]]
pre = [s for s in v if s[0] < tk]; post = [s for s in v if s[0] > tk]
(t1, v1), (t2, v2) = pre[-1], post[0]
print("last sample %.3fs before the kill (value %d), first %.3fs after ready (value %d): gap %.3fs, counter %s" % (
  tk - t1, v1, t2 - tready, v2, t2 - t1, "continuous" if v2 == kk + 1 and v1 >= kk - 1 else "NOT continuous"))
' "$tk" "$tready" "$kk")

awk -v tk="$tk" -v tr="$tr" -v tready="$tready" -v ms="$served_ms" -v kk="$kk" -v n="$series" \
    -v pre="$pre" -v inflight="$inflight" -v minv="$minv" -v failed="$failed" -v resets="$resets" \
    -v sb="$samples_before" -v sa="$samples_after" -v hb="$series_before" -v ha="$series_after" \
    -v replay="$replay" -v wal="$wal_mb" -v segs="$segs" -v chunks="$chunks_mb" -v gap="$gap" -v minutes="$minutes" 'BEGIN {
  expected = (kk - 1) * n; present = pre - inflight; lost = expected - present
  printf "killed %.0f ms after scrape %d was served (%d series, %d min at 1s)\n", tk*1000 - ms, kk, n, minutes
  printf "at the kill: WAL %d MB in %d segments, head chunks %d MB, head series %d\n", wal, segs, chunks, hb
  printf "restart: ready %.1f s after start, WAL replay %s, head series %d\n", tready - tr, replay, ha
  printf "downtime (kill to ready): %.1f s\n", tready - tk
  printf "samples a query before the kill returned: %d before, %d after the restart\n", sb, sa
  crash = lost - failed * n; if (crash < 0) crash = 0
  printf "committed before the kill (values 1..%d): %d expected, %d present, %d missing; %d scrapes failed (up 0, %d samples); lost to the crash: %d\n", kk-1, expected, present, lost, failed, failed * n, crash
  printf "scrape %d (in flight at the kill) stored in %d series; lowest value %d\n", kk, inflight, minv
  printf "counter resets: %d\n", resets
  printf "series 000000: %s\n", gap
  ok = crash == 0 && resets == 0 && minv == 1 && sa >= sb && index(gap, "NOT") == 0
  printf "verdict: %s\n", ok ? "OK" : "LOSS"
  exit ok ? 0 : 1
}'

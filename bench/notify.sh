#!/usr/bin/env bash
# From an alert's first firing evaluation to the receiver's request
# (issue 26's goal: under 1 s beyond group_wait), through the whole road:
# the rule manager, Prometheus's notifier, the self listener, the embedded
# Alertmanager's dispatcher, group_wait, its webhook integration.
#
#   bench/notify.sh [minutes=5] [group_wait=1s]
#
# `gpuscope serve` (defaults, GPUs off) evaluates one rule every second
# whose alert carries the current 10-second tick as a label: a new alert
# fires every 10 s, each its own group (group_by: [tick]). A webhook on
# loopback notes when each request arrives. Per alert: arrival - startsAt
# (the timestamp of the evaluation that fired it, as Prometheus stamps
# it) - group_wait. Prints the count, median, 90th percentile and maximum.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-5}
group_wait=${2:-1s}

source bench/lib.sh
hook_port=$(freeport)
python3 - "$hook_port" "$work/arrivals" <<'EOF' &
import http.server, json, sys, time
port, out = int(sys.argv[1]), open(sys.argv[2], "a")
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        t = time.time()
        m = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        for a in m["alerts"]:
            out.write(f"{t:.6f} {a['startsAt']} {a['labels'].get('tick', '')}\n")
        out.flush()
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Hook).serve_forever()
EOF
pids+=($!)

cat >"$work/rules.yml" <<'EOF'
groups:
  - name: bench.notify
    interval: 1s
    rules:
      - alert: BenchTick
        expr: floor(vector(time()) / 10)
        labels:
          tick: '{{ printf "%.0f" $value }}'
EOF
cat >"$work/gpuscope.yml" <<EOF
rule_files: [rules.yml]
gpu: {backend: none}
alertmanager:
  route:
    receiver: hook
    group_by: [tick]
    group_wait: $group_wait
    group_interval: 1m
    repeat_interval: 4h
  receivers:
    - name: hook
      webhook_configs: [{url: "http://127.0.0.1:$hook_port/", send_resolved: false}]
EOF
port=$(freeport)
"$bin" serve --config.file="$work/gpuscope.yml" --web.listen-address=127.0.0.1:$port --storage.tsdb.path="$work/data" >"$work/log" 2>&1 &
pids+=($!)
ready "$port"
sleep $((minutes * 60))

python3 - "$work/arrivals" "$group_wait" <<'EOF'
import datetime, re, statistics, sys
wait = float(re.fullmatch(r"([\d.]+)s", sys.argv[2]).group(1))
def ts(s):  # RFC 3339 with up to nanoseconds
    m = re.fullmatch(r"(.*?)(\.\d+)?Z", s)
    frac = float(m.group(2) or 0)
    return datetime.datetime.fromisoformat(m.group(1) + "+00:00").timestamp() + frac
lat = []
seen = set()
for line in open(sys.argv[1]):
    arrived, starts, tick = line.split()
    if tick in seen:
        continue  # a group notified twice would show here as fewer rows than ticks
    seen.add(tick)
    lat.append(float(arrived) - ts(starts) - wait)
lat.sort()
p90 = lat[int(0.9 * (len(lat) - 1))]
print(f"alerts={len(lat)} group_wait={sys.argv[2]} beyond group_wait: median={statistics.median(lat)*1000:.0f}ms p90={p90*1000:.0f}ms max={max(lat)*1000:.0f}ms min={min(lat)*1000:.0f}ms")
EOF

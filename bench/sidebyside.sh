#!/usr/bin/env bash
# gpuscope side by side with the stack it replaces, on the same host in the
# same window (issue 18, item 3), repeated and summarised by medians:
#
#   bench/sidebyside.sh [runs=3] [idle_seconds=300] [ingest_seconds=120]
#
# Idle: `gpuscope serve` with its embedded defaults (its own data
# directory, a free port; built-in collection at 15 s, built-in rules on)
# against the pair it replaces, started at the same moment: Prometheus
# (scrape and evaluation interval 15 s; jobs: itself and the cAdvisor,
# honouring cAdvisor's timestamps as gpuscope's built-in job does; and the
# rules gpuscope evaluates, from `gpuscope rules export`, so both sides do
# the same rule work) + cAdvisor's own binary (--housekeeping_interval=15s
# --docker_only=false, otherwise its defaults). After a warm-up
# (IDLE_WARMUP, 45 s) it samples every 15 s over the window: CPU
# (utime+stime, /proc/<pid>/stat), VmRSS and RssAnon; then each TSDB's head
# series. It prints gpuscope's CPU (% of one core) and RSS (median of the
# window and at its end), the pair's (the sum of both processes), and
# gpuscope / pair.
#
# Ingest: a synthetic target (bench/crashtarget: SERIES counters, default
# 100,000, each holding the number of scrapes served, so every value
# changes every scrape; one target per scraper) scraped every 5 s by a
# `gpuscope serve` with its own collection off (gpu.backend none, cAdvisor
# off, built-in rules off; its self-scrape at 15 s cannot be turned off)
# and by a Prometheus with only that job and no rules, started together.
# After a warm-up (INGEST_WARMUP, 30 s): CPU per ingested sample (CPU over
# the window / the increase of prometheus_tsdb_head_samples_appended_total,
# read from each side's own /metrics) and RSS per head series (median RSS
# of the window / prometheus_tsdb_head_series), and gpuscope / Prometheus.
# Each side's window is whole 5-s cycles, read half-way between two of its
# scrapes (ingest_seconds must be a multiple of 5). RSS per series grows
# with the head's age (chunks fill), so compare runs of the same warm-up
# and window only.
#
# Then the median over the runs of every figure and of every ratio, and
# issue 18's goals, each met or not met: idle CPU <= 0.5x and idle RSS <=
# 0.5x the pair's; ingest CPU per sample <= 1.0x Prometheus's; gpuscope's
# RSS per head series <= 2 KB (2048 B). The load average (1 min) is printed
# at the start and end of every window: the figures mean little on a busy
# machine.
#
# Binaries: gpuscope from this checkout (GPUSCOPE_BIN: a built one);
# Prometheus cmd/prometheus at tools/prometheus/go.mod's version
# (PROMETHEUS_BIN: a built one); cAdvisor's binary from CADVISOR_SRC (a
# clone of github.com/google/cadvisor) at go.mod's version, or CADVISOR_BIN.
# Both neighbours are built once, outside the main module, and cached under
# ${XDG_CACHE_HOME:-~/.cache}/gpuscope-bench (bench/lib.sh). Every process
# and the work directory are removed at exit, Ctrl-C and kill included
# (KEEP=1 keeps the work directory: data, logs, samples).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bench/sidebyside.sh [runs=3] [idle_seconds=300] [ingest_seconds=120]"
  echo "  env: CADVISOR_SRC or CADVISOR_BIN (required), CADVISOR_REF, PROMETHEUS_BIN, GPUSCOPE_BIN,"
  echo "       IDLE_WARMUP=45, INGEST_WARMUP=30, SERIES=100000, KEEP=1"
}
if [[ ${1:-} == -h || ${1:-} == --help ]]; then usage; exit 0; fi
(($# <= 3)) || { echo "sidebyside: at most 3 arguments, got $#" >&2; usage >&2; exit 2; }
runs=${1:-3}
idle=${2:-300}
ingest=${3:-120}
idle_warmup=${IDLE_WARMUP:-45}
ingest_warmup=${INGEST_WARMUP:-30}
series=${SERIES:-100000}
for a in runs idle ingest idle_warmup ingest_warmup series; do
  [[ ${!a} =~ ^[0-9]+$ ]] || { echo "sidebyside: $a must be a whole number, got '${!a}'" >&2; usage >&2; exit 2; }
done
((runs >= 1)) || { echo "sidebyside: runs must be at least 1" >&2; exit 2; }
((idle >= 15)) || { echo "sidebyside: idle_seconds must be at least 15 (one scrape interval), got $idle" >&2; exit 2; }
((ingest >= 10 && ingest % 5 == 0)) ||
  { echo "sidebyside: ingest_seconds must be a multiple of 5 (the scrape interval) and at least 10, got $ingest" >&2; exit 2; }
((series >= 1)) || { echo "sidebyside: SERIES must be at least 1" >&2; exit 2; }
if [[ -z "${CADVISOR_BIN:-}" && -z "${CADVISOR_SRC:-}" ]]; then
  echo "sidebyside: set CADVISOR_BIN (a cAdvisor binary) or CADVISOR_SRC (a clone of github.com/google/cadvisor)" >&2
  exit 2
fi

source bench/lib.sh
# Ctrl-C, kill and hang-up end the script through its EXIT trap (cleanup).
trap 'exit 130' INT TERM HUP
# nap SECONDS: a sleep that a signal interrupts at once.
nap() { sleep "$1" & wait $!; }

prometheus_build
cadvisor_build
go build -o "$work/synth" ./bench/crashtarget
"$bin" rules export >"$work/rules.yml"
hz=$(getconf CLK_TCK)

# start LOG CMD...: runs CMD in the background, its pid in $started.
start() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  started=$!
  pids+=("$started")
}
# stop PID...: ends the processes and forgets them.
stop() {
  local p q keep=()
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
  for q in "${pids[@]}"; do
    for p in "$@"; do [[ $q == "$p" ]] && continue 2; done
    keep+=("$q")
  done
  pids=(${keep[@]+"${keep[@]}"})
}
# alive NAME URL PID LOG: waits until URL answers, failing if PID exits first.
alive() {
  until curl -sf -o /dev/null "$2"; do
    kill -0 "$3" 2>/dev/null || { echo "sidebyside: $1 exited before it was ready; its log ($4) ends:" >&2; tail -5 "$4" >&2; exit 1; }
    nap 0.2
  done
}
# metric PORT NAME: the sum of the samples of NAME on PORT's /metrics.
metric() {
  curl -sf "http://127.0.0.1:$1/metrics" |
    awk -v m="$2" '$1 == m || index($1, m "{") == 1 {s += $NF; n++} END {if (n) printf "%.0f\n", s; else print "nan"}'
}
# query PORT EXPR: one line per result of an instant query, "labels value".
query() {
  curl -sS "http://127.0.0.1:$1/api/v1/query" --data-urlencode "query=$2" |
    python3 -c 'import json,sys
for r in json.load(sys.stdin).get("data",{}).get("result",[]):
    print(",".join(f"{k}={v}" for k,v in sorted(r["metric"].items())) or "-", r["value"][1])'
}
# proc PID...: per process "cpu_ticks rss_kB anon_kB".
proc() {
  local p
  for p in "$@"; do
    printf ' %s %s' "$(awk '{print $14+$15}' "/proc/$p/stat")" \
      "$(awk '$1=="VmRSS:"{r=$2} $1=="RssAnon:"{a=$2} END{print r, a}' "/proc/$p/status")"
  done
}
load() { cut -d' ' -f1 /proc/loadavg; }
# phase TARGET_PORT: waits until half-way between two scrapes of the
# target (bench/crashtarget's /scrapes: "<scrapes served> <last, unix ms>")
# and prints the time.
phase() {
  local last
  last=$(curl -sf "http://127.0.0.1:$1/scrapes" | cut -d' ' -f2)
  nap "$(awk -v l="$last" -v n="$(date +%s.%N)" 'BEGIN{d = (l / 1000 + 2.5 - n) % 5; print (d < 0 ? d + 5 : d)}')"
  date +%s.%N
}
# progress PID PORT: "cpu_ticks samples_appended" of a side.
progress() {
  echo "$(awk '{print $14+$15}' "/proc/$1/stat") $(metric "$2" prometheus_tsdb_head_samples_appended_total)"
}
# window SECONDS FILE PID...: a line "time proc..." into FILE at the start,
# every 15 s and at the end of the window.
window() {
  local secs=$1 file=$2 t0 k
  shift 2
  t0=$(date +%s.%N)
  echo "$t0$(proc "$@")" >>"$file"
  for ((k = 15; k < ${secs%.*}; k += 15)); do
    nap "$(awk -v s="$t0" -v n="$(date +%s.%N)" -v k="$k" 'BEGIN{d = s + k - n; print (d > 0 ? d : 0)}')"
    echo "$(date +%s.%N)$(proc "$@")" >>"$file"
  done
  nap "$(awk -v s="$t0" -v n="$(date +%s.%N)" -v k="$secs" 'BEGIN{d = s + k - n; print (d > 0 ? d : 0)}')"
  echo "$(date +%s.%N)$(proc "$@")" >>"$file"
}

# The figures of a run: summary idle|ingest RUN DIR prints them and
# appends them, as JSON, to $work/results.
cat >"$work/summary.py" <<'EOF'
import json, statistics, sys
kind, run, d, hz = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
rows = [list(map(float, l.split())) for l in open(f"{d}/samples")]
meta = dict(l.rstrip("\n").split(" ", 1) for l in open(f"{d}/meta"))
wall = rows[-1][0] - rows[0][0]
def proc(k):
    cpu = (rows[-1][1 + 3 * k] - rows[0][1 + 3 * k]) / hz
    return cpu, [r[2 + 3 * k] * 1024 for r in rows], [r[3 + 3 * k] * 1024 for r in rows]
MB = 1e6
out = dict(kind=kind, run=run, wall=wall, load0=float(meta["load0"]), load1=float(meta["load1"]))
if kind == "idle":
    (gc, gr, ga), (pc, pr, pa), (cc, cr, ca) = proc(0), proc(1), proc(2)
    pair_r = [a + b for a, b in zip(pr, cr)]
    pair_a = [a + b for a, b in zip(pa, ca)]
    out.update(
        g_cpu=100 * gc / wall, p_cpu=100 * pc / wall, c_cpu=100 * cc / wall, pair_cpu=100 * (pc + cc) / wall,
        g_rss=statistics.median(gr) / MB, pair_rss=statistics.median(pair_r) / MB,
        p_rss=statistics.median(pr) / MB, c_rss=statistics.median(cr) / MB,
        g_rss_end=gr[-1] / MB, pair_rss_end=pair_r[-1] / MB,
        g_anon=statistics.median(ga) / MB, pair_anon=statistics.median(pair_a) / MB,
        g_series=float(meta["g_series"]), p_series=float(meta["p_series"]))
    out.update(r_cpu=out["g_cpu"] / out["pair_cpu"], r_rss=out["g_rss"] / out["pair_rss"],
               r_rss_end=out["g_rss_end"] / out["pair_rss_end"], r_anon=out["g_anon"] / out["pair_anon"])
    print(f"idle run {run}: window {wall:.0f} s, load {out['load0']} -> {out['load1']}")
    print(f"  gpuscope serve:        CPU {out['g_cpu']:.3f} % of a core; RSS median {out['g_rss']:.1f} MB, end {out['g_rss_end']:.1f} MB, anon {out['g_anon']:.1f} MB; head series {out['g_series']:.0f}")
    print(f"  Prometheus + cAdvisor: CPU {out['pair_cpu']:.3f} % ({out['p_cpu']:.3f} + {out['c_cpu']:.3f}); RSS median {out['pair_rss']:.1f} MB ({out['p_rss']:.1f} + {out['c_rss']:.1f}), end {out['pair_rss_end']:.1f} MB, anon {out['pair_anon']:.1f} MB; head series {out['p_series']:.0f}")
    print(f"  gpuscope / pair:       CPU {out['r_cpu']:.2f}x, RSS median {out['r_rss']:.2f}x, RSS end {out['r_rss_end']:.2f}x, anon {out['r_anon']:.2f}x")
    print(f"  samples per scrape by job: gpuscope {meta['g_jobs']}; Prometheus {meta['p_jobs']}")
    print(f"  recorded series (rules): gpuscope {meta['g_recorded']}, Prometheus {meta['p_recorded']}; metric names of job cadvisor: gpuscope {meta['g_cnames']}, Prometheus {meta['p_cnames']}")
else:
    (_, gr, _), (_, pr, _) = proc(0), proc(1)
    # g0/g1, p0/p1: "time cpu_ticks samples_appended", whole scrape cycles apart.
    def side(k):
        a, b = (list(map(float, meta[k + i].split())) for i in "01")
        return b[0] - a[0], (b[1] - a[1]) / hz, b[2] - a[2]
    gw, gc, gs = side("g")
    pw, pc, ps = side("p")
    wall = (gw + pw) / 2
    out["wall"] = wall
    out.update(
        g_cpu_s=gc, p_cpu_s=pc, g_samples=gs, p_samples=ps,
        g_us=1e6 * gc / gs if gs else float("nan"), p_us=1e6 * pc / ps if ps else float("nan"),
        g_rss=statistics.median(gr) / MB, p_rss=statistics.median(pr) / MB,
        g_series=float(meta["g_series"]), p_series=float(meta["p_series"]))
    out.update(g_bps=out["g_rss"] * MB / out["g_series"], p_bps=out["p_rss"] * MB / out["p_series"])
    out.update(r_us=out["g_us"] / out["p_us"], r_bps=out["g_bps"] / out["p_bps"], r_rss=out["g_rss"] / out["p_rss"])
    print(f"ingest run {run}: window {wall:.0f} s, load {out['load0']} -> {out['load1']}")
    for n, k in (("gpuscope serve", "g"), ("Prometheus", "p")):
        print(f"  {n + ':':<16} CPU {out[k + '_cpu_s']:.2f} s for {out[k + '_samples']:.0f} samples ({out[k + '_samples'] / wall:.0f}/s): "
              f"{out[k + '_us']:.3f} us/sample; RSS median {out[k + '_rss']:.1f} MB / {out[k + '_series']:.0f} head series = "
              f"{out[k + '_bps']:.0f} B ({out[k + '_bps'] / 1024:.2f} KiB) per series; scrape duration {meta[k + '_took']} s")
    print(f"  gpuscope / Prometheus: CPU per sample {out['r_us']:.2f}x, RSS per series {out['r_bps']:.2f}x, RSS {out['r_rss']:.2f}x")
with open(sys.argv[5], "a") as f:
    f.write(json.dumps(out) + "\n")
EOF
summary() { python3 "$work/summary.py" "$1" "$2" "$3" "$hz" "$work/results"; }

idle_run() {
  local r=$1
  local d=$work/idle$r gport pport cport gpid ppid cpid
  mkdir -p "$d"
  gport=$(freeport) pport=$(freeport) cport=$(freeport)
  cat >"$d/prometheus.yml" <<EOF
global:
  scrape_interval: 15s
  evaluation_interval: 15s
rule_files: [$work/rules.yml]
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: ['127.0.0.1:$pport']}]
  - job_name: cadvisor
    honor_timestamps: true
    track_timestamps_staleness: true
    static_configs: [{targets: ['127.0.0.1:$cport']}]
EOF
  start "$d/gpuscope.log" "$bin" serve --web.listen-address=127.0.0.1:"$gport" --storage.tsdb.path="$d/gpuscope"
  gpid=$started
  start "$d/prometheus.log" "$prometheus_bin" --config.file="$d/prometheus.yml" \
    --web.listen-address=127.0.0.1:"$pport" --storage.tsdb.path="$d/prometheus"
  ppid=$started
  start "$d/cadvisor.log" "$cadvisor_bin" --listen_ip=127.0.0.1 --port="$cport" --logtostderr \
    --housekeeping_interval=15s --docker_only=false
  cpid=$started
  alive "gpuscope serve" "http://127.0.0.1:$gport/-/ready" "$gpid" "$d/gpuscope.log"
  alive Prometheus "http://127.0.0.1:$pport/-/ready" "$ppid" "$d/prometheus.log"
  alive cAdvisor "http://127.0.0.1:$cport/healthz" "$cpid" "$d/cadvisor.log"
  echo "sidebyside: idle run $r/$runs: gpuscope $gpid, Prometheus $ppid, cAdvisor $cpid; warm-up ${idle_warmup}s, window ${idle}s" >&2
  nap "$idle_warmup"
  echo "load0 $(load)" >"$d/meta"
  window "$idle" "$d/samples" "$gpid" "$ppid" "$cpid"
  {
    echo "load1 $(load)"
    echo "g_series $(metric "$gport" prometheus_tsdb_head_series)"
    echo "p_series $(metric "$pport" prometheus_tsdb_head_series)"
    local p
    for p in g:"$gport" p:"$pport"; do
      echo "${p%%:*}_jobs $(query "${p#*:}" 'sum by (job) (scrape_samples_scraped)' | awk '{sub(/^job=/, ""); printf "%s%s=%s", s, $1, $2; s = " "}')"
      echo "${p%%:*}_recorded $(query "${p#*:}" 'count({__name__=~".+:.+"})' | cut -d' ' -f2)"
      echo "${p%%:*}_cnames $(query "${p#*:}" 'count(count by (__name__) ({job="cadvisor"}))' | cut -d' ' -f2)"
    done
  } >>"$d/meta"
  stop "$gpid" "$ppid" "$cpid"
  summary idle "$r" "$d"
}

ingest_run() {
  local r=$1
  local d=$work/ingest$r gport pport t1 t2 gpid ppid
  mkdir -p "$d"
  gport=$(freeport) pport=$(freeport) t1=$(freeport) t2=$(freeport)
  start "$d/target-gpuscope.log" "$work/synth" -listen 127.0.0.1:"$t1" -series "$series"
  local s1=$started
  start "$d/target-prometheus.log" "$work/synth" -listen 127.0.0.1:"$t2" -series "$series"
  local s2=$started
  alive "target" "http://127.0.0.1:$t1/scrapes" "$s1" "$d/target-gpuscope.log"
  alive "target" "http://127.0.0.1:$t2/scrapes" "$s2" "$d/target-prometheus.log"
  cat >"$d/gpuscope.yml" <<EOF
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: synth
    scrape_interval: 5s
    scrape_timeout: 5s
    static_configs: [{targets: ['127.0.0.1:$t1']}]
cadvisor:
  enabled: false
gpu:
  backend: none
rules:
  builtin:
    enabled: false
EOF
  cat >"$d/prometheus.yml" <<EOF
global:
  scrape_interval: 15s
scrape_configs:
  - job_name: synth
    scrape_interval: 5s
    scrape_timeout: 5s
    static_configs: [{targets: ['127.0.0.1:$t2']}]
EOF
  start "$d/gpuscope.log" "$bin" serve --config.file="$d/gpuscope.yml" --gpu.backend=none \
    --web.listen-address=127.0.0.1:"$gport" --storage.tsdb.path="$d/gpuscope"
  gpid=$started
  start "$d/prometheus.log" "$prometheus_bin" --config.file="$d/prometheus.yml" \
    --web.listen-address=127.0.0.1:"$pport" --storage.tsdb.path="$d/prometheus"
  ppid=$started
  alive "gpuscope serve" "http://127.0.0.1:$gport/-/ready" "$gpid" "$d/gpuscope.log"
  alive Prometheus "http://127.0.0.1:$pport/-/ready" "$ppid" "$d/prometheus.log"
  echo "sidebyside: ingest run $r/$runs: $series series at 5 s; gpuscope $gpid, Prometheus $ppid; warm-up ${ingest_warmup}s, window ${ingest}s" >&2
  nap "$ingest_warmup"
  # The window of each side is whole scrape cycles, read half-way between
  # two of its scrapes (its target says when it served the last one):
  # samples are appended in bursts of $series, so a window read at any
  # moment would count one scrape more or less (17 % of a 30-s window).
  echo "load0 $(load)" >"$d/meta"
  { echo "g0 $(phase "$t1") $(progress "$gpid" "$gport")"; echo "p0 $(phase "$t2") $(progress "$ppid" "$pport")"; } >>"$d/meta"
  local g0 p0
  g0=$(awk '$1=="g0"{print $2}' "$d/meta")
  p0=$(awk '$1=="p0"{print $2}' "$d/meta")
  # RSS every 15 s from p0 (at most 5 s after g0) to g0 + window.
  window "$(awk -v g="$g0" -v p="$p0" -v w="$ingest" 'BEGIN{printf "%.3f", g + w - p}')" "$d/samples" "$gpid" "$ppid"
  {
    nap "$(awk -v t="$g0" -v w="$ingest" -v n="$(date +%s.%N)" 'BEGIN{d = t + w - n; print (d > 0 ? d : 0)}')"
    echo "g1 $(date +%s.%N) $(progress "$gpid" "$gport")"
    nap "$(awk -v t="$p0" -v w="$ingest" -v n="$(date +%s.%N)" 'BEGIN{d = t + w - n; print (d > 0 ? d : 0)}')"
    echo "p1 $(date +%s.%N) $(progress "$ppid" "$pport")"
    echo "load1 $(load)"
    echo "g_series $(metric "$gport" prometheus_tsdb_head_series)"
    echo "p_series $(metric "$pport" prometheus_tsdb_head_series)"
    echo "g_took $(query "$gport" 'scrape_duration_seconds{job="synth"}' | awk '{printf "%.3f", $2}')"
    echo "p_took $(query "$pport" 'scrape_duration_seconds{job="synth"}' | awk '{printf "%.3f", $2}')"
  } >>"$d/meta"
  stop "$gpid" "$ppid" "$s1" "$s2"
  summary ingest "$r" "$d"
}

echo "sidebyside: $runs runs; gpuscope $bin; Prometheus $prometheus_bin; cAdvisor $cadvisor_bin; $(nproc) CPUs; work $work" >&2
echo "idle: gpuscope serve (embedded defaults: built-in jobs gpuscope, cadvisor, gpu at 15 s; built-in rules on)"
echo "  vs Prometheus (15 s; jobs prometheus, cadvisor; the same $(grep -c -E '^ *- (record|alert):' "$work/rules.yml") rules, from \`gpuscope rules export\`: equal rule work)"
echo "  + cAdvisor's binary (--housekeeping_interval=15s --docker_only=false, its defaults otherwise: percpu on, store_container_labels on)"
echo "ingest: $series series changing every scrape, at 5 s, one target each: gpuscope serve (gpu.backend none, cadvisor off, rules off; self-scrape at 15 s) vs Prometheus (that job only, no rules)"
for r in $(seq 1 "$runs"); do
  idle_run "$r"
  ingest_run "$r"
done

python3 - "$work/results" <<'EOF'
import json, statistics, sys
res = [json.loads(l) for l in open(sys.argv[1])]
idle = [r for r in res if r["kind"] == "idle"]
ing = [r for r in res if r["kind"] == "ingest"]
def med(rs, k):
    return statistics.median(r[k] for r in rs)
def spread(rs, k, f):
    v = sorted(r[k] for r in rs)
    return f"{f.format(statistics.median(v))}" + (f" ({f.format(v[0])}-{f.format(v[-1])})" if len(v) > 1 else "")
n = len(idle)
print(f"\nmedians of {n} run{'s' if n > 1 else ''} (min-max); ratios are the median of each run's ratio")
print(f"idle, load at window start/end: " + ", ".join(f"{r['load0']}/{r['load1']}" for r in idle))
print(f"  CPU % of a core:  gpuscope {spread(idle, 'g_cpu', '{:.3f}')}, pair {spread(idle, 'pair_cpu', '{:.3f}')} "
      f"(Prometheus {med(idle, 'p_cpu'):.3f}, cAdvisor {med(idle, 'c_cpu'):.3f}); ratio {spread(idle, 'r_cpu', '{:.2f}')}")
print(f"  RSS median, MB:   gpuscope {spread(idle, 'g_rss', '{:.1f}')}, pair {spread(idle, 'pair_rss', '{:.1f}')} "
      f"(Prometheus {med(idle, 'p_rss'):.1f}, cAdvisor {med(idle, 'c_rss'):.1f}); ratio {spread(idle, 'r_rss', '{:.2f}')}")
print(f"  RSS at end, MB:   gpuscope {spread(idle, 'g_rss_end', '{:.1f}')}, pair {spread(idle, 'pair_rss_end', '{:.1f}')}; ratio {spread(idle, 'r_rss_end', '{:.2f}')}")
print(f"  RssAnon, MB:      gpuscope {spread(idle, 'g_anon', '{:.1f}')}, pair {spread(idle, 'pair_anon', '{:.1f}')}; ratio {spread(idle, 'r_anon', '{:.2f}')}")
print(f"  head series:      gpuscope {med(idle, 'g_series'):.0f}, Prometheus {med(idle, 'p_series'):.0f}")
print(f"ingest, load at window start/end: " + ", ".join(f"{r['load0']}/{r['load1']}" for r in ing))
print(f"  CPU per sample, us: gpuscope {spread(ing, 'g_us', '{:.3f}')}, Prometheus {spread(ing, 'p_us', '{:.3f}')}; ratio {spread(ing, 'r_us', '{:.2f}')}")
print(f"  RSS per series, B:  gpuscope {spread(ing, 'g_bps', '{:.0f}')}, Prometheus {spread(ing, 'p_bps', '{:.0f}')}; ratio {spread(ing, 'r_bps', '{:.2f}')}")
print(f"  RSS median, MB:     gpuscope {spread(ing, 'g_rss', '{:.1f}')}, Prometheus {spread(ing, 'p_rss', '{:.1f}')}; head series {med(ing, 'g_series'):.0f} / {med(ing, 'p_series'):.0f}")
print("goals (issue 18):")
for name, v, goal, unit in (
        ("idle CPU, gpuscope / pair", med(idle, "r_cpu"), 0.5, "{:.2f}x"),
        ("idle RSS (median), gpuscope / pair", med(idle, "r_rss"), 0.5, "{:.2f}x"),
        ("ingest CPU per sample, gpuscope / Prometheus", med(ing, "r_us"), 1.0, "{:.2f}x"),
        ("ingest RSS per head series, gpuscope", med(ing, "g_bps"), 2048, "{:.0f} B")):
    print(f"  {name:<46} {unit.format(v)} <= {unit.format(goal)}: {'met' if v <= goal else 'NOT MET'}")
EOF

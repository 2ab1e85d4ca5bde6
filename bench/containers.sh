#!/usr/bin/env bash
# Cost of watching 200 containers, side by side in one run: `gpuscope
# serve` (its in-process cAdvisor scraped into its TSDB every 15 s, rules
# on), the same with its built-in rules off, and cAdvisor's own binary
# built from its module at go.mod's version, whose /metrics this script
# scrapes every 15 s with curl as a Prometheus server would.
#
#   sudo bench/containers.sh [window=300] [warmup=60] [containers=200]
#
# Needs root and cgroup v1 (cpu, cpuacct, memory, pids under
# /sys/fs/cgroup/<ctrl>/): it makes /gpuscope-bench/c001… with a `sleep`
# in each (every 50th a shell that uses ~3 % of a core), and removes them
# and their processes at exit, Ctrl-C included.
#
# cAdvisor's binary: CADVISOR_BIN, or built here from CADVISOR_SRC, a
# clone (or bare git directory) of github.com/google/cadvisor. Its cmd/ is
# its own module, github.com/google/cadvisor/cmd, which the module proxy
# does not serve (it has no tags of its own) and whose go.mod replaces the
# library by ../ (so `go install …/cmd/cadvisor@v0.60.6` is refused); the
# script takes cmd/ at CADVISOR_REF (default: the tag of go.mod's version,
# else the clone's newest tag of that minor version) and builds it against
# github.com/google/cadvisor and …/lib at go.mod's versions from the module
# cache, the code gpuscope runs (bench/lib.sh cadvisor_build; cached under
# ~/.cache/gpuscope-bench).
#
# Both sides: housekeeping 15 s (dynamic, at most 60 s), the same metric
# sets off (scrape/cadvisor/config.go DefaultDisabledMetrics), no
# container labels, every raw cgroup accepted under the prefix
# /gpuscope-bench (the machine's other cgroups, which other work makes
# and removes, stay out of both), in-memory stats kept 31 s (gpuscope's
# 2 housekeepings + 1 s; cAdvisor's default is 2 min).
#
# Over the window it samples each process every 15 s (utime+stime from
# /proc/<pid>/stat, VmRSS) and prints: scrapes, CPU seconds, CPU ms per
# scrape (total / 15-s cycles) and the median of the 15-s intervals, RSS
# median and max, anonymous RSS median (RssAnon: the rest is mostly the
# mapped binary), peak RSS (VmHWM), samples per scrape. Then the label
# bytes per series of gpuscope's head: the cAdvisor series of the bench's
# containers with their workload labels, and the same series' labels less
# the workload pairs (there is no switch to turn them off), next to the
# series cAdvisor's binary exposes for them.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-300}
warmup=${2:-60}
count=${3:-200}
interval=15
for a in window warmup count; do
  [[ ${!a} =~ ^[0-9]+$ ]] || { echo "containers: $a must be a whole number, got '${!a}'" >&2; exit 2; }
done
(( window >= interval && count >= 1 )) ||
  { echo "containers: window must be at least ${interval}s and containers at least 1" >&2; exit 2; }

[[ $EUID -eq 0 ]] || { echo "containers: needs root (it makes cgroups)" >&2; exit 1; }
ctls=(cpu cpuacct memory pids)
for ctl in "${ctls[@]}"; do
  [[ -d /sys/fs/cgroup/$ctl && ! -f /sys/fs/cgroup/cgroup.controllers ]] ||
    { echo "containers: needs cgroup v1 with /sys/fs/cgroup/$ctl" >&2; exit 1; }
done
base=gpuscope-bench
for ctl in "${ctls[@]}"; do
  if [[ -d /sys/fs/cgroup/$ctl/$base ]]; then
    # A run killed with SIGKILL leaves empty cgroups; a live run has
    # processes in them and rmdir refuses.
    rmdir /sys/fs/cgroup/$ctl/$base/* 2>/dev/null || true
    rmdir /sys/fs/cgroup/$ctl/$base 2>/dev/null ||
      { echo "containers: /sys/fs/cgroup/$ctl/$base is in use (another run?)" >&2; exit 1; }
  fi
done

cadvisor_bin=${CADVISOR_BIN:-}
if [[ -n "$cadvisor_bin" && ! -x "$cadvisor_bin" ]]; then
  echo "containers: CADVISOR_BIN=$cadvisor_bin is not an executable file" >&2
  exit 1
fi
if [[ -z "$cadvisor_bin" && -z "${CADVISOR_SRC:-}" ]]; then
  echo "containers: set CADVISOR_BIN (a cAdvisor binary) or CADVISOR_SRC (a clone of github.com/google/cadvisor)" >&2
  exit 1
fi

source bench/lib.sh
# Ctrl-C, kill and hang-up end the script through its EXIT trap (cleanup).
trap 'exit 130' INT TERM HUP
# nap SECONDS: a sleep that a signal interrupts at once.
nap() { sleep "$1" & wait $!; }

cadvisor_build

# The containers: a cgroup in each controller and a process in it.
for ctl in "${ctls[@]}"; do mkdir "/sys/fs/cgroup/$ctl/$base"; done
on_exit+=('for c in /sys/fs/cgroup/{cpu,cpuacct,memory,pids}/$base/*/cgroup.procs; do kill $(cat "$c") 2>/dev/null; done
  for ctl in "${ctls[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      rmdir /sys/fs/cgroup/$ctl/$base/* 2>/dev/null; rmdir /sys/fs/cgroup/$ctl/$base 2>/dev/null && break; sleep 0.2
    done
    [[ ! -d /sys/fs/cgroup/$ctl/$base ]] || echo "containers: could not remove /sys/fs/cgroup/$ctl/$base" >&2
  done')
for i in $(seq 1 "$count"); do
  c=$(printf 'c%03d' "$i")
  for ctl in "${ctls[@]}"; do mkdir "/sys/fs/cgroup/$ctl/$base/$c"; done
  if (( i % 50 == 0 )); then
    cmd='while :; do for ((i = 0; i < 20000; i++)); do :; done; sleep 1; done'
  else
    cmd='exec sleep infinity'
  fi
  bash -c 'for ctl in cpu cpuacct memory pids; do echo $$ >"/sys/fs/cgroup/$ctl/$0/cgroup.procs"; done; eval "$1"' "$base/$c" "$cmd" &
  pids+=($!)
done

disabled=percpu,perf_event,advtcp,cpu_topology,cpuset,hugetlb,memory_numa,process,referenced_memory,resctrl,sched,tcp,udp
for rules in true false; do
  cat >"$work/serve-$rules.yml" <<EOF
global:
  scrape_interval: ${interval}s
cadvisor:
  housekeeping_interval: ${interval}s
  raw_cgroup_prefix_allowlist: [/$base]
gpu:
  backend: none
rules:
  builtin:
    enabled: $rules
EOF
done
port=$(freeport)
"$bin" serve --config.file="$work/serve-true.yml" --web.listen-address=127.0.0.1:$port \
  --storage.tsdb.path="$work/data" >"$work/serve.log" 2>&1 &
gpid=$!; pids+=("$gpid")
nport=$(freeport)
"$bin" serve --config.file="$work/serve-false.yml" --web.listen-address=127.0.0.1:$nport \
  --storage.tsdb.path="$work/data-norules" >"$work/serve-norules.log" 2>&1 &
npid=$!; pids+=("$npid")
cport=$(freeport)
"$cadvisor_bin" --listen_ip=127.0.0.1 --port="$cport" --logtostderr \
  --housekeeping_interval=${interval}s --max_housekeeping_interval=60s --allow_dynamic_housekeeping=true \
  --storage_duration=$((2 * interval + 1))s --disable_metrics=$disabled \
  --store_container_labels=false --docker_only=false --raw_cgroup_prefix_whitelist=/$base \
  >"$work/cadvisor.log" 2>&1 &
cpid=$!; pids+=("$cpid")
# alive NAME URL PID LOG: wait until URL answers, failing if PID exits first.
alive() {
  until curl -sf "$2" >/dev/null; do
    kill -0 "$3" 2>/dev/null || { echo "containers: $1 exited before it was ready; its log ($4) ends:" >&2; tail -5 "$4" >&2; exit 1; }
    nap 0.2
  done
}
alive "gpuscope (rules on)" "http://127.0.0.1:$port/-/ready" "$gpid" "$work/serve.log"
alive "gpuscope (rules off)" "http://127.0.0.1:$nport/-/ready" "$npid" "$work/serve-norules.log"
alive "cAdvisor" "http://127.0.0.1:$cport/healthz" "$cpid" "$work/cadvisor.log"

# cAdvisor scraped as a Prometheus server scrapes: every 15 s, gzip, its
# default Accept header; each scrape's start time goes to scrapes.
accept='application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1'
(
  trap 'exit 0' TERM
  start=$(date +%s.%N)
  while :; do
    # start time, exit status, seconds taken
    t=$(date +%s.%N)
    took=$(curl -sf --compressed -H "Accept: $accept" -o "$work/cadvisor.prom" -w '%{time_total}' "http://127.0.0.1:$cport/metrics") &&
      rc=0 || rc=$?
    echo "$t $rc $took" >>"$work/scrapes"
    # On a fixed 15-s grid, as a scrape loop keeps it: a slow curl must
    # not stretch the interval.
    sleep "$(awk -v s="$start" -v n="$(date +%s.%N)" -v i="$interval" 'BEGIN{print i - (n - s) % i}')" & wait $!
  done
) &
pids+=($!)

echo "containers: $count containers under /$base; gpuscope pids $gpid (rules) $npid (no rules), cAdvisor $cpid; warm-up ${warmup}s, window ${window}s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); work $work" >&2
nap "$warmup"

# Every 15 s over the window: time, then per process CPU ticks, VmRSS and
# RssAnon (kB).
sample() {
  local p line
  line=$(date +%s.%N)
  for p in "$gpid" "$npid" "$cpid"; do
    line+=" $(awk '{print $14+$15}' "/proc/$p/stat") $(awk '$1=="VmRSS:"{r=$2} $1=="RssAnon:"{a=$2} END{print r, a}' "/proc/$p/status")"
  done
  echo "$line" >>"$work/samples"
}
load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
for i in $(seq 1 $((window / interval))); do
  sample
  nap "$(awk -v s="$t0" -v n="$(date +%s.%N)" -v k="$i" -v i="$interval" 'BEGIN{d = s + k * i - n; print (d > 0 ? d : 0)}')"
done
sample
load1=$(cut -d' ' -f1 /proc/loadavg)

# query PORT EXPR: the first value of an instant query ("nan" if none).
query() {
  curl -sS "http://127.0.0.1:$1/api/v1/query" --data-urlencode "query=$2" |
    python3 -c 'import json,sys; r=json.load(sys.stdin).get("data",{}).get("result",[]); print(r[0]["value"][1] if r else "nan")'
}
w=$(awk -v a="$(head -1 "$work/samples" | cut -d' ' -f1)" -v b="$(tail -1 "$work/samples" | cut -d' ' -f1)" 'BEGIN{printf "%d", b-a+0.5}')
gscrapes=$(query "$port" "count_over_time(up{job=\"cadvisor\"}[${w}s])")
nscrapes=$(query "$nport" "count_over_time(up{job=\"cadvisor\"}[${w}s])")
gsamples=$(query "$port" 'scrape_samples_scraped{job="cadvisor"}')
nsamples=$(query "$nport" 'scrape_samples_scraped{job="cadvisor"}')
gseries=$(query "$port" 'prometheus_tsdb_head_series')
nseries=$(query "$nport" 'prometheus_tsdb_head_series')
containers=$(query "$port" "count(container_memory_rss{id=~\"/$base/.+\"})")
csamples=$(grep -vc '^#' "$work/cadvisor.prom" || true)
curl -sS "http://127.0.0.1:$port/api/v1/series" --data-urlencode "match[]={__name__=~\"container_.+\",job=\"cadvisor\",id=~\"/$base/.+\"}" >"$work/series.json"
hwm() { awk '$1=="VmHWM:"{print $2}' "/proc/$1/status"; }

python3 - "$work/samples" "$work/scrapes" "$(getconf CLK_TCK)" "$gscrapes $nscrapes" "$(hwm "$gpid") $(hwm "$npid") $(hwm "$cpid")" \
  "$gsamples $nsamples $csamples" "$work/series.json" "$work/cadvisor.prom" "/$base/" <<'EOF'
import json, re, statistics, sys
samples_f, scrapes_f, hz, scr, hwm, smp, series_f, prom_f, prefix = sys.argv[1:]
hz = float(hz)
rows = [list(map(float, l.split())) for l in open(samples_f)]
t0, t1 = rows[0][0], rows[-1][0]
cycles = (t1 - t0) / 15
curl_rows = [l.split() for l in open(scrapes_f)]
curl_rows = [r for r in curl_rows if t0 <= float(r[0]) < t1]
curls = sum(1 for r in curl_rows if r[1] == "0")
failed = len(curl_rows) - curls
took = sorted(float(r[2]) for r in curl_rows if len(r) > 2)
scrapes = [float(x) for x in scr.split()] + [curls]
hwm = [float(x) for x in hwm.split()]
smp = smp.split()
names = ["gpuscope serve (rules on)", "gpuscope serve (rules off)", "cAdvisor binary + curl"]
out = []
# Each process does one housekeeping of every container and serves one
# scrape per 15 s, so CPU per scrape is CPU over the window's 15-s
# cycles; the scrapes column (gpuscope: count_over_time of up, whose
# edges may lose one; cAdvisor: the curls) checks that.
print(f"window {t1 - t0:.0f} s = {cycles:.1f} cycles of 15 s")
print(f"{'process':<27} {'scrapes':>7} {'cpu_s':>6} {'ms/scrape':>9} {'med_ms/15s':>10} {'rss_med_MB':>10} {'rss_max_MB':>10} {'anon_med_MB':>11} {'hwm_MB':>6} {'samples/scrape':>14}")
for k, name in enumerate(names):
    c = [r[1 + 3 * k] for r in rows]
    rss = [r[2 + 3 * k] / 1024 for r in rows]
    anon = [r[3 + 3 * k] / 1024 for r in rows]
    cpu = (c[-1] - c[0]) / hz
    per = [(b - a) / hz * 1000 for a, b in zip(c, c[1:])]
    o = dict(cpu=cpu, ms=1000 * cpu / cycles, med=statistics.median(per), rss_med=statistics.median(rss),
             rss_max=max(rss), anon=statistics.median(anon), hwm=hwm[k] / 1024)
    out.append(o)
    print(f"{name:<27} {scrapes[k]:>7.0f} {cpu:>6.2f} {o['ms']:>9.1f} {o['med']:>10.1f} {o['rss_med']:>10.1f} {o['rss_max']:>10.1f} {o['anon']:>11.1f} {o['hwm']:>6.1f} {smp[k]:>14}")
print(f"curl: {curls} scrapes of cAdvisor in the window, {failed} failed, median {statistics.median(took) if took else float('nan'):.2f} s each")
for k in (0, 1):
    g, c = out[k], out[2]
    print(f"{names[k]} / cAdvisor: cpu per scrape {g['ms'] / c['ms']:.2f}x, median 15-s interval {g['med'] / c['med']:.2f}x, "
          f"rss median {g['rss_med'] / c['rss_med']:.2f}x, rss max {g['rss_max'] / c['rss_max']:.2f}x, anon median {g['anon'] / c['anon']:.2f}x")

# Label bytes per series: names and values of every label (what a head
# series stores, each string with a one-byte length in Prometheus's
# stringlabels layout, not counted here), and values alone.
WORKLOAD = ["workload", "runtime", "compose_project", "compose_service", "slurm_job_id", "slurm_step", "slurm_user", "user"]
series = json.load(open(series_f))["data"]
def size(ls, drop=()):
    kept = {k: v for k, v in ls.items() if k not in drop}
    return sum(len(k) + len(v) for k, v in kept.items()), sum(len(v) for v in kept.values())
def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")
w = [size(s) for s in series]
wo = [size(s, WORKLOAD) for s in series]
# The same containers' series as cAdvisor's binary exposes them (id, name,
# image and each metric's own labels; no job and instance, which a
# server adds).
pat = re.compile(r'^(\w+)\{(.*)\} ')
cad = []
for l in open(prom_f):
    m = pat.match(l)
    if not m or not m.group(1).startswith("container_"):
        continue
    ls = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
    if ls.get("id", "").startswith(prefix):
        ls["__name__"] = m.group(1)
        cad.append(size(ls))
print(f"label bytes per series, {len(series)} container_* head series of the bench's containers (recorded series left out):")
print(f"  with the workload labels:         {mean([a for a, _ in w]):.1f} B names+values, {mean([b for _, b in w]):.1f} B values")
print(f"  less the workload pairs:          {mean([a for a, _ in wo]):.1f} B names+values, {mean([b for _, b in wo]):.1f} B values")
print(f"  cAdvisor binary, same containers: {mean([a for a, _ in cad]):.1f} B names+values, {mean([b for _, b in cad]):.1f} B values ({len(cad)} samples; no job/instance)")
EOF
echo "containers=$containers head_series: rules on $gseries, rules off $nseries; load average ${load0} at the window's start, ${load1} at its end" >&2

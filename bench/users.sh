#!/usr/bin/env bash
# What the user label costs on the 200-container benchmark (issue 28's
# goal: under 5 % more series): two `gpuscope serve`, before (a git
# revision without the label) and after (this checkout), started together
# on the same 200 containers and sampled over the same window:
#
#   sudo bench/users.sh [BEFORE_REV=main] [window=120] [warmup=60] [containers=200] [layout=sessions]
#
# The containers are bench/containers.sh's (a cgroup in cpu, cpuacct,
# memory and pids with a `sleep` in each, every 50th a shell using ~3 % of
# a core), laid out as:
#   sessions  /gpuscope-bench-users/user.slice/user-<uid>.slice/session-<n>.scope,
#             20 users (uids 20001-20020, 10 sessions each), each sleep run
#             as its session's uid: every container gets a user;
#   raw       /gpuscope-bench-users/c001 ..., as containers.sh lays them
#             out: raw cgroups, which get no user.
# After gets a passwd naming the 20 uids (workloads.passwd_file); before,
# a revision that knows no workloads: section, gets none. Both: scrape
# and housekeeping every 15 s, built-in rules on, gpu.backend none, only
# the bench's cgroups (raw_cgroup_prefix_allowlist).
#
# It prints per side: the TSDB's head series and the series created over
# the window (churn), the container_* series of the bench's cgroups and
# the recorded series, label bytes per container series (names and values
# of every label), CPU per 15 s and median RSS; then after / before.
# BEFORE_BIN and AFTER_BIN take built binaries instead; SWAP=1 starts
# after first (the order biases CPU: compare runs in both orders). Needs
# root and cgroup v1 (as containers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
before_rev=${1:-main}
window=${2:-120}
warmup=${3:-60}
count=${4:-200}
layout=${5:-sessions}
interval=15
for a in window warmup count; do
  [[ ${!a} =~ ^[0-9]+$ ]] || { echo "users: $a must be a whole number, got '${!a}'" >&2; exit 2; }
done
[[ $layout == sessions || $layout == raw ]] || { echo "users: layout is sessions or raw, got '$layout'" >&2; exit 2; }
(( window >= interval && count >= 1 )) || { echo "users: window must be at least ${interval}s and containers at least 1" >&2; exit 2; }
[[ $EUID -eq 0 ]] || { echo "users: needs root (it makes cgroups and runs processes as other users)" >&2; exit 1; }
ctls=(cpu cpuacct memory pids)
for ctl in "${ctls[@]}"; do
  [[ -d /sys/fs/cgroup/$ctl && ! -f /sys/fs/cgroup/cgroup.controllers ]] ||
    { echo "users: needs cgroup v1 with /sys/fs/cgroup/$ctl" >&2; exit 1; }
done
base=gpuscope-bench-users
for ctl in "${ctls[@]}"; do
  [[ ! -d /sys/fs/cgroup/$ctl/$base ]] || { echo "users: /sys/fs/cgroup/$ctl/$base exists (another run? remove it when empty)" >&2; exit 1; }
done

GPUSCOPE_BIN=${AFTER_BIN:-} source bench/lib.sh
after=$bin
before=${BEFORE_BIN:-}
if [[ -z "$before" ]]; then
  git worktree add -q --detach "$work/before-src" "$before_rev"
  on_exit+=("git worktree remove --force '$work/before-src'")
  (cd "$work/before-src" && CGO_CFLAGS="-Wno-deprecated-declarations" go build -o "$work/gpuscope-before" .)
  before=$work/gpuscope-before
fi
trap 'exit 130' INT TERM HUP
nap() { sleep "$1" & wait $!; }

# The containers, their processes, and the passwd naming their users.
passwd=$work/passwd
for u in $(seq 1 20); do echo "user$u:x:$((20000 + u)):$((20000 + u))::/home/user$u:/bin/sh"; done >"$passwd"
dirs=()
for i in $(seq 1 "$count"); do
  if [[ $layout == sessions ]]; then
    uid=$((20001 + (i - 1) / 10 % 20))
    dirs+=("user.slice/user-$uid.slice/session-$i.scope")
  else
    uid=0
    dirs+=("$(printf 'c%03d' "$i")")
  fi
done
on_exit+=('for ctl in "${ctls[@]}"; do
    for c in $(find /sys/fs/cgroup/$ctl/$base -name cgroup.procs 2>/dev/null); do kill $(cat "$c") 2>/dev/null; done
  done
  for ctl in "${ctls[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find /sys/fs/cgroup/$ctl/$base -depth -type d -exec rmdir {} + 2>/dev/null; [[ -d /sys/fs/cgroup/$ctl/$base ]] || break; sleep 0.2
    done
    [[ ! -d /sys/fs/cgroup/$ctl/$base ]] || echo "users: could not remove /sys/fs/cgroup/$ctl/$base" >&2
  done')
for i in $(seq 1 "$count"); do
  d=${dirs[$((i - 1))]}
  for ctl in "${ctls[@]}"; do mkdir -p "/sys/fs/cgroup/$ctl/$base/$d"; done
  uid=0
  [[ $layout == raw ]] || uid=$(sed -E 's/.*user-([0-9]+)\.slice.*/\1/' <<<"$d")
  if (( i % 50 == 0 )); then
    cmd='while :; do for ((i = 0; i < 20000; i++)); do :; done; sleep 1; done'
  else
    cmd='exec sleep infinity'
  fi
  # Joins the cgroups as root, then becomes the session's user.
  bash -c 'for ctl in cpu cpuacct memory pids; do echo $$ >"/sys/fs/cgroup/$ctl/$0/cgroup.procs"; done; exec setpriv --reuid="$2" --regid="$2" --clear-groups bash -c "$1"' "$base/$d" "$cmd" "$uid" &
  pids+=($!)
done

conf() { # conf FILE [extra yaml]
  cat >"$1" <<EOF
global:
  scrape_interval: ${interval}s
cadvisor:
  housekeeping_interval: ${interval}s
  raw_cgroup_prefix_allowlist: [/$base]
gpu:
  backend: none
self_metrics:
  families: {tsdb_detail: true}  # prometheus_tsdb_head_series_created_total, for the churn
$2
EOF
}
conf "$work/before.yml" ""
conf "$work/after.yml" "workloads:
  passwd_file: $passwd"
start_before() {
  bport=$(freeport)
  "$before" serve --config.file="$work/before.yml" --web.listen-address=127.0.0.1:$bport --storage.tsdb.path="$work/data-before" >"$work/before.log" 2>&1 &
  bpid=$!; pids+=("$bpid")
}
start_after() {
  aport=$(freeport)
  "$after" serve --config.file="$work/after.yml" --web.listen-address=127.0.0.1:$aport --storage.tsdb.path="$work/data-after" >"$work/after.log" 2>&1 &
  apid=$!; pids+=("$apid")
}
# The side started second was seen to use up to a fifth more CPU than the
# first with the same binary on both (2 shared cores): SWAP=1 starts after
# first, so that runs in both orders can be set side by side.
if [[ -n "${SWAP:-}" ]]; then start_after; start_before; else start_before; start_after; fi
ready "$bport"
ready "$aport"
echo "users: $count containers ($layout) under /$base; before $before_rev (pid $bpid), after this checkout (pid $apid); warm-up ${warmup}s, window ${window}s; load $(cut -d' ' -f1-3 /proc/loadavg); work $work" >&2
nap "$warmup"

query() { # query PORT EXPR: the first value of an instant query ("nan" if none)
  curl -sS "http://127.0.0.1:$1/api/v1/query" --data-urlencode "query=$2" |
    python3 -c 'import json,sys; r=json.load(sys.stdin).get("data",{}).get("result",[]); print(r[0]["value"][1] if r else "nan")'
}
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss() { awk '$1=="VmRSS:"{print $2}' "/proc/$1/status"; }
# Series created: the head's count of every series it made (from /metrics,
# with self_metrics' tsdb_detail on in both).
created() { curl -sS "http://127.0.0.1:$1/metrics" | awk '$1=="prometheus_tsdb_head_series_created_total"{print $2}'; }
created0_b=$(created "$bport")
created0_a=$(created "$aport")
c0_b=$(cpu "$bpid") c0_a=$(cpu "$apid") t0=$(date +%s.%N) load0=$(cut -d' ' -f1 /proc/loadavg)
rss_b=() rss_a=()
for _ in $(seq 1 $((window / interval))); do
  nap "$interval"
  rss_b+=("$(rss "$bpid")") rss_a+=("$(rss "$apid")")
done
c1_b=$(cpu "$bpid") c1_a=$(cpu "$apid") t1=$(date +%s.%N) load1=$(cut -d' ' -f1 /proc/loadavg)
ticks=$(getconf CLK_TCK)

report() { # report NAME PORT CPU0 CPU1 CREATED0 RSS...
  local name=$1 port=$2 c0=$3 c1=$4 cr0=$5
  shift 5
  local head cr1 cont rec
  head=$(query "$port" 'prometheus_tsdb_head_series')
  cr1=$(created "$port")
  curl -sS "http://127.0.0.1:$port/api/v1/query" --data-urlencode 'query=count by (__name__) ({__name__=~".+"})' |
    python3 -c 'import json,sys; [print(r["metric"]["__name__"], r["value"][1]) for r in json.load(sys.stdin)["data"]["result"]]' | sort >"$work/names-$name"
  cont=$(query "$port" "count({__name__=~\"container_.+\",job=\"cadvisor\",id=~\"/$base/.+\"})")
  rec=$(query "$port" "count({__name__=~\".+:.+\"})")
  raw=$(query "$port" "count({__name__=~\"[^:]+\"})")
  curl -sS "http://127.0.0.1:$port/api/v1/series" --data-urlencode "match[]={__name__=~\"container_.+\",job=\"cadvisor\",id=~\"/$base/.+\"}" >"$work/series-$name.json"
  python3 - "$name" "$head" "$cr0" "$cr1" "$cont" "$rec" "$raw" "$c0" "$c1" "$ticks" "$t0" "$t1" "$work/series-$name.json" "$@" <<'EOF'
import json, statistics, sys
name, head, cr0, cr1, cont, rec, raw, c0, c1, hz, t0, t1, series_f = sys.argv[1:14]
rss = [float(x) / 1024 for x in sys.argv[14:]]
series = json.load(open(series_f))["data"]
nv = [sum(len(k) + len(v) for k, v in s.items()) for s in series]
users = sorted({s.get("user", "") for s in series})
cycles = (float(t1) - float(t0)) / 15
cpu_ms = (float(c1) - float(c0)) / float(hz) * 1000 / cycles
print(f"{name}\t{float(head):.0f}\t{float(cr1) - float(cr0):.0f}\t{float(raw):.0f}\t{float(cont):.0f}\t{float(rec):.0f}\t{statistics.mean(nv):.1f}\t{cpu_ms:.0f}\t{statistics.median(rss):.0f}\t{len(users)}")
EOF
}
{
  echo -e "side\thead_series\tcreated_in_window\tscraped_series\tcontainer_series\trecorded_series\tlabel_B_per_series\tcpu_ms_per_15s\trss_MB\tdistinct_users"
  report before "$bport" "$c0_b" "$c1_b" "$created0_b" "${rss_b[@]}"
  report after "$aport" "$c0_a" "$c1_a" "$created0_a" "${rss_a[@]}"
} | tee "$work/report.tsv" | column -t
python3 - "$work/report.tsv" <<'EOF'
import csv, sys
rows = {r["side"]: r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")}
b, a = rows["before"], rows["after"]
for k in ("head_series", "scraped_series", "container_series", "recorded_series", "label_B_per_series", "cpu_ms_per_15s", "rss_MB"):
    print(f"after / before, {k}: {float(a[k]) / float(b[k]):.4f} ({float(a[k]) - float(b[k]):+.1f})")
EOF
echo "series by metric name that differ (name, before, after):"
join -a1 -a2 -e0 -o 0,1.2,2.2 "$work/names-before" "$work/names-after" | awk '$2 != $3'
echo "load average ${load0} at the window's start, ${load1} at its end" >&2

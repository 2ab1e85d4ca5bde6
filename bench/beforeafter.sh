#!/usr/bin/env bash
# The idle cost of a change: two `gpuscope serve` binaries, before and
# after, with their embedded defaults, started together on the same host
# and sampled over the same window, repeated and summarised by medians:
#
#   bench/beforeafter.sh BEFORE_REV [runs=3] [idle_seconds=300] [extra serve flags...]
#
# BEFORE_REV is a git revision built into the work directory (or give
# BEFORE_BIN, a built binary); "after" is this checkout (or AFTER_BIN).
# Each side gets its own data directory and free port; after a warm-up
# (WARMUP, 45 s) the script samples every 15 s: CPU (utime+stime of
# /proc/<pid>/stat) and VmRSS. It prints, per run and as medians over the
# runs: each side's CPU (% of one core) and median RSS, and after - before.
# Starting both at once is the point: a shared, noisy machine slows both
# alike, which two runs an hour apart do not.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || ${1:-} == -h || ${1:-} == --help ]]; then
  echo "usage: bench/beforeafter.sh BEFORE_REV [runs=3] [idle_seconds=300] [extra serve flags...]" >&2
  echo "  env: BEFORE_BIN, AFTER_BIN (built binaries), WARMUP=45, KEEP=1" >&2
  exit 2
fi
before_rev=$1
runs=${2:-3}
window=${3:-300}
shift $(($# < 3 ? $# : 3))
warmup=${WARMUP:-45}
[[ $runs =~ ^[0-9]+$ && $runs -ge 1 ]] || { echo "beforeafter: runs must be a positive integer, got $runs" >&2; exit 2; }
[[ $window =~ ^[0-9]+$ && $window -ge 15 ]] || { echo "beforeafter: idle_seconds must be at least 15, got $window" >&2; exit 2; }

GPUSCOPE_BIN=${AFTER_BIN:-} source bench/lib.sh
after=$bin
before=${BEFORE_BIN:-}
if [[ -z "$before" ]]; then
  git worktree add -q --detach "$work/before-src" "$before_rev"
  on_exit+=("git worktree remove --force '$work/before-src'")
  (cd "$work/before-src" && CGO_CFLAGS="-Wno-deprecated-declarations" go build -o "$work/gpuscope-before" .)
  before=$work/gpuscope-before
fi

ticks=$(getconf CLK_TCK)
side() { # side NAME BIN RUN [flags]: starts it; sets side_pid, side_port
  side_port=$(freeport)
  "$2" serve --web.listen-address=127.0.0.1:"$side_port" --storage.tsdb.path="$work/$1-$3" "${@:4}" >"$work/$1-$3.log" 2>&1 &
  side_pid=$!
  pids+=("$side_pid")
}
sample() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss() { awk '/^VmRSS/{print $2*1024}' "/proc/$1/status"; }

for ((run = 1; run <= runs; run++)); do
  side before "$before" "$run" "$@"
  bpid=$side_pid bport=$side_port
  side after "$after" "$run" "$@"
  apid=$side_pid aport=$side_port
  ready "$bport"
  ready "$aport"
  sleep "$warmup"
  load0=$(cut -d' ' -f1 /proc/loadavg)
  b0=$(sample "$bpid") a0=$(sample "$apid") t0=$(date +%s.%N)
  : >"$work/rss-$run"
  for ((s = 0; s < window; s += 15)); do
    sleep 15
    echo "$(rss "$bpid") $(rss "$apid")" >>"$work/rss-$run"
  done
  b1=$(sample "$bpid") a1=$(sample "$apid") t1=$(date +%s.%N)
  load1=$(cut -d' ' -f1 /proc/loadavg)
  kill "$bpid" "$apid"
  wait "$bpid" "$apid" 2>/dev/null || true
  python3 - "$run" "$ticks" "$t0" "$t1" "$b0" "$b1" "$a0" "$a1" "$work/rss-$run" "$load0" "$load1" >>"$work/runs" <<'EOF'
import statistics, sys
run, ticks, t0, t1, b0, b1, a0, a1, f, l0, l1 = sys.argv[1:]
wall = float(t1) - float(t0)
cpu = lambda c0, c1: (float(c1) - float(c0)) / float(ticks) / wall * 100
rows = [list(map(float, l.split())) for l in open(f)]
bc, ac = cpu(b0, b1), cpu(a0, a1)
br, ar = statistics.median(r[0] for r in rows) / 1e6, statistics.median(r[1] for r in rows) / 1e6
print(run, f"{bc:.3f}", f"{ac:.3f}", f"{br:.1f}", f"{ar:.1f}", f"{wall:.0f}", l0, l1)
EOF
  read -r _ bc ac br ar wall l0 l1 < <(tail -1 "$work/runs")
  echo "run $run: window ${wall}s, load $l0 -> $l1: before ${bc}% of a core, ${br} MB; after ${ac}% , ${ar} MB"
done

python3 - "$work/runs" "$before_rev" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
col = lambda i: statistics.median(float(r[i]) for r in rows)
bc, ac, br, ar = col(1), col(2), col(3), col(4)
print(f"medians of {len(rows)} runs (before = {sys.argv[2]}, after = this checkout):")
print(f"  CPU  before {bc:.3f} %  after {ac:.3f} %  after - before {ac - bc:+.3f} % of a core")
print(f"  RSS  before {br:.1f} MB  after {ar:.1f} MB  after - before {ar - br:+.1f} MB")
EOF

#!/usr/bin/env bash
# gpuscope's hardware check, for a machine with an NVIDIA GPU and driver.
#
#   scripts/check-real-gpu.sh [BINDIR]
#
# BINDIR holds what scripts/build-gpu-check.sh built elsewhere: gpu.test
# (go test -c -tags realgpu ./gpu/), gpuload and gpuscope (or gpuscope.gz).
# Default: this script's own folder if gpu.test is there, else .gpucheck/
# at the repository root. This script builds nothing and needs no CUDA
# toolkit, no Go and no network: only the driver (nvidia-smi, libcuda,
# libnvidia-ml).
#
# It runs the realgpu test (gpu/realgpu_test.go) at idle and under three
# loads of gpuload, each in a cgroup of its own, as root and as an
# unprivileged user (GPUCHECK_USER, default nobody), and gpuscope's agent
# under the FMA load; the test compares gpuscope with nvidia-smi:
#
#   identity        UUID and pci_bus_id exact, every GPU
#   memory          used, free, total ±64 MiB
#   fma             GPU_UTIL > 80 %, PROF_GR_ENGINE_ACTIVE > 0.8
#   copy            PROF_DRAM_ACTIVE > 0.3
#   energy          energy counter increase vs power × time ±30 %
#   load process    container memory vs nvidia-smi --query-compute-apps
#                   ±64 MiB, and its id vs /proc/<pid>/cgroup
#
# It writes to $OUT (default ./gpucheck-out): report.txt (the PASS/FAIL
# table, the measured figures, the environment), summary.tsv and
# raw.tar.gz (every log, nvidia-smi output and exposition). The whole run
# takes about 3 minutes and stops itself before 8. Exit status: 0 when
# nothing failed, 1 otherwise.
#
# Environment: OUT, GPUCHECK_GPU (the nvidia-smi index to load, default 0),
# GPUCHECK_USER (default nobody), GPUCHECK_BUDGET_S (default 420: later
# steps are skipped once the run is this old).

set -euo pipefail

readonly started=$SECONDS
readonly budget=${GPUCHECK_BUDGET_S:-420}
readonly gpu_index=${GPUCHECK_GPU:-0}
readonly unpriv=${GPUCHECK_USER:-nobody}
readonly load_secs=240 # upper bound; each load is stopped when its checks are done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -ge 1 ]]; then
  bindir=$1
elif [[ -e $here/gpu.test ]]; then
  bindir=$here
else
  bindir=$here/../.gpucheck
fi
out=${OUT:-./gpucheck-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Scratch space the unprivileged user can read: binaries, logs, expositions.
work=$(mktemp -d /tmp/gpucheck.XXXXXX)
chmod 755 "$work"
raw=$work/raw
mkdir -p "$raw"
chmod 777 "$raw"

results=() # "check<TAB>user<TAB>result<TAB>detail"
load_pid=""
load_gpu=$gpu_index
cg_procs=""
cgroup_dirs=()
agent_pid=""

log() { printf '[%4ds] %s\n' "$((SECONDS - started))" "$*" | tee -a "$raw/check.log" >&2; }

record() { # check user result detail
  results+=("$1	$2	$3	${4:-}")
  log "$3: $1 ($2) ${4:-}"
}

over_budget() { (( SECONDS - started > budget )); }

write_report() {
  local rc=0 r n_pass=0 n_fail=0 n_skip=0
  {
    printf 'check\tuser\tresult\tdetail\n'
    for r in "${results[@]}"; do printf '%s\n' "$r"; done
  } >"$out/summary.tsv"
  for r in "${results[@]}"; do
    case $(cut -f3 <<<"$r") in
      PASS*) n_pass=$((n_pass + 1)) ;;
      SKIP*) n_skip=$((n_skip + 1)) ;;
      *) n_fail=$((n_fail + 1)) ;;
    esac
  done
  ((n_fail == 0)) || rc=1
  {
    echo "gpuscope hardware check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - started)) s"
    echo "binaries: $bindir"
    echo
    printf '%-62s %-8s %-6s %s\n' CHECK USER RESULT DETAIL
    for r in "${results[@]}"; do
      IFS=$'\t' read -r c u res d <<<"$r"
      printf '%-62s %-8s %-6s %s\n' "$c" "$u" "$res" "$d"
    done
    echo
    echo "PASS $n_pass, FAIL $n_fail, SKIP $n_skip"
    echo
    echo "== Figures (gpucheck: lines of the test logs) =="
    for f in "$raw"/test-*/test.log; do
      [[ -f $f ]] || continue
      echo "-- ${f#"$raw"/}"
      grep -h 'gpucheck:' "$f" | sed 's/^[[:space:]]*realgpu_test.go:[0-9]*: gpucheck: /  /' || true
    done
    echo
    echo "== gpuload =="
    grep -h '^gpuload:' "$raw"/load-*.log 2>/dev/null || true
    echo
    echo "== Failures and skips (test logs) =="
    grep -rh -B2 -A12 -E -- '--- (FAIL|SKIP)' "$raw" --include=test.log 2>/dev/null | head -400 || true
    echo
    echo "== Environment =="
    cat "$raw/env.txt" 2>/dev/null || true
  } >"$out/report.txt"
  tar -C "$work" -czf "$out/raw.tar.gz" raw 2>/dev/null || true
  return "$rc"
}

cleanup() {
  local rc=$?
  set +e
  [[ -n $load_pid ]] && kill -KILL "$load_pid" 2>/dev/null
  [[ -n $agent_pid ]] && kill -KILL "$agent_pid" 2>/dev/null
  wait 2>/dev/null
  for d in "${cgroup_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
  write_report || rc=1
  log "report: $out/report.txt"
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# as_user USER: sets as to the command prefix that runs a command as USER
# (empty for root). setpriv execs the command itself, so that $! and the
# exit status are the command's; runuser, used where setpriv is missing,
# stays in between and answers a signal with its own status.
as=()
as_user() {
  as=()
  if [[ $1 == root ]]; then
    return 0
  elif command -v setpriv >/dev/null; then
    as=(setpriv --reuid="$(id -u "$1")" --regid="$(id -g "$1")" --clear-groups --)
  else
    as=(runuser -u "$1" --)
  fi
}

# fetch URL: prints the body; curl, else python3, else bash's /dev/tcp.
fetch() {
  if command -v curl >/dev/null; then
    curl -fsS --max-time 5 "$1"
  elif command -v python3 >/dev/null; then
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
  else
    local hp=${1#http://} path
    path=/${hp#*/}
    hp=${hp%%/*}
    exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}"
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hp" >&3
    sed '1,/^\r$/d' <&3
    exec 3<&-
  fi
}

# --- Preflight -------------------------------------------------------------

users=(root)
preflight() {
  local f
  for f in gpu.test gpuload; do
    if [[ ! -x $bindir/$f ]]; then
      record "binaries present" root FAIL "$bindir/$f missing: run scripts/build-gpu-check.sh on a build machine and carry its folder"
      return 1
    fi
    cp "$bindir/$f" "$work/$f"
  done
  if [[ -x $bindir/gpuscope ]]; then
    cp "$bindir/gpuscope" "$work/gpuscope"
  elif [[ -f $bindir/gpuscope.gz ]]; then
    gzip -dc "$bindir/gpuscope.gz" >"$work/gpuscope"
  fi
  chmod 755 "$work"/gpu* 2>/dev/null || true
  if ! timeout 60 nvidia-smi -L >"$raw/nvidia-smi-L.txt" 2>&1; then
    record "nvidia-smi answers" root FAIL "$(head -c 300 "$raw/nvidia-smi-L.txt")"
    return 1
  fi
  record "nvidia-smi answers" root PASS "$(head -n1 "$raw/nvidia-smi-L.txt")"
  {
    echo "uname: $(uname -a)"
    echo "id: $(id)"
    echo "driver: $(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)"
    echo "gpus:"
    cat "$raw/nvidia-smi-L.txt"
    echo "cgroup of this script:"
    cat /proc/self/cgroup
    echo "cgroup mounts:"
    grep cgroup /proc/mounts || true
    echo "devices:"
    ls -l /dev/nvidia* 2>&1 || true
    echo "libraries:"
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvidia-ml\.so' || true
  } >"$raw/env.txt" 2>&1
  timeout 60 nvidia-smi -q >"$raw/nvidia-smi-q.txt" 2>&1 || true
  if id "$unpriv" >/dev/null 2>&1 && { command -v runuser >/dev/null || command -v setpriv >/dev/null; }; then
    as_user "$unpriv"
    if "${as[@]}" timeout 30 "$work/gpu.test" -test.list 'TestRealGPU' >/dev/null 2>"$raw/unpriv-probe.txt"; then
      users+=("$unpriv")
    else
      record "run as $unpriv" "$unpriv" SKIP "cannot run the test binary: $(head -c 200 "$raw/unpriv-probe.txt")"
    fi
  else
    record "run as $unpriv" "$unpriv" SKIP "no user $unpriv, or neither runuser nor setpriv"
  fi
}

# --- The realgpu test --------------------------------------------------------

# run_test LOAD USER GPU [PID]: the realgpu test, one row per test and subtest.
run_test() {
  local load=$1 user=$2 gpu=$3 pid=${4:-} dir rc=0 line name res
  dir=$raw/test-$load-$user
  mkdir -p "$dir"
  chmod 777 "$dir"
  if over_budget; then
    record "realgpu test, load $load" "$user" SKIP "time budget of ${budget} s spent"
    return 0
  fi
  as_user "$user"
  "${as[@]}" timeout 150 env PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" GPUCHECK_LOAD="$load" GPUCHECK_LOAD_PID="$pid" GPUCHECK_GPU="$gpu" \
    GPUCHECK_OUT="$dir" TMPDIR=/tmp "$work/gpu.test" -test.run '^TestRealGPU' -test.v -test.count=1 \
    -test.timeout 140s >"$dir/test.log" 2>&1 || rc=$?
  (cd "$dir" && timeout 30 nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv >smi-compute-apps.csv 2>&1) || true
  local n=0 lines=()
  mapfile -t lines <"$dir/test.log"
  for line in "${lines[@]}"; do
    [[ $line =~ ^[[:space:]]*---\ (PASS|FAIL|SKIP):\ ([^[:space:]]+) ]] || continue
    res=${BASH_REMATCH[1]}
    name=${BASH_REMATCH[2]}
    n=$((n + 1))
    local detail=""
    if [[ $res == FAIL ]]; then
      # testify's first message for this test, if any.
      detail=$(awk -v n="$name" '$1 == "Test:" && $2 == n { f = 1 } f && $1 == "Messages:" { $1 = ""; print substr($0, 2); exit }' "$dir/test.log")
    fi
    record "[$load] $name" "$user" "$res" "$detail"
  done
  if ((rc == 124)); then
    record "[$load] realgpu test" "$user" FAIL "timed out after 150 s"
  elif ((rc != 0 && n == 0)); then
    record "[$load] realgpu test" "$user" FAIL "exit $rc: $(tail -n 3 "$dir/test.log" | tr '\n' ' ')"
  fi
}

# --- Loads --------------------------------------------------------------------

# make_cgroup NAME: creates cgroup NAME (cgroup v2, or v1's cpu hierarchy,
# by which cAdvisor names containers) and sets cg_procs to the file that
# moves a pid into it; cg_procs is empty when no cgroup can be made here.
make_cgroup() {
  local name=$1 base=""
  cg_procs=""
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    base=/sys/fs/cgroup
  elif [[ -d /sys/fs/cgroup/cpu ]]; then
    base=/sys/fs/cgroup/cpu
  fi
  if [[ -z $base ]]; then
    echo "$name: no cgroup v2 or v1 cpu hierarchy mounted" >>"$raw/cgroup-errors.txt"
    return 0
  fi
  if mkdir -p "$base/$name" 2>>"$raw/cgroup-errors.txt" && [[ -w $base/$name/cgroup.procs ]]; then
    cgroup_dirs+=("$base/$name")
    cg_procs=$base/$name/cgroup.procs
  fi
}

# smi_index BUS_ID: the nvidia-smi index of the GPU at a PCI address,
# whatever the domain's width.
smi_index() {
  local want=${1##*:} bus=${1%:*}
  bus=${bus##*:}
  timeout 30 nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader |
    awk -F', *' -v b="$bus" -v d="$want" '{ n = split($2, p, ":"); if (tolower(p[n-1]) == tolower(b) && tolower(p[n]) == tolower(d)) print $1 }'
}

# start_load MODE: starts gpuload in its own cgroup; sets load_pid and
# load_gpu. Returns 1 if the load did not come up.
start_load() {
  local mode=$1 procs i
  make_cgroup "gpucheck-$mode"
  procs=$cg_procs
  # The subshell moves itself into the cgroup, then becomes gpuload (exec),
  # so that $! is gpuload's pid.
  (
    if [[ -n $procs ]]; then echo "$BASHPID" >"$procs" || true; fi
    CUDA_DEVICE_ORDER=PCI_BUS_ID exec env -u CUDA_VISIBLE_DEVICES "$work/gpuload" -mode "$mode" \
      -duration "${load_secs}s" -device "$gpu_index"
  ) >"$raw/load-$mode.log" 2>&1 &
  load_pid=$!
  for ((i = 0; i < 120; i++)); do
    if grep -q '^gpuload: ready' "$raw/load-$mode.log"; then break; fi
    if ! kill -0 "$load_pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  if ! grep -q '^gpuload: ready' "$raw/load-$mode.log"; then
    record "gpuload $mode starts" root FAIL "$(tr '\n' ' ' <"$raw/load-$mode.log" | head -c 400)"
    stop_load "$mode" >/dev/null || true
    return 1
  fi
  local bus
  bus=$(sed -n 's/^gpuload: ready .*bus_id=\([^ ]*\).*/\1/p' "$raw/load-$mode.log")
  load_gpu=$(smi_index "$bus")
  load_gpu=${load_gpu:-$gpu_index}
  cp "/proc/$load_pid/cgroup" "$raw/load-$mode.cgroup" 2>/dev/null || true
  local own="its own cgroup ${procs%/cgroup.procs}"
  [[ -n $procs ]] || own="no cgroup of its own (see cgroup-errors.txt)"
  record "gpuload $mode starts" root PASS "pid $load_pid on GPU $load_gpu ($bus), $own; /proc/$load_pid/cgroup: $(tr '\n' ' ' <"/proc/$load_pid/cgroup" 2>/dev/null | head -c 200)"
  sleep 3 # utilisation is averaged over the last second or so
}

# stop_load MODE: SIGTERM, 15 s grace, then SIGKILL; gpuload must exit 0.
stop_load() {
  local mode=$1 rc=0 i
  [[ -n $load_pid ]] || return 0
  kill -TERM "$load_pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    kill -0 "$load_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$load_pid" 2>/dev/null; then
    kill -KILL "$load_pid" 2>/dev/null || true
    record "gpuload $mode stops on SIGTERM" root FAIL "still running after 15 s; killed"
  fi
  wait "$load_pid" || rc=$?
  load_pid=""
  if ((rc == 0)); then
    record "gpuload $mode stops on SIGTERM" root PASS "$(grep '^gpuload: done' "$raw/load-$mode.log" | head -n1)"
  else
    record "gpuload $mode stops on SIGTERM" root FAIL "exit $rc"
  fi
}

# --- gpuscope itself ------------------------------------------------------------

# run_agent LOAD USER PORT: gpuscope agent with the NVML backend; its
# /metrics/gpu must have collector_up 1 and GPU_UTIL; it must stop within
# 2 s of SIGTERM.
run_agent() {
  local load=$1 user=$2 port=$3 cfg body i t0 rc=0 log
  [[ -x $work/gpuscope ]] || {
    record "[$load] gpuscope agent /metrics/gpu" "$user" SKIP "no gpuscope binary in $bindir"
    return 0
  }
  over_budget && {
    record "[$load] gpuscope agent /metrics/gpu" "$user" SKIP "time budget of ${budget} s spent"
    return 0
  }
  cfg=$work/agent.yml
  printf 'global:\n  scrape_interval: 2s\n' >"$cfg"
  chmod 644 "$cfg"
  log=$raw/agent-$load-$user.log
  # A simple command in the background, through exec-ing wrappers only
  # (setpriv, env): $! is the agent itself. No timeout(1) in between, which
  # would answer SIGTERM with its own status; it is killed below anyway.
  as_user "$user"
  "${as[@]}" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$work/gpuscope" agent --config.file="$cfg" --gpu.backend=nvml \
    --web.listen-address="127.0.0.1:$port" >"$log" 2>&1 &
  agent_pid=$!
  body=""
  for ((i = 0; i < 40; i++)); do
    sleep 0.5
    if body=$(fetch "http://127.0.0.1:$port/metrics/gpu" 2>/dev/null) && grep -q '^DCGM_FI_DEV_GPU_UTIL{' <<<"$body"; then
      break
    fi
    kill -0 "$agent_pid" 2>/dev/null || break
  done
  sleep 4 # two more samples, under the load
  body=$(fetch "http://127.0.0.1:$port/metrics/gpu" 2>/dev/null) || true
  printf '%s\n' "$body" >"$raw/agent-$load-$user.prom"
  if grep -q '^gpuscope_gpu_collector_up 1' <<<"$body" && grep -q '^DCGM_FI_DEV_GPU_UTIL{' <<<"$body"; then
    record "[$load] gpuscope agent /metrics/gpu" "$user" PASS "$(grep -c '^DCGM_FI_' <<<"$body") DCGM series; $(grep -m1 '^DCGM_FI_DEV_GPU_UTIL{' <<<"$body" | sed 's/{.*}//')"
  else
    record "[$load] gpuscope agent /metrics/gpu" "$user" FAIL "$(grep -m1 '^gpuscope_gpu_collector_up' <<<"$body" || tail -n 2 "$log" | tr '\n' ' ')"
  fi
  t0=$(date +%s.%N)
  kill -TERM "$agent_pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$agent_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$agent_pid" 2>/dev/null || true
  wait "$agent_pid" || rc=$?
  agent_pid=""
  local took
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if awk -v t="$took" 'BEGIN { exit !(t <= 2.0) }'; then
    record "[$load] gpuscope agent stops on SIGTERM" "$user" PASS "${took} s, exit $rc"
  else
    record "[$load] gpuscope agent stops on SIGTERM" "$user" FAIL "${took} s (want ≤ 2 s), exit $rc"
  fi
}

# --- Run -------------------------------------------------------------------------

log "binaries: $bindir; output: $out; unprivileged user: $unpriv"
preflight || exit 1

for u in "${users[@]}"; do run_test idle "$u" "$gpu_index"; done

port=19089
for mode in fma copy alloc; do
  if over_budget; then
    record "load $mode" root SKIP "time budget of ${budget} s spent"
    continue
  fi
  load_gpu=$gpu_index
  start_load "$mode" || continue
  timeout 30 nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv >"$raw/load-$mode-compute-apps.csv" 2>&1 || true
  timeout 30 nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,power.draw,clocks.sm --format=csv >"$raw/load-$mode-gpu.csv" 2>&1 || true
  for u in "${users[@]}"; do run_test "$mode" "$u" "$load_gpu" "$load_pid"; done
  if [[ $mode == fma ]]; then
    for u in "${users[@]}"; do
      run_agent "$mode" "$u" "$port"
      port=$((port + 1))
    done
  fi
  stop_load "$mode"
done
log "done in $((SECONDS - started)) s"

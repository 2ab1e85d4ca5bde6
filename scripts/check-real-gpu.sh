#!/usr/bin/env bash
# gpuscope's hardware check, for a machine with an NVIDIA GPU and driver.
#
#   scripts/check-real-gpu.sh [BINDIR]
#
# BINDIR holds what scripts/build-gpu-check.sh built elsewhere: gpu.test.gz
# (go test -c -tags realgpu ./gpu/), gpuload, gpuscope.gz and tensorload.py
# (gpu.test and gpuscope uncompressed work too). Default: this script's own
# folder if it holds gpu.test(.gz), else .gpucheck/ at the repository root.
# It builds nothing and needs no CUDA toolkit, no Go and no network: only
# the driver (nvidia-smi, libcuda, libnvidia-ml), bash, coreutils
# (timeout, stdbuf), setpriv or runuser, and python3 (torch optional).
# It changes no GPU setting: no -pm, no MIG, no clocks, no reset.
#
# How to run it on a lent GPU machine (the device tool; 26 MiB carried as
# measured: the tree 3 MiB, .gpucheck 23 MiB):
#
#   scripts/build-gpu-check.sh            # here: builds .gpucheck/, fails over 60 MiB
#   run(command="OUT=$OUT scripts/check-real-gpu.sh .gpucheck",
#       carry=[".gpucheck"], timeout_s=480)
#
# The script stops itself within GPUCHECK_BUDGET_S (default 420) plus the
# 5 s kill grace; the tool's timeout is a backstop. GPUCHECK_BUDGET_S=300
# with timeout_s=400 if the device time left is short. Even if the run is killed
# (SIGKILL), $OUT keeps summary.tsv (a row appended as each is recorded),
# check.log (every line as it is logged), report.txt and raw/ (both brought
# up to date after every step).
#
# Steps, with the time each takes on an H200 (estimated) and its cap:
#
#   preflight  15 s   nvidia-smi answers; env.txt; torch probe (background)
#   dmon        1 s   nvidia-smi dmon -s pucmt -d 1 -o DT runs throughout
#                     (-s pucm as asked, t for PCIe MB/s, -o DT for the date):
#                     a 1 Hz reference trace, and NVML stays initialised
#   idle       30 s   realgpu test, root and GPUCHECK_USER (default nobody)
#   fma        65 s   gpuload fma; test root and nobody; gpuscope agent
#                     root and nobody
#   tensor     35 s   torch bf16 8192^3 matmuls if python3 imports torch with
#                     a GPU, else gpuload -mode mma (bf16 mma.sync); root
#   copy       20 s   gpuload copy (device to device), root
#   h2d        20 s   gpuload h2d (pinned host to device), root
#   d2h        20 s   gpuload d2h (device to pinned host), root
#   alloc      20 s   gpuload alloc (2 GiB held), root
#   duty       20 s   gpuload duty (100 ms on, 300 ms off) with pmon, root
#   xid        25 s   realgpu XID test, root and nobody, listening while
#                     gpuload -mode xid stores to the null page; then the
#                     kernel log and nvidia-smi after the XID. Runs last:
#                     35 s of the budget are kept for it until it starts.
#   report      5 s
#   total    ~300 s   (5 min; budget 420 s, tool timeout 480 s)
#
# Every command of a step runs under timeout(1) with the smaller of its
# own cap (60 s for a test run, 30 s for a load to come up, 90 s for
# torch) and the time the budget has left, 5 s of kill grace included. A
# step that cannot have 25 s is skipped (SKIP); a command the budget cut
# short is recorded CUT; one that ran past its own cap is a FAIL.
#
# What the realgpu test compares, and with what tolerance, is written at
# the top of gpu/realgpu_test.go; in short: identity, driver version,
# model, PCIe link and clock-event reasons exact against nvidia-smi;
# every ratio in [0, 1] and every utilisation in [0, 100] in every cycle;
# FB used + free + reserved = total; all nine profiling fields required
# on compute capability 9.0+ as root; medians against the dmon trace;
# fma: SM_ACTIVE > 0.9, PIPE_TENSOR < 0.05, DRAM < 0.1; tensor:
# PIPE_TENSOR > 0.5; h2d/d2h: PROF_PCIE within ±25 % of the measured
# copy rate and NVML's cycle-1 KB/s x 1024 within ±25 % of GPM; duty: the
# container SM share about 25 % of the fma's (±10 points: the interval
# average its HELP promises, R4); xid: XID 13/31/43 counted once, as root
# and as nobody.
#
# Output in $OUT (default ./gpucheck-out):
#
#   summary.tsv  one row per check: t_s, check, user, result, detail.
#                t_s: seconds since the start; check: "[load] Test/subtest"
#                for the realgpu test's results, or what the script itself
#                checked ("fma load starts", "[fma] agent: cycles
#                advance", "step fma", ...); user: root or GPUCHECK_USER;
#                result: PASS, FAIL, SKIP (not run, with why), CUT (the
#                time budget stopped it) or INFO (a figure or a fact, not a
#                check: the environment, which tensor load, pmon, each
#                step's time against its estimate)
#   report.txt   the table, counts, the measured figures ("gpucheck:" lines
#                of the tests), gpuload's lines, failures and skips, env.txt
#   check.log    the script's log
#   raw/ or raw.tar.gz  every test log, exposition, load log, nvidia-smi
#                output and the dmon trace (raw/ while running or if killed;
#                the archive once the run ends)
#
# Exit status: 0 nothing failed or was cut, 1 something failed, 2 nothing
# failed but the budget cut something short.
#
# Environment: OUT; GPUCHECK_GPU (the nvidia-smi index to load, default 0);
# GPUCHECK_USER (default nobody); GPUCHECK_BUDGET_S (default 420). For the
# script's own tests: GPUCHECK_SETTLE_S (default 3: seconds a load runs
# before it is measured), GPUCHECK_RESERVE_XID_S (35), GPUCHECK_RESERVE_END_S
# (15), GPUCHECK_STEP_MIN_S (25), GPUCHECK_TEST_MIN_S (10: the least time a
# test run is started with).

set -Eeuo pipefail

readonly started=$SECONDS
readonly budget=${GPUCHECK_BUDGET_S:-420}
readonly gpu_index=${GPUCHECK_GPU:-0}
readonly unpriv=${GPUCHECK_USER:-nobody}
readonly settle=${GPUCHECK_SETTLE_S:-3}
readonly reserve_xid=${GPUCHECK_RESERVE_XID_S:-35}
readonly reserve_end=${GPUCHECK_RESERVE_END_S:-15}
readonly step_min=${GPUCHECK_STEP_MIN_S:-25}
readonly test_min=${GPUCHECK_TEST_MIN_S:-10}
readonly kill_grace=5
readonly load_secs=300 # upper bound; each load is stopped when its checks are done
readonly test_cap=60
readonly host_pidns='pid:[4026531836]'

for v in budget settle reserve_xid reserve_end step_min test_min; do
  if [[ ! ${!v} =~ ^[0-9]+$ ]]; then
    echo "check-real-gpu.sh: $v must be a whole number of seconds, got '${!v}'" >&2
    exit 1
  fi
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -ge 1 ]]; then
  bindir=$1
elif [[ -e $here/gpu.test || -e $here/gpu.test.gz ]]; then
  bindir=$here
else
  bindir=$here/../.gpucheck
fi
if [[ ! -d $bindir ]]; then
  echo "check-real-gpu.sh: $bindir is not a folder: run scripts/build-gpu-check.sh on a build machine and carry its folder" >&2
  exit 1
fi
bindir=$(cd "$bindir" && pwd)
out=${OUT:-./gpucheck-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/raw" "$out/raw.tar.gz"
printf 't_s\tcheck\tuser\tresult\tdetail\n' >"$out/summary.tsv"
: >"$out/check.log"

# Scratch space the unprivileged user can read: binaries, logs, expositions.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")
chmod 755 "$work"
raw=$work/raw
mkdir -p "$raw"
chmod 777 "$raw"

load_pid=""
load_mode=""
load_gpu=$gpu_index
cg_procs=""
cgroup_dirs=()
agent_pid=""
dmon_pid=""
probe_pid=""
bg_pids=()
xid_pending=1
current_step=""
dmon_file=""
fma_container_sm=""
idle_fb_total=""

# forget_pid PID: drops PID from bg_pids once it has been waited for.
forget_pid() {
  local p keep=()
  for p in "${bg_pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  bg_pids=("${keep[@]}")
}

log() { printf '[%4ds] %s\n' "$((SECONDS - started))" "$*" | tee -a "$out/check.log" >&2; }

# record CHECK USER RESULT [DETAIL]: one row, appended to summary.tsv at once.
record() {
  local detail=${4:-}
  detail=${detail//$'\t'/ }
  detail=${detail//$'\n'/ }
  detail=${detail:0:600}
  printf '%s\t%s\t%s\t%s\t%s\n' "$((SECONDS - started))" "$1" "$2" "$3" "$detail" >>"$out/summary.tsv"
  log "$3: $1 ($2) $detail"
}

# left: seconds the current step may still use: the budget less the end's
# reserve, less the XID step's until it starts.
left() {
  local l=$((budget - reserve_end - (SECONDS - started)))
  ((xid_pending)) && l=$((l - reserve_xid))
  echo "$l"
}

# cap SECS: the timeout for a command whose own cap is SECS: SECS, or less
# when the budget has less left (kill grace included); 0 when nothing is left.
cap() {
  local l
  l=$(($(left) - kill_grace))
  if ((l < 1)); then
    echo 0
  elif ((l < $1)); then
    echo "$l"
  else
    echo "$1"
  fi
}

# bounded SECS CMD...: runs CMD under timeout(1) with cap SECS. Sets
# bounded_rc (124/137 when the timeout ended it, 125 when there was no
# time left to start it) and bounded_cut (1 when the budget, not SECS,
# set the limit).
bounded_rc=0
bounded_cut=0
bounded() {
  local want=$1 t
  shift
  t=$(cap "$want")
  bounded_cut=0
  ((t < want)) && bounded_cut=1
  if ((t == 0)); then
    bounded_rc=125
    return 0
  fi
  bounded_rc=0
  timeout -k "$kill_grace" "$t" "$@" || bounded_rc=$?
}

timed_out() { ((bounded_rc == 124 || bounded_rc == 137 || bounded_rc == 125)); }

# step NAME ESTIMATE: starts a step, or records it skipped (returns 1)
# when the budget cannot give it step_min seconds.
step_started=0
step_est=0
step() {
  local l
  current_step=$1
  step_est=$2
  step_started=$SECONDS
  l=$(left)
  if ((l < step_min)); then
    record "step $1" root SKIP "time budget: $l s left of ${budget} s, the step needs at least ${step_min} s (estimated $2 s)"
    return 1
  fi
  log "step $1: estimated $2 s, $l s left"
}

# step_done: the step's time as a row, and report.txt and raw/ brought up
# to date, so that a killed run still returns them.
step_done() {
  record "step $current_step" root INFO "took $((SECONDS - step_started)) s (estimated $step_est s); $(left) s left"
  checkpoint
}

checkpoint() {
  write_report partial || true
  mkdir -p "$out/raw"
  cp -R "$raw/." "$out/raw/" 2>/dev/null || true
}

write_report() {
  local state=$1 rc=0 n_pass=0 n_fail=0 n_skip=0 n_info=0 n_cutr=0 res
  while IFS=$'\t' read -r _ _ _ res _; do
    case $res in
      PASS) n_pass=$((n_pass + 1)) ;;
      SKIP) n_skip=$((n_skip + 1)) ;;
      INFO) n_info=$((n_info + 1)) ;;
      CUT) n_cutr=$((n_cutr + 1)) ;;
      *) n_fail=$((n_fail + 1)) ;;
    esac
  done < <(tail -n +2 "$out/summary.tsv")
  if ((n_fail > 0)); then
    rc=1
  elif ((n_cutr > 0)); then
    rc=2
  fi
  {
    echo "gpuscope hardware check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - started)) s of a ${budget} s budget"
    if [[ $state == partial ]]; then
      echo "IN PROGRESS: written after step '$current_step'; a run killed after this leaves this report"
    fi
    echo "binaries: $bindir"
    echo
    printf '%5s  %-66s %-8s %-6s %s\n' T_S CHECK USER RESULT DETAIL
    tail -n +2 "$out/summary.tsv" | while IFS=$'\t' read -r t c u r d; do
      printf '%5s  %-66s %-8s %-6s %s\n' "$t" "$c" "$u" "$r" "$d"
    done
    echo
    echo "PASS $n_pass, FAIL $n_fail, SKIP $n_skip, CUT $n_cutr, INFO $n_info"
    echo
    echo "== Figures (gpucheck: lines of the test logs) =="
    for f in "$raw"/test-*/test.log; do
      [[ -f $f ]] || continue
      echo "-- ${f#"$raw"/}"
      grep -h 'gpucheck:' "$f" | sed 's/^[[:space:]]*[a-z_]*_test.go:[0-9]*: gpucheck: /  /' || true
    done
    echo
    echo "== gpuload (ready and done lines) =="
    grep -h -E '^gpuload: (ready|done)' "$raw"/load-*.log 2>/dev/null || true
    echo
    echo "== Failures and skips (test logs) =="
    grep -rh -B2 -A12 -E -- '--- (FAIL|SKIP)' "$raw" --include=test.log 2>/dev/null | head -400 || true
    echo
    echo "== Environment =="
    cat "$raw/env.txt" 2>/dev/null || true
  } >"$out/report.txt"
  return "$rc"
}

cleanup() {
  local rc=$?
  set +e
  trap - INT TERM ERR
  if ((!finished)); then
    record "check-real-gpu.sh runs to its end" root FAIL "exit $rc during step '$current_step'${err_at:+, after line $err_at}"
    ((rc == 0)) && rc=1
  fi
  for p in "$load_pid" "$agent_pid" "$dmon_pid" "$probe_pid" "${bg_pids[@]}"; do
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  for d in "${cgroup_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
  current_step=end
  write_report final
  local report_rc=$?
  ((report_rc > rc)) && rc=$report_rc
  cp "$out/check.log" "$raw/check.log" 2>/dev/null
  tar -C "$work" -czf "$out/raw.tar.gz" raw 2>/dev/null && rm -rf "$out/raw"
  log "report: $out/report.txt (exit $rc)"
  rm -rf "$work"
  exit "$rc"
}
finished=0
err_at=""
trap cleanup EXIT
trap 'err_at="$LINENO: $BASH_COMMAND"' ERR
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

# prom_value TEXT NAME [LABEL=VALUE]: the first sample of NAME (with that
# label) in an exposition; empty if none.
prom_value() {
  awk -v n="$2" -v l="${3:-}" '
    $1 == n || index($1, n "{") == 1 {
      if (l != "") { split(l, kv, "="); if (index($1, kv[1] "=\"" kv[2] "\"") == 0) next }
      print $2; exit
    }' <<<"$1"
}

# --- Preflight -------------------------------------------------------------

users=(root)
tensor_how=""
preflight() {
  local f
  for f in gpu.test gpuscope; do
    if [[ -f $bindir/$f ]]; then
      cp "$bindir/$f" "$work/$f"
    elif [[ -f $bindir/$f.gz ]]; then
      gzip -dc "$bindir/$f.gz" >"$work/$f"
    fi
  done
  [[ -f $bindir/gpuload ]] && cp "$bindir/gpuload" "$work/gpuload"
  [[ -f $bindir/tensorload.py ]] && cp "$bindir/tensorload.py" "$work/tensorload.py"
  chmod 755 "$work"/gpu* 2>/dev/null || true
  chmod 644 "$work/tensorload.py" 2>/dev/null || true
  for f in gpu.test gpuload; do
    if [[ ! -x $work/$f ]]; then
      record "binaries present" root FAIL "$bindir/$f(.gz) missing: run scripts/build-gpu-check.sh on a build machine and carry its folder"
      return 1
    fi
  done
  if [[ -f $bindir/SHA256SUMS ]]; then
    if (cd "$bindir" && sha256sum -c --quiet SHA256SUMS) >"$raw/sha256.txt" 2>&1; then
      record "binaries match SHA256SUMS" root PASS "$(tr '\n' ' ' <"$bindir/SHA256SUMS" | head -c 300)"
    else
      record "binaries match SHA256SUMS" root FAIL "$(head -c 300 "$raw/sha256.txt")"
    fi
  fi
  bounded 30 nvidia-smi -L >"$raw/nvidia-smi-L.txt" 2>&1
  if ((bounded_rc != 0)); then
    record "nvidia-smi answers" root FAIL "exit $bounded_rc: $(head -c 300 "$raw/nvidia-smi-L.txt")"
    return 1
  fi
  record "nvidia-smi answers" root PASS "$(head -n1 "$raw/nvidia-smi-L.txt")"

  # torch takes seconds to import: probe it while the idle step runs.
  if command -v python3 >/dev/null && [[ -f $work/tensorload.py ]]; then
    timeout -k 5 90 python3 "$work/tensorload.py" --probe >"$raw/torch-probe.txt" 2>&1 &
    probe_pid=$!
  fi

  local ns params modes
  ns=$(readlink /proc/self/ns/pid 2>/dev/null || echo '?')
  params=$(grep -h '^RmProfilingAdminOnly' /proc/driver/nvidia/params 2>/dev/null || echo "RmProfilingAdminOnly: (cannot read /proc/driver/nvidia/params)")
  bounded 30 nvidia-smi --query-gpu=index,name,compute_cap,persistence_mode,mig.mode.current,driver_version --format=csv >"$raw/modes.csv" 2>&1 || true
  modes=$(tail -n +2 "$raw/modes.csv" | tr '\n' ';')
  {
    echo "uname: $(uname -a)"
    echo "id: $(id)"
    echo "pid namespace: $ns (the host's is $host_pidns)"
    echo "profiling restriction: $params"
    echo "gpus (index, name, compute_cap, persistence_mode, mig.mode.current, driver_version):"
    cat "$raw/modes.csv"
    cat "$raw/nvidia-smi-L.txt"
    echo "nvidia-smi nvlink -s:"
    timeout 20 nvidia-smi nvlink -s 2>&1 | head -n 80 || true
    echo "cgroup of this script:"
    cat /proc/self/cgroup
    echo "cgroup mounts:"
    grep cgroup /proc/mounts || true
    echo "devices:"
    ls -l /dev/nvidia* 2>&1 || true
    echo "libraries:"
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvidia-ml\.so' || true
    echo "python3: $(python3 --version 2>&1 || echo none)"
    echo "tools: timeout=$(command -v timeout || echo -) stdbuf=$(command -v stdbuf || echo -) setpriv=$(command -v setpriv || echo -) runuser=$(command -v runuser || echo -) curl=$(command -v curl || echo -)"
  } >"$raw/env.txt" 2>&1
  if [[ $ns == "$host_pidns" ]]; then
    record "pid namespace" root INFO "$ns, the host's: per-container checks run"
  else
    record "pid namespace" root INFO "$ns, not the host's ($host_pidns): gpuscope switches per-container series off here, and their checks skip"
  fi
  record "profiling restriction" root INFO "$params"
  record "persistence and MIG mode" root INFO "${modes:-unknown}"
  if [[ -x $work/gpuscope ]]; then
    mkdir -p "$work/doctor-data"
    bounded 30 "$work/gpuscope" doctor --url= --storage.tsdb.path="$work/doctor-data" >"$raw/doctor.txt" 2>&1
    {
      echo "gpuscope doctor (exit $bounded_rc):"
      cat "$raw/doctor.txt"
    } >>"$raw/env.txt"
    if timed_out; then
      record "gpuscope doctor" root FAIL "did not finish in 30 s"
    else
      record "gpuscope doctor" root INFO "exit $bounded_rc; output in env.txt"
    fi
  fi
  bounded 60 nvidia-smi -q >"$raw/nvidia-smi-q.txt" 2>&1 || true
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

# start_dmon: nvidia-smi dmon as a 1 Hz reference trace for the whole run.
# It also keeps NVML initialised between the test's own inits, so that no
# cycle reads a GPU in its just-initialised state (persistence mode off).
# -s pucm as asked, plus t (PCIe MB/s) for the PCIe unit; without t if
# this nvidia-smi refuses it.
start_dmon() {
  local i s buf=()
  command -v stdbuf >/dev/null && buf=(stdbuf -oL)
  for s in pucmt pucm; do
    "${buf[@]}" nvidia-smi dmon -s "$s" -d 1 -o DT >"$raw/dmon.txt" 2>&1 &
    dmon_pid=$!
    for ((i = 0; i < 10; i++)); do
      sleep 0.5
      dmon_rows && break
      kill -0 "$dmon_pid" 2>/dev/null || break
    done
    dmon_rows && break
    cp "$raw/dmon.txt" "$raw/dmon-$s-failed.txt"
    kill "$dmon_pid" 2>/dev/null || true
    wait "$dmon_pid" 2>/dev/null || true
    dmon_pid=""
  done
  if [[ -n $dmon_pid ]]; then
    dmon_file=$raw/dmon.txt
    record "nvidia-smi dmon reference trace" root PASS "dmon -s $s, pid $dmon_pid; columns: $(grep -m1 '^#Date' "$raw/dmon.txt" | tr -s ' ' | cut -c2-)"
  else
    record "nvidia-smi dmon reference trace" root FAIL "no row within 5 s ($(head -c 200 "$raw/dmon.txt" | tr '\n' ' ')): the tests compare single nvidia-smi reads instead"
  fi
}

# dmon_rows: whether the dmon trace has its header and a row.
dmon_rows() { grep -q '^#Date' "$raw/dmon.txt" 2>/dev/null && grep -qv '^#' "$raw/dmon.txt"; }

# --- The realgpu test --------------------------------------------------------

# test_rows LOG: the results of a go test -v log, one "RESULT<TAB>name<TAB>
# detail" line each. A failure's detail is testify's Messages and Error,
# else the test's first message; a skip's is its last message (the
# reason). A test that started but has no result (the binary was killed)
# is NONE, with its last message.
test_rows() {
  awk '
    /^=== (RUN|NAME|CONT) / { cur = $3; if ($2 == "RUN") order[++n] = cur; next }
    /^=== / { next }
    /^ *--- (PASS|FAIL|SKIP): / {
      res = $2; sub(/:$/, "", res); name = $3
      done[name] = 1
      d = ""
      if (res == "SKIP") d = last[name]
      else if (res == "FAIL") {
        if (name in terr) d = (name in tmsg) ? tmsg[name] " (" terr[name] ")" : terr[name]
        else d = first[name]
      }
      print res "\t" name "\t" d
      next
    }
    cur == "" { next }
    /^[ \t]+[A-Za-z0-9_.]+\.go:[0-9]+: / {
      m = $0; sub(/^[ \t]+[A-Za-z0-9_.]+\.go:[0-9]+: /, "", m)
      if (m ~ /^gpucheck:/ || m ~ /^[ \t]*$/) next
      if (!(cur in first)) first[cur] = m
      last[cur] = m
      next
    }
    /^[ \t]+Error:[ \t]/ { m = $0; sub(/^[ \t]+Error:[ \t]+/, "", m); if (!(cur in terr)) terr[cur] = m; next }
    /^[ \t]+Messages:[ \t]/ { m = $0; sub(/^[ \t]+Messages:[ \t]+/, "", m); if (!(cur in tmsg)) tmsg[cur] = m; next }
    END { for (i = 1; i <= n; i++) if (!(order[i] in done)) print "NONE\t" order[i] "\t" last[order[i]] }
  ' "$1"
}

# launch_test LOAD USER GPU PID RUN [ENV=VALUE...]: starts the realgpu test
# binary (tests matching RUN) in the background, under timeout(1) with cap
# test_cap; sets test_pid, test_dir, test_limit, test_cut.
test_pid=""
test_dir=""
test_limit=0
test_cut=0
launch_test() {
  local load=$1 user=$2 gpu=$3 pid=$4 run=$5
  shift 5
  test_dir=$raw/test-$load-$user
  mkdir -p "$test_dir"
  chmod 777 "$test_dir"
  test_limit=$(cap "$test_cap")
  test_cut=0
  ((test_limit < test_cap)) && test_cut=1
  if ((test_limit < test_min)); then
    test_pid=""
    return 1
  fi
  as_user "$user"
  "${as[@]}" timeout -k "$kill_grace" "$test_limit" env PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
    GPUCHECK_LOAD="$load" GPUCHECK_LOAD_PID="$pid" GPUCHECK_GPU="$gpu" GPUCHECK_OUT="$test_dir" \
    GPUCHECK_LOAD_LOG="$raw/load-$load.log" GPUCHECK_DMON="$dmon_file" TMPDIR=/tmp "$@" \
    "$work/gpu.test" -test.run "$run" -test.v -test.count=1 -test.timeout "$((test_limit - 2))s" \
    >"$test_dir/test.log" 2>&1 &
  test_pid=$!
  bg_pids+=("$test_pid")
}

# finish_test LOAD USER: waits for the test started last (test_pid) and
# records one row per test and subtest.
finish_test() {
  local load=$1 user=$2 rc=0 n=0 res name detail
  wait "$test_pid" || rc=$?
  forget_pid "$test_pid"
  (cd "$test_dir" && timeout 30 nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv >smi-compute-apps.csv 2>&1) || true
  while IFS=$'\t' read -r res name detail; do
    n=$((n + 1))
    if [[ $res == NONE ]]; then
      if ((test_cut)); then
        record "[$load] $name" "$user" CUT "no result: the time budget stopped the test binary after $test_limit s${detail:+; last message: $detail}"
      else
        record "[$load] $name" "$user" FAIL "no result: the test binary was stopped after $test_limit s${detail:+; last message: $detail}"
      fi
    else
      [[ $res == FAIL && -z $detail ]] && detail="see its failing subtests"
      record "[$load] $name" "$user" "$res" "$detail"
    fi
  done < <(test_rows "$test_dir/test.log")
  if ((rc == 124 || rc == 137)) && ((n == 0)); then
    if ((test_cut)); then
      record "[$load] realgpu test" "$user" CUT "the time budget stopped it after $test_limit s, before any test started"
    else
      record "[$load] realgpu test" "$user" FAIL "timed out after $test_limit s before any test started"
    fi
  elif ((rc != 0 && n == 0)); then
    record "[$load] realgpu test" "$user" FAIL "exit $rc: $(tail -n 3 "$test_dir/test.log" | tr '\n' ' ')"
  fi
}

# run_test LOAD USER GPU PID RUN [ENV=VALUE...]
run_test() {
  local load=$1 user=$2
  if ! launch_test "$@"; then
    record "[$load] realgpu test" "$user" SKIP "time budget: $(left) s left"
    return 0
  fi
  finish_test "$load" "$user"
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

# start_load NAME CAP CMD...: starts a load in its own cgroup; waits (at
# most CAP seconds, less if the budget says so) for its "gpuload: ready"
# line; sets load_pid, load_mode and load_gpu. Returns 1 if it did not
# come up.
start_load() {
  local mode=$1 want=$2 procs i t bus
  shift 2
  load_mode=$mode
  make_cgroup "gpucheck-$mode"
  procs=$cg_procs
  # The subshell moves itself into the cgroup, then becomes the load (exec),
  # so that $! is the load's pid.
  (
    if [[ -n $procs ]]; then echo "$BASHPID" >"$procs" || true; fi
    CUDA_DEVICE_ORDER=PCI_BUS_ID exec env -u CUDA_VISIBLE_DEVICES "$@"
  ) >"$raw/load-$mode.log" 2>&1 &
  load_pid=$!
  t=$(cap "$want")
  for ((i = 0; i < 2 * t; i++)); do
    if grep -q '^gpuload: ready' "$raw/load-$mode.log"; then break; fi
    if ! kill -0 "$load_pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  if ! grep -q '^gpuload: ready' "$raw/load-$mode.log"; then
    local why
    why=$(tr '\n' ' ' <"$raw/load-$mode.log" | head -c 400)
    if kill -0 "$load_pid" 2>/dev/null && ((t < want)); then
      record "$mode load starts" root CUT "not ready when the time budget ran out ($t s): $why"
    else
      record "$mode load starts" root FAIL "${why:-no output}"
    fi
    stop_load >/dev/null || true
    return 1
  fi
  bus=$(sed -n 's/^gpuload: ready .*bus_id=\([^ ]*\).*/\1/p' "$raw/load-$mode.log")
  load_gpu=""
  [[ $bus == *:* ]] && load_gpu=$(smi_index "$bus" || true)
  load_gpu=${load_gpu:-$gpu_index}
  cp "/proc/$load_pid/cgroup" "$raw/load-$mode.cgroup" 2>/dev/null || true
  local own="its own cgroup ${procs%/cgroup.procs}"
  [[ -n $procs ]] || own="no cgroup of its own (see cgroup-errors.txt)"
  record "$mode load starts" root PASS "pid $load_pid on GPU $load_gpu ($bus), $own; /proc/$load_pid/cgroup: $(tr '\n' ' ' <"/proc/$load_pid/cgroup" 2>/dev/null | head -c 200)"
  sleep "$settle" # utilisation is averaged over the last second or so
}

# stop_load: SIGTERM, 15 s grace, then SIGKILL; the load must exit 0.
stop_load() {
  local mode=$load_mode rc=0 i
  [[ -n $load_pid ]] || return 0
  kill -TERM "$load_pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    kill -0 "$load_pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$load_pid" 2>/dev/null; then
    kill -KILL "$load_pid" 2>/dev/null || true
    record "$mode load stops on SIGTERM" root FAIL "still running after 15 s; killed"
  fi
  wait "$load_pid" || rc=$?
  load_pid=""
  if ((rc == 0)); then
    record "$mode load stops on SIGTERM" root PASS "$(grep '^gpuload: done' "$raw/load-$mode.log" | head -n1)"
  else
    record "$mode load stops on SIGTERM" root FAIL "exit $rc: $(tail -n 2 "$raw/load-$mode.log" | tr '\n' ' ')"
  fi
}

# snapshot_smi MODE: nvidia-smi's view under the load, for the raw files.
snapshot_smi() {
  timeout 30 nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv >"$raw/load-$1-compute-apps.csv" 2>&1 || true
  timeout 30 nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,power.draw,clocks.sm,pcie.link.gen.current --format=csv >"$raw/load-$1-gpu.csv" 2>&1 || true
}

# gpuload_step MODE ESTIMATE ARGS...: a gpuload load, the realgpu test
# under it as root, and the load stopped.
gpuload_step() {
  local mode=$1 est=$2
  shift 2
  step "$mode" "$est" || return 0
  load_gpu=$gpu_index
  if start_load "$mode" 30 "$work/gpuload" -mode "$mode" -duration "${load_secs}s" -device "$gpu_index" "$@"; then
    snapshot_smi "$mode"
    run_test "$mode" root "$load_gpu" "$load_pid" '^TestRealGPUUnderLoad$'
    stop_load
  fi
  step_done
}

# --- gpuscope itself ------------------------------------------------------------

# run_agent LOAD USER PORT: gpuscope agent with the NVML backend; its
# /metrics/gpu must have collector_up 1 and GPU_UTIL, no collector error,
# advancing cycles and the test's FB_TOTAL; it must stop within 2 s of
# SIGTERM.
run_agent() {
  local load=$1 user=$2 port=$3 cfg body first i t0 rc=0 log t
  [[ -x $work/gpuscope ]] || {
    record "[$load] agent: /metrics/gpu" "$user" SKIP "no gpuscope binary in $bindir"
    return 0
  }
  t=$(cap 15)
  if ((t < 8)); then
    record "[$load] agent: /metrics/gpu" "$user" SKIP "time budget: $(left) s left"
    return 0
  fi
  cfg=$work/agent.yml
  printf 'global:\n  scrape_interval: 1s\n' >"$cfg"
  chmod 644 "$cfg"
  log=$raw/agent-$load-$user.log
  # A simple command in the background, through exec-ing wrappers only
  # (setpriv, env): $! is the agent itself. No timeout(1) in between, which
  # would answer SIGTERM with its own status; the wait below is bounded.
  as_user "$user"
  "${as[@]}" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$work/gpuscope" agent --config.file="$cfg" --gpu.backend=nvml \
    --web.listen-address="127.0.0.1:$port" >"$log" 2>&1 &
  agent_pid=$!
  first=""
  local deadline=$((SECONDS + t))
  while ((SECONDS < deadline)); do
    sleep 1
    if first=$(fetch "http://127.0.0.1:$port/metrics/gpu" 2>/dev/null) && grep -q '^DCGM_FI_DEV_GPU_UTIL{' <<<"$first"; then
      break
    fi
    first=""
    kill -0 "$agent_pid" 2>/dev/null || break
  done
  sleep "$((settle > 2 ? settle : 2))" # more cycles, under the load
  body=$(fetch "http://127.0.0.1:$port/metrics/gpu" 2>/dev/null) || true
  printf '%s\n' "$first" >"$raw/agent-$load-$user-1.prom"
  printf '%s\n' "$body" >"$raw/agent-$load-$user-2.prom"
  if [[ $(prom_value "$body" gpuscope_gpu_collector_up) == 1 ]] && grep -q '^DCGM_FI_DEV_GPU_UTIL{' <<<"$body"; then
    record "[$load] agent: /metrics/gpu" "$user" PASS "$(grep -c '^DCGM_FI_' <<<"$body") DCGM series; $(grep -m1 '^DCGM_FI_DEV_GPU_UTIL{' <<<"$body" | sed 's/{.*}//')"
    local errs c1 c2 fb
    errs=$(awk '/^gpuscope_gpu_collector_errors_total[{ ]/ && $2 > 0' <<<"$body" | head -n 5 | tr '\n' ' ')
    if [[ -z $errs ]]; then
      record "[$load] agent: no collector errors" "$user" PASS "gpuscope_gpu_collector_errors_total has no series"
    else
      record "[$load] agent: no collector errors" "$user" FAIL "$errs"
    fi
    c1=$(prom_value "$first" gpuscope_gpu_collector_cycles_total)
    c2=$(prom_value "$body" gpuscope_gpu_collector_cycles_total)
    if [[ -n $c1 && -n $c2 ]] && awk -v a="$c1" -v b="$c2" 'BEGIN { exit !(b > a) }'; then
      record "[$load] agent: cycles advance" "$user" PASS "gpuscope_gpu_collector_cycles_total $c1 then $c2"
    else
      record "[$load] agent: cycles advance" "$user" FAIL "gpuscope_gpu_collector_cycles_total '${c1}' then '${c2}'"
    fi
    fb=$(prom_value "$body" DCGM_FI_DEV_FB_TOTAL "gpu=$load_gpu")
    if [[ -z $idle_fb_total ]]; then
      record "[$load] agent: FB_TOTAL as the test's" "$user" SKIP "the idle test logged no FB_TOTAL (agent: ${fb:-none})"
    elif [[ -n $fb ]] && awk -v a="$fb" -v b="$idle_fb_total" 'BEGIN { exit !(a == b) }'; then
      record "[$load] agent: FB_TOTAL as the test's" "$user" PASS "DCGM_FI_DEV_FB_TOTAL{gpu=\"$load_gpu\"} $fb MiB"
    else
      record "[$load] agent: FB_TOTAL as the test's" "$user" FAIL "agent ${fb:-none} MiB, the idle test $idle_fb_total MiB"
    fi
  else
    record "[$load] agent: /metrics/gpu" "$user" FAIL "$(grep -m1 '^gpuscope_gpu_collector_up' <<<"$body" || tail -n 2 "$log" | tr '\n' ' ')"
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
    record "[$load] agent: stops on SIGTERM" "$user" PASS "${took} s, exit $rc"
  else
    record "[$load] agent: stops on SIGTERM" "$user" FAIL "${took} s (want ≤ 2 s), exit $rc"
  fi
}

# --- Steps ------------------------------------------------------------------------

idle_step() {
  step idle 30 || return 0
  local u
  for u in "${users[@]}"; do run_test idle "$u" "$gpu_index" "" '^TestRealGPU(AgainstNvidiaSMI|UnderLoad)$'; done
  idle_fb_total=$(grep -h -o "gpu=$gpu_index DCGM_FI_DEV_FB_TOTAL (memory.total) gpuscope=[0-9.e+]*" "$raw/test-idle-root/test.log" 2>/dev/null | head -n1 | sed 's/.*gpuscope=//' || true)
  step_done
}

fma_step() {
  step fma 65 || return 0
  local u port=19089
  load_gpu=$gpu_index
  if start_load fma 30 "$work/gpuload" -mode fma -duration "${load_secs}s" -device "$gpu_index"; then
    snapshot_smi fma
    for u in "${users[@]}"; do run_test fma "$u" "$load_gpu" "$load_pid" '^TestRealGPU(AgainstNvidiaSMI|UnderLoad)$'; done
    fma_container_sm=$(grep -h -o 'load=fma uid=0 container_sm_mean=[0-9.]*' "$raw/test-fma-root/test.log" 2>/dev/null | head -n1 | sed 's/.*=//' || true)
    for u in "${users[@]}"; do
      run_agent fma "$u" "$port"
      port=$((port + 1))
    done
    stop_load
  fi
  step_done
}

tensor_step() {
  step tensor 35 || return 0
  local probe="" rc=1
  if [[ -n $probe_pid ]]; then
    wait "$probe_pid" && rc=0 || rc=$?
    probe_pid=""
    probe=$(head -n 3 "$raw/torch-probe.txt" | tr '\n' ' ' | sed 's/ *$//')
  else
    probe="no python3 or no tensorload.py"
  fi
  load_gpu=$gpu_index
  local ok=1
  if ((rc == 0)); then
    tensor_how="torch bf16 8192^3 matmul (cuBLAS): $probe"
    record "tensor load" root INFO "$tensor_how"
    start_load tensor 90 python3 "$work/tensorload.py" --duration "$load_secs" --device "$gpu_index" || ok=0
  else
    tensor_how="gpuload -mode mma (bf16 mma.sync PTX); torch not used: $probe"
    record "tensor load" root INFO "$tensor_how"
    start_load tensor 30 "$work/gpuload" -mode mma -duration "${load_secs}s" -device "$gpu_index" || ok=0
  fi
  if ((ok)); then
    snapshot_smi tensor
    run_test tensor root "$load_gpu" "$load_pid" '^TestRealGPUUnderLoad$'
    stop_load
  fi
  step_done
}

duty_step() {
  step duty 20 || return 0
  load_gpu=$gpu_index
  if start_load duty 30 "$work/gpuload" -mode duty -on 100ms -off 300ms -duration "${load_secs}s" -device "$gpu_index"; then
    local buf=() pmon_pid
    command -v stdbuf >/dev/null && buf=(stdbuf -oL)
    timeout -k 2 "$(cap 20)" "${buf[@]}" nvidia-smi pmon -i "$load_gpu" -s u -d 1 -c 15 >"$raw/pmon-duty.txt" 2>&1 &
    pmon_pid=$!
    bg_pids+=("$pmon_pid")
    run_test duty root "$load_gpu" "$load_pid" '^TestRealGPUUnderLoad$' \
      GPUCHECK_PMON="$raw/pmon-duty.txt" ${fma_container_sm:+GPUCHECK_FMA_CONTAINER_SM=$fma_container_sm}
    kill "$pmon_pid" 2>/dev/null || true
    wait "$pmon_pid" 2>/dev/null || true
    forget_pid "$pmon_pid"
    record "pmon under the duty cycle" root INFO "$(grep -v '^#' "$raw/pmon-duty.txt" | awk -v p="$load_pid" '$2 == p { n++; s += $4 } END { if (n) printf "pid %s: mean sm %.1f %% over %d samples", p, s / n, n; else print "no sample of the load" }')"
    stop_load
  fi
  step_done
}

# xid_step: the realgpu XID test as root and as the unprivileged user,
# both listening, then one faulting store; the kernel log and nvidia-smi
# after it.
xid_step() {
  xid_pending=0
  step xid 25 || return 0
  local u pids=() dirs=() users_run=() i t ready before="" after rc kern
  if kern=$(dmesg 2>/dev/null); then
    before=$(grep -c 'NVRM: Xid' <<<"$kern" || true)
  fi
  for u in "${users[@]}"; do
    if launch_test xid "$u" "$gpu_index" "" '^TestRealGPUXID$' GPUCHECK_READY="$raw/test-xid-$u/ready" GPUCHECK_XID_WAIT=20s; then
      pids+=("$test_pid")
      dirs+=("$test_dir")
      users_run+=("$u")
    else
      record "[xid] realgpu test" "$u" SKIP "time budget: $(left) s left"
    fi
  done
  if ((${#pids[@]} == 0)); then
    step_done
    return 0
  fi
  # Every listener ready (or gone), then the fault.
  t=$(cap 30)
  for ((i = 0; i < 2 * t; i++)); do
    ready=0
    for ((u = 0; u < ${#pids[@]}; u++)); do
      if [[ -f ${dirs[u]}/ready ]] || ! kill -0 "${pids[u]}" 2>/dev/null; then ready=$((ready + 1)); fi
    done
    ((ready == ${#pids[@]})) && break
    sleep 0.5
  done
  for ((u = 0; u < ${#pids[@]}; u++)); do
    if [[ ! -f ${dirs[u]}/ready ]]; then
      record "[xid] listening before the fault" "${users_run[u]}" FAIL "the test did not say it listens for XIDs (see its log)"
    fi
  done
  load_mode=xid
  bounded 30 env CUDA_DEVICE_ORDER=PCI_BUS_ID "$work/gpuload" -mode xid -device "$gpu_index" >"$raw/load-xid.log" 2>&1
  rc=$bounded_rc
  if ((rc == 0)) && grep -q '^gpuload: done mode=xid' "$raw/load-xid.log"; then
    record "xid load faults" root PASS "$(grep -m1 '^gpuload: done' "$raw/load-xid.log")"
  elif timed_out && ((bounded_cut)); then
    record "xid load faults" root CUT "the time budget stopped it: $(tail -n 2 "$raw/load-xid.log" | tr '\n' ' ')"
  else
    record "xid load faults" root FAIL "exit $rc: $(tail -n 2 "$raw/load-xid.log" | tr '\n' ' ')"
  fi
  for ((u = 0; u < ${#pids[@]}; u++)); do
    test_pid=${pids[u]}
    test_dir=${dirs[u]}
    finish_test xid "${users_run[u]}"
  done
  if [[ -n $before ]]; then
    { dmesg 2>/dev/null || true; } | grep 'NVRM: Xid' | tail -n +"$((before + 1))" >"$raw/xid-kernel-log.txt" || true
    after=$(grep -o 'Xid ([^)]*): [0-9]*' "$raw/xid-kernel-log.txt" | sed 's/.*: //' | sort -u | tr '\n' ' ' || true)
    if grep -qE 'Xid \([^)]*\): (13|31|43),' "$raw/xid-kernel-log.txt"; then
      record "[xid] kernel log" root PASS "XID ${after}logged: $(head -n1 "$raw/xid-kernel-log.txt" | head -c 300)"
    else
      record "[xid] kernel log" root FAIL "no new NVRM Xid 13, 31 or 43 line in dmesg (new: ${after:-none})"
    fi
  else
    record "[xid] kernel log" root SKIP "dmesg cannot be read here"
  fi
  bounded 30 nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu,memory.used --format=csv,noheader >"$raw/after-xid.csv" 2>&1
  if ((bounded_rc == 0)); then
    record "nvidia-smi answers after the XID" root PASS "$(head -n1 "$raw/after-xid.csv")"
  else
    record "nvidia-smi answers after the XID" root FAIL "exit $bounded_rc: $(head -c 200 "$raw/after-xid.csv")"
  fi
  step_done
}

# --- Run -------------------------------------------------------------------------

log "binaries: $bindir; output: $out; unprivileged user: $unpriv; budget ${budget} s"
current_step=preflight
step_started=$SECONDS
step_est=15
if ! preflight; then
  finished=1 # the row says why
  exit 1
fi
start_dmon
step_done

idle_step
fma_step
tensor_step
gpuload_step copy 20 -bytes 2GiB
gpuload_step h2d 20 -bytes 256MiB
gpuload_step d2h 20 -bytes 256MiB
gpuload_step alloc 20 -bytes 2GiB
duty_step
xid_step
finished=1
log "done in $((SECONDS - started)) s"

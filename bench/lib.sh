# Sourced by the bench scripts (from the repository root): a work
# directory, removed at exit unless KEEP=1; the processes in pids, stopped
# at exit, then the commands in on_exit run (e.g. removing a cgroup once
# nothing is in it); the gpuscope binary in $bin, $GPUSCOPE_BIN or built
# here; and freeport, ready, median.
work=$(mktemp -d)
pids=()
on_exit=()
cleanup() {
  local p h
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for h in "${on_exit[@]}"; do eval "$h" || true; done
  [[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT
bin=${GPUSCOPE_BIN:-}
if [[ -z "$bin" ]]; then
  CGO_CFLAGS="-Wno-deprecated-declarations" go build -o "$work/gpuscope" .
  bin="$work/gpuscope"
fi
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ready() { until curl -sf "http://127.0.0.1:$1/-/ready" >/dev/null; do sleep 0.2; done; }
# median: of the numbers on stdin, one per line: "median min max".
median() { sort -n | awk '{v[NR]=$1} END{m=(NR%2)? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; print m, v[1], v[NR]}'; }

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

# dashload_build: sets dashload to $DASHLOAD_BIN, or to bench/dashload
# built into the work directory.
dashload_build() {
  dashload=${DASHLOAD_BIN:-}
  if [[ -z "$dashload" ]]; then
    CGO_CFLAGS="-Wno-deprecated-declarations" go build -o "$work/dashload" ./bench/dashload
    dashload="$work/dashload"
  fi
}

# The neighbour programs, built outside the main module and cached under
# $bench_cache (keyed by version), so a second run starts at once.
bench_cache=${XDG_CACHE_HOME:-$HOME/.cache}/gpuscope-bench
me=${0##*/}; me=${me%.sh}

# prometheus_build: sets prometheus_bin to $PROMETHEUS_BIN, or to
# Prometheus's cmd/prometheus at the version of ../tools/prometheus/go.mod
# (the one the main module embeds), built as the e2e tests build it
# (e2e/tools_test.go: -tags=remove_all_sd, pure Go).
prometheus_build() {
  prometheus_bin=${PROMETHEUS_BIN:-}
  if [[ -n "$prometheus_bin" ]]; then
    [[ -x "$prometheus_bin" ]] || { echo "$me: PROMETHEUS_BIN=$prometheus_bin is not an executable file" >&2; exit 1; }
    return
  fi
  prometheus_version=$(go list -C tools/prometheus -m -f '{{.Version}}' github.com/prometheus/prometheus)
  local dir=$bench_cache/prometheus-$prometheus_version
  prometheus_bin=$dir/prometheus
  [[ -x "$prometheus_bin" ]] && return
  echo "$me: building Prometheus $prometheus_version (cmd/prometheus, -tags=remove_all_sd) into $dir" >&2
  mkdir -p "$dir"
  CGO_ENABLED=0 go build -C tools/prometheus -tags=remove_all_sd -trimpath -ldflags='-s -w' \
    -o "$prometheus_bin.tmp$$" github.com/prometheus/prometheus/cmd/prometheus
  mv "$prometheus_bin.tmp$$" "$prometheus_bin"
}

# cadvisor_build: sets cadvisor_bin to $CADVISOR_BIN, or to cAdvisor's own
# binary built from CADVISOR_SRC, a clone (or bare git directory) of
# github.com/google/cadvisor. Its cmd/ is a module of its own,
# github.com/google/cadvisor/cmd, which the module proxy does not serve (it
# has no tags of its own) and whose go.mod replaces the library by ../ (so
# `go install …/cmd/cadvisor@<version>` is refused): cmd/ is taken from the
# clone at CADVISOR_REF (default: the tag of go.mod's version, else the
# clone's newest tag of the same minor version, said on stderr) and built
# against github.com/google/cadvisor and …/lib at go.mod's versions from
# the module cache, the code gpuscope runs. Cached by both versions and
# cmd/'s commit.
cadvisor_build() {
  cadvisor_bin=${CADVISOR_BIN:-}
  if [[ -n "$cadvisor_bin" ]]; then
    [[ -x "$cadvisor_bin" ]] || { echo "$me: CADVISOR_BIN=$cadvisor_bin is not an executable file" >&2; exit 1; }
    return
  fi
  [[ -n "${CADVISOR_SRC:-}" ]] ||
    { echo "$me: set CADVISOR_BIN (a cAdvisor binary) or CADVISOR_SRC (a clone of github.com/google/cadvisor)" >&2; exit 1; }
  cadvisor_version=$(go list -m -f '{{.Version}}' github.com/google/cadvisor)
  local ref=${CADVISOR_REF:-}
  if [[ -z "$ref" ]]; then
    ref=$cadvisor_version
    if ! git -C "$CADVISOR_SRC" rev-parse -q --verify "refs/tags/$ref" >/dev/null; then
      ref=$(git -C "$CADVISOR_SRC" tag -l "${cadvisor_version%.*}.*" | sort -V | tail -1)
      [[ -n "$ref" ]] || { echo "$me: $CADVISOR_SRC has no tag $cadvisor_version nor ${cadvisor_version%.*}.* (set CADVISOR_REF)" >&2; exit 1; }
      echo "$me: $CADVISOR_SRC has no tag $cadvisor_version; cAdvisor's cmd/ is taken at $ref (the library stays $cadvisor_version)" >&2
    fi
  fi
  local commit
  commit=$(git -C "$CADVISOR_SRC" rev-parse -q --verify "$ref^{commit}") ||
    { echo "$me: no $ref in $CADVISOR_SRC (set CADVISOR_REF to a tag it has)" >&2; exit 1; }
  local dir=$bench_cache/cadvisor-$cadvisor_version-cmd-$ref-${commit:0:12}
  cadvisor_bin=$dir/cadvisor
  [[ -x "$cadvisor_bin" ]] && return
  local src
  src=$(mktemp -d "$work/cadvisor-src.XXXX")
  git -C "$CADVISOR_SRC" archive "$commit" cmd | tar -x -C "$src" ||
    { echo "$me: no cmd/ at $ref in $CADVISOR_SRC" >&2; exit 1; }
  go mod download github.com/google/cadvisor github.com/google/cadvisor/lib
  local root lib
  root=$(go list -m -f '{{.Dir}}' github.com/google/cadvisor)
  lib=$(go list -m -f '{{.Dir}}' github.com/google/cadvisor/lib)
  echo "$me: building cAdvisor's cmd/ at $ref against github.com/google/cadvisor{,/lib} $cadvisor_version into $dir" >&2
  mkdir -p "$dir"
  (cd "$src/cmd" &&
    go mod edit -replace "github.com/google/cadvisor=$root" -replace "github.com/google/cadvisor/lib=$lib" &&
    CGO_CFLAGS="-Wno-deprecated-declarations" GOFLAGS="-mod=mod -buildvcs=false" go build -o "$cadvisor_bin.tmp$$" .)
  mv "$cadvisor_bin.tmp$$" "$cadvisor_bin"
}

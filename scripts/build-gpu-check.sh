#!/usr/bin/env bash
# Builds, on any Linux x86-64 machine with Go and a C compiler (no GPU, no
# CUDA toolkit), everything scripts/check-real-gpu.sh runs on a GPU machine:
#
#   scripts/build-gpu-check.sh [DEST]               # default DEST: .gpucheck (git-ignored)
#   scripts/build-gpu-check.sh --check-size [DEST]  # only the size guard below
#
# DEST then holds gpu.test.gz (the realgpu test binary, go test -c -tags
# realgpu ./gpu/), gpuload, gpuscope.gz (both Go binaries stripped; the two
# large ones compressed), tensorload.py, a copy of check-real-gpu.sh and
# SHA256SUMS. The device tool carries the working tree (tracked and
# untracked files git does not ignore) plus the paths named in its carry,
# 64 MiB in all: the build fails (exit 1) when the tree and DEST together
# exceed GPUCHECK_CARRY_MAX_MIB (default 60), leaving room for the tool.
# Carry DEST to the GPU machine and run, with the device tool:
#
#   run(command="OUT=$OUT scripts/check-real-gpu.sh .gpucheck",
#       carry=[".gpucheck"], timeout_s=480)
#
# (check-real-gpu.sh says what it checks and how long it takes.)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
check_only=0
if [[ ${1:-} == --check-size ]]; then
  check_only=1
  shift
fi
dest=${1:-.gpucheck}
max_mib=${GPUCHECK_CARRY_MAX_MIB:-60}
if [[ ! $max_mib =~ ^[0-9]+$ ]]; then
  echo "build-gpu-check.sh: GPUCHECK_CARRY_MAX_MIB must be a whole number of MiB, got '$max_mib'" >&2
  exit 1
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# check_size: the carry is the working tree's files plus DEST; fail when
# over max_mib.
check_size() {
  local tree dest_b total
  if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "build-gpu-check.sh: $(pwd) is not a git work tree: cannot tell what the device tool would carry" >&2
    return 1
  fi
  tree=$(git ls-files -z --cached --others --exclude-standard | { xargs -0 stat -c %s -- 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }')
  dest_b=$(du -sb "$dest" | cut -f1)
  total=$((tree + dest_b))
  local tree_m dest_m total_m
  tree_m=$(mib "$tree")
  dest_m=$(mib "$dest_b")
  total_m=$(mib "$total")
  echo "carry: the working tree ${tree_m} MiB + $dest ${dest_m} MiB = ${total_m} MiB (limit ${max_mib} MiB; the device tool takes 64)" >&2
  if ((total > max_mib * 1048576)); then
    echo "build-gpu-check.sh: the carry would be ${total_m} MiB, over ${max_mib} MiB: remove large untracked files from the tree (git status), or make $dest smaller" >&2
    return 1
  fi
}

if ((check_only)); then
  [[ -d $dest ]] || {
    echo "build-gpu-check.sh: $dest is not a folder" >&2
    exit 1
  }
  check_size
  exit
fi

# The GPU machines are x86-64; cgo needs a matching C compiler.
if [[ $(go env GOHOSTOS)/$(go env GOHOSTARCH) != linux/amd64 ]]; then
  echo "build-gpu-check.sh: build on linux/amd64 (this is $(go env GOHOSTOS)/$(go env GOHOSTARCH)): the binaries use cgo" >&2
  exit 1
fi
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
flags=(-trimpath -ldflags=-s\ -w)

mkdir -p "$dest"
rm -f "$dest/gpu.test" "$dest/gpu.test.gz" "$dest/gpuload" "$dest/gpuscope" "$dest/gpuscope.gz" \
  "$dest/tensorload.py" "$dest/check-real-gpu.sh" "$dest/SHA256SUMS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "building $dest/gpuload" >&2
timeout 600 go build "${flags[@]}" -o "$dest/gpuload" ./scripts/gpuload
echo "building $dest/gpu.test.gz (go test -c -tags realgpu ./gpu/)" >&2
timeout 900 go test -c -tags realgpu "${flags[@]}" -o "$tmp/gpu.test" ./gpu/
gzip -9 -c "$tmp/gpu.test" >"$dest/gpu.test.gz"
echo "building $dest/gpuscope.gz" >&2
timeout 1800 go build "${flags[@]}" -o "$tmp/gpuscope" .
gzip -9 -c "$tmp/gpuscope" >"$dest/gpuscope.gz"
cp scripts/check-real-gpu.sh "$dest/check-real-gpu.sh"
cp scripts/gpuload/tensorload.py "$dest/tensorload.py"
chmod 755 "$dest/gpuload" "$dest/check-real-gpu.sh"
chmod 644 "$dest/gpu.test.gz" "$dest/gpuscope.gz" "$dest/tensorload.py"
(cd "$dest" && sha256sum gpu.test.gz gpuload gpuscope.gz tensorload.py check-real-gpu.sh >SHA256SUMS)

echo "$dest, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'):" >&2
ls -l "$dest" >&2
check_size

#!/usr/bin/env bash
# Builds, on any Linux x86-64 machine with Go and a C compiler (no GPU, no
# CUDA toolkit), everything scripts/check-real-gpu.sh runs on a GPU machine:
#
#   scripts/build-gpu-check.sh [DEST]     # default DEST: .gpucheck (git-ignored)
#
# DEST then holds gpu.test (the realgpu test binary), gpuload, gpuscope.gz
# (stripped and compressed to keep DEST small enough to carry), a copy of
# check-real-gpu.sh and SHA256SUMS. Carry DEST to the GPU machine and run
#
#   DEST/check-real-gpu.sh               # or: scripts/check-real-gpu.sh DEST
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest=${1:-.gpucheck}

# The GPU machines are x86-64; cgo needs a matching C compiler.
if [[ $(go env GOHOSTOS)/$(go env GOHOSTARCH) != linux/amd64 ]]; then
  echo "build-gpu-check.sh: build on linux/amd64 (this is $(go env GOHOSTOS)/$(go env GOHOSTARCH)): the binaries use cgo" >&2
  exit 1
fi
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
flags=(-trimpath -ldflags=-s\ -w)

mkdir -p "$dest"
rm -f "$dest/gpu.test" "$dest/gpuload" "$dest/gpuscope.gz" "$dest/SHA256SUMS"
echo "building $dest/gpuload" >&2
timeout 600 go build "${flags[@]}" -o "$dest/gpuload" ./scripts/gpuload
echo "building $dest/gpu.test (go test -c -tags realgpu ./gpu/)" >&2
timeout 900 go test -c -tags realgpu "${flags[@]}" -o "$dest/gpu.test" ./gpu/
echo "building $dest/gpuscope.gz" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 1800 go build "${flags[@]}" -o "$tmp/gpuscope" .
gzip -9 -c "$tmp/gpuscope" >"$dest/gpuscope.gz"
cp scripts/check-real-gpu.sh "$dest/check-real-gpu.sh"
chmod 755 "$dest/gpu.test" "$dest/gpuload" "$dest/check-real-gpu.sh"
(cd "$dest" && sha256sum gpu.test gpuload gpuscope.gz check-real-gpu.sh >SHA256SUMS)

size=$(du -sm "$dest" | cut -f1)
echo "$dest: ${size} MiB, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
ls -l "$dest" >&2
if ((size > 56)); then
  echo "build-gpu-check.sh: $dest is ${size} MiB; the device tool carries at most 64 MiB with the working tree" >&2
fi

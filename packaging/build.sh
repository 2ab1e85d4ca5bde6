#!/usr/bin/env bash
# Builds gpuscope's release artifacts from this checkout into dist/ ($DIST):
#
#   dist/gpuscope_<version>_<arch>.deb       (nfpm, packaging/nfpm.yaml)
#   dist/gpuscope-<version>.<rpmarch>.rpm    (nfpm)
#   dist/gpuscope.1.gz                       (docs/gpuscope.1, for both)
#   image gpuscope:<version> and :latest     (packaging/Dockerfile), where a
#                                            Docker daemon answers
#
# Usage: packaging/build.sh [all|version|binary|deb|rpm|image]   (default all)
#
# The version comes from `git describe` and is always semver, because
# Grafana parses the one /api/v1/status/buildinfo reports:
#   on tag v1.2.3                 1.2.3
#   4 commits after v1.2.3        1.2.3+4.g<sha>    (sorts after 1.2.3 in dpkg and rpm)
#   no v* tag yet                 0.0.0-<commits>-g<sha>
#   uncommitted changes           ".dirty" appended (1.2.3+dirty for a tag)
#
# Environment:
#   VERSION, REVISION, BRANCH, BUILD_USER, BUILD_DATE
#                   override what is stamped into the binary (the
#                   Dockerfile passes them in: its context has no .git)
#   DIST            output directory (default dist)
#   OUT             where `binary` writes gpuscope (default $DIST/linux-<arch>/gpuscope)
#   NFPM            nfpm command (default: go run nfpm@v2.45.2; not a
#                   dependency of the gpuscope module)
#   DOCKER          docker CLI (default docker); NO_DOCKER=1 skips the image
#   IMAGE           image name (default gpuscope)
#   GO_IMAGE, RUNTIME_IMAGE
#                   base images of the Dockerfile's two stages (defaults in
#                   the Dockerfile: golang:1.26-bookworm, debian:bookworm-slim)
#   DOCKER_VENDOR=1 put a vendor/ directory (from the local module cache)
#                   into the build context, so the image builds without
#                   network access (CI)
#   DOCKER_BUILD_FLAGS  extra `docker build` flags, e.g. --network=host
#   IMAGE_BINARY    put this gpuscope binary into the image instead of
#                   building one in the container; `all` sets it to the
#                   binary it packaged, so deb, rpm and image hold the same
#                   bytes (its glibc need, checked by the package test, is
#                   older than the runtime base's)
set -euo pipefail

cd "$(dirname "$0")/.."

NFPM_VERSION=v2.45.2
export PATH="$PATH:/usr/local/go/bin"

die() {
	echo "packaging/build.sh: $*" >&2
	exit 1
}

semver_re='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'

git_version() {
	local dirty="" desc tag n sha
	git update-index -q --refresh >/dev/null 2>&1 || true
	git diff-index --quiet HEAD -- 2>/dev/null || dirty=".dirty"
	if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
		# <tag>-<n>-g<sha>; the tag may itself contain '-' (v1.0.0-rc.1).
		sha=${desc##*-g}
		n=${desc%-g*}
		n=${n##*-}
		tag=${desc%-*-g*}
		tag=${tag#v}
		if [ "$n" = 0 ]; then
			if [ -n "$dirty" ]; then echo "$tag+dirty"; else echo "$tag"; fi
		else
			echo "$tag+$n.g$sha$dirty"
		fi
	else
		sha=$(git rev-parse --short HEAD) || die "not a git checkout and VERSION is not set"
		n=$(git rev-list --count HEAD)
		echo "0.0.0-$n-g$sha$dirty"
	fi
}

version() {
	local v=${VERSION:-}
	if [ -z "$v" ]; then
		v=$(git_version)
	fi
	v=${v#v}
	[[ $v =~ $semver_re ]] || die "version '$v' is not semver (tag releases as v<major>.<minor>.<patch>)"
	echo "$v"
}

ARCH=$(go env GOARCH)
case "$ARCH" in
amd64) RPMARCH=x86_64 ;;
arm64) RPMARCH=aarch64 ;;
*) die "unsupported GOARCH $ARCH" ;;
esac
DIST=${DIST:-dist}
BIN=${OUT:-$DIST/linux-$ARCH/gpuscope}

binary() {
	local v revision branch user date pkg=github.com/prometheus/common/version
	v=$(version)
	revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
	branch=${BRANCH:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)}
	user=${BUILD_USER:-$(id -un)@${HOSTNAME:-$(uname -n)}}
	# The commit's time, not the wall clock, so a rebuild of one commit is
	# byte-identical; SOURCE_DATE_EPOCH wins, as reproducible-builds asks.
	if [ -z "${BUILD_DATE:-}" ]; then
		if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
			BUILD_DATE=$(TZ=UTC date -d "@$SOURCE_DATE_EPOCH" +%Y%m%d-%H:%M:%S)
		else
			BUILD_DATE=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S 2>/dev/null || echo unknown)
		fi
	fi
	mkdir -p "$(dirname "$BIN")"
	# cgo for go-nvml; NVML itself is dlopen'ed at run time, so the binary
	# needs only glibc. go-nvml's header marks some calls deprecated: noise.
	CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" \
		go build -trimpath -o "$BIN" -ldflags "-s -w
			-X $pkg.Version=$v
			-X $pkg.Revision=$revision
			-X $pkg.Branch=$branch
			-X $pkg.BuildUser=$user
			-X $pkg.BuildDate=$BUILD_DATE" .
	echo "built $BIN ($v)" >&2
}

nfpm() {
	if [ -n "${NFPM:-}" ]; then
		$NFPM "$@"
	else
		go run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" "$@"
	fi
}

package() {
	local packager=$1 v target
	v=$(version)
	case "$packager" in
	deb) target=$DIST/gpuscope_${v}_${ARCH}.deb ;;
	rpm) target=$DIST/gpuscope-${v}.${RPMARCH}.rpm ;;
	esac
	rm -f "$target"
	# man pages are installed gzipped; -n leaves the name and time out,
	# so the same page gives the same bytes.
	mkdir -p "$DIST"
	gzip -9nc docs/gpuscope.1 >"$DIST/gpuscope.1.gz"
	GPUSCOPE_VERSION=$v GPUSCOPE_ARCH=$ARCH GPUSCOPE_BINARY=$BIN GPUSCOPE_MANPAGE=$DIST/gpuscope.1.gz \
		nfpm package --config packaging/nfpm.yaml --packager "$packager" --target "$target" >&2
	echo "$target"
}

image() {
	local docker=${DOCKER:-docker} v ctx args=()
	if [ -n "${NO_DOCKER:-}" ]; then
		echo "packaging/build.sh: NO_DOCKER is set; no image" >&2
		return 0
	fi
	if ! command -v "$docker" >/dev/null 2>&1 || ! "$docker" version >/dev/null 2>&1; then
		echo "packaging/build.sh: no Docker daemon answers ('$docker version' failed); no image" >&2
		return 0
	fi
	v=$(version)
	# The context is exactly the files git would commit (tracked and
	# untracked-but-not-ignored): no .git, data/, data-demo/ or dist/
	# travel to the daemon, and no .dockerignore is needed.
	ctx=$(mktemp -d)
	# EXIT, not RETURN: under set -e a failed docker build ends the script
	# without returning from here; $ctx is expanded now, as the local is
	# gone by then.
	# shellcheck disable=SC2064
	trap "rm -rf -- '$ctx'" EXIT
	git ls-files -z --cached --others --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - | tar -C "$ctx" -xf -
	if [ -n "${IMAGE_BINARY:-}" ]; then
		[ -x "$IMAGE_BINARY" ] || die "IMAGE_BINARY $IMAGE_BINARY is not an executable file"
		mkdir -p "$ctx/.build"
		cp "$IMAGE_BINARY" "$ctx/.build/gpuscope"
		args+=(--build-arg BINARY=.build/gpuscope)
	elif [ -n "${DOCKER_VENDOR:-}" ]; then
		go mod vendor -o "$ctx/vendor"
		args+=(--build-arg GOFLAGS=-mod=vendor)
	fi
	[ -n "${GO_IMAGE:-}" ] && args+=(--build-arg "GO_IMAGE=$GO_IMAGE")
	[ -n "${RUNTIME_IMAGE:-}" ] && args+=(--build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE")
	# shellcheck disable=SC2086 # DOCKER_BUILD_FLAGS is a list of flags.
	"$docker" build ${DOCKER_BUILD_FLAGS:-} "${args[@]}" \
		--build-arg "VERSION=$v" \
		--build-arg "REVISION=$(git rev-parse HEAD)" \
		--build-arg "BRANCH=$(git rev-parse --abbrev-ref HEAD)" \
		--build-arg "BUILD_USER=$(id -un)@${HOSTNAME:-$(uname -n)}" \
		--build-arg "BUILD_DATE=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S)" \
		-f packaging/Dockerfile -t "${IMAGE:-gpuscope}:$v" -t "${IMAGE:-gpuscope}:latest" "$ctx" >&2
	echo "${IMAGE:-gpuscope}:$v"
}

case "${1:-all}" in
version) version ;;
binary) binary ;;
deb | rpm)
	binary
	package "$1"
	;;
image) image ;;
all)
	binary
	package deb
	package rpm
	IMAGE_BINARY=$BIN image
	;;
*) die "unknown target '$1' (all, version, binary, deb, rpm, image)" ;;
esac

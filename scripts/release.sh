#!/usr/bin/env bash
# Builds a release of xds-relay reproducibly: the same commit and the same Go
# toolchain give byte-identical files, whatever the checkout's path, its
# files' mtimes, the build cache or the time of day.
#
#   scripts/release.sh            build into dist/ (make release)
#   scripts/release.sh check      build one binary twice and compare (make release-check)
#
# Into dist/ (gitignored), for each platform (linux/amd64 and linux/arm64):
#   xds-relay_VERSION_OS_ARCH/{xds-relay,xds-loadgen,xds-democp,xds-bench}
#   xds-relay_VERSION_OS_ARCH.tar.gz    those, with fixed owners, order and mtimes
# and SHA256SUMS (every binary and archive, for sha256sum -c) and BUILDINFO
# (version, commit, Go toolchain, SOURCE_DATE_EPOCH). Then the container image
# of deploy/Dockerfile for both platforms, as an OCI archive
# (xds-relay_VERSION_image.oci.tar), when a container engine can build it:
# docker with a reachable daemon and buildx, or podman. Without one the
# image is not built and the script says so (the binaries are).
#
# Environment:
#   VERSION            default: git describe --tags --always --dirty
#   SOURCE_DATE_EPOCH  the time written into the archives and the image;
#                      default: the commit's time (git log -1 --format=%ct)
#   PLATFORMS          default: "linux/amd64 linux/arm64"
#   CMDS               default: "xds-relay xds-loadgen xds-democp xds-bench"
#   OUT                default: dist
#   IMAGE              auto (default): build the image when an engine can;
#                      yes: fail without one; no: binaries only
#
# How the binaries are made reproducible: CGO off (static, no C toolchain in
# the output), -trimpath (no file system paths), -buildvcs=false (no VCS
# stamp, so a source archive without .git builds the same bytes; the version
# comes from VERSION through -ldflags -X main.version), -buildid= (no build
# id), -s -w (no symbol tables), and GOAMD64/GOARM64 fixed to their
# baselines. The Go toolchain itself must be the same: BUILDINFO names it.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'release: %s\n' "$*" >&2; }

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# Read once: a commit made while the release builds must not change it.
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
CMDS=${CMDS:-xds-relay xds-loadgen xds-democp xds-bench}
OUT=${OUT:-dist}
IMAGE=${IMAGE:-auto}
GO=${GO:-go}
export SOURCE_DATE_EPOCH

# build_one SRC OUTFILE OS ARCH CMD: one binary, from the module at SRC.
build_one() {
	local src=$1 outfile=$2 os=$3 arch=$4 cmd=$5
	(cd "$src" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOAMD64=v1 GOARM64=v8.0 GOFLAGS=-mod=readonly \
		"$GO" build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X main.version=$VERSION" \
		-o "$outfile" "./cmd/$cmd")
}

# archive DIR NAME: DIR/NAME.tar.gz of DIR/NAME, independent of owners,
# permissions' umask, file order and mtimes.
archive() {
	local dir=$1 name=$2
	find "$dir/$name" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	tar --sort=name --format=gnu --mtime="@$SOURCE_DATE_EPOCH" \
		--owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
		-C "$dir" -cf - "$name" | gzip -n -9 >"$dir/$name.tar.gz"
}

# engine prints the container engine that can build the image (docker or
# podman), or nothing after saying on stderr why none can.
engine() {
	if command -v docker >/dev/null 2>&1; then
		if ! docker info >/dev/null 2>&1; then
			log "docker is installed but its daemon is not reachable (docker info failed)"
		elif ! docker buildx version >/dev/null 2>&1; then
			log "docker is installed but has no buildx (needed for the two platforms and SOURCE_DATE_EPOCH)"
		else
			echo docker
			return
		fi
	fi
	if command -v podman >/dev/null 2>&1; then
		echo podman
		return
	fi
	command -v docker >/dev/null 2>&1 || log "neither docker nor podman is installed"
}

build_image() {
	local eng created archive platforms
	eng=$(engine)
	if [[ -z $eng ]]; then
		if [[ $IMAGE == yes ]]; then
			log "image: NOT built, and IMAGE=yes asks for it"
			return 1
		fi
		log "image: NOT built (binaries and SHA256SUMS only); on a machine with docker (buildx) or podman: make release"
		return 0
	fi
	created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
	archive=$OUT/xds-relay_${VERSION}_image.oci.tar
	platforms=$(tr ' ' ',' <<<"$PLATFORMS")
	local -a args=(-f deploy/Dockerfile
		--build-arg "VERSION=$VERSION"
		--build-arg "REVISION=$COMMIT"
		--build-arg "CREATED=$created"
		--build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH")
	log "image: $eng, $platforms → $archive"
	case $eng in
	docker)
		# BuildKit takes SOURCE_DATE_EPOCH from the build argument for the
		# image config; rewrite-timestamp clamps the layers' file times.
		docker buildx build "${args[@]}" --platform "$platforms" \
			--output "type=oci,dest=$archive,rewrite-timestamp=true" .
		;;
	podman)
		podman build "${args[@]}" --platform "$platforms" --timestamp "$SOURCE_DATE_EPOCH" \
			--manifest "xds-relay:$VERSION" .
		podman manifest push --all "xds-relay:$VERSION" "oci-archive:$archive"
		;;
	esac
	(cd "$OUT" && sha256sum "$(basename "$archive")" >>SHA256SUMS)
}

release() {
	log "version $VERSION, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH, $($GO version)"
	case $VERSION in *-dirty) log "the tree has uncommitted changes: $VERSION is not a release" ;; esac
	rm -rf "$OUT"
	mkdir -p "$OUT"
	local out
	out=$(cd "$OUT" && pwd)
	local -a names=()
	for p in $PLATFORMS; do
		local os=${p%/*} arch=${p#*/}
		local name=xds-relay_${VERSION}_${os}_${arch}
		mkdir -p "$out/$name"
		for cmd in $CMDS; do
			log "$p $cmd"
			build_one . "$out/$name/$cmd" "$os" "$arch" "$cmd"
		done
		archive "$out" "$name"
		names+=("$name")
	done
	{
		echo "version: $VERSION"
		echo "commit: $COMMIT"
		echo "go: $($GO env GOVERSION)"
		echo "source_date_epoch: $SOURCE_DATE_EPOCH"
		echo "platforms: $PLATFORMS"
	} >"$out/BUILDINFO"
	(cd "$out" && for n in "${names[@]}"; do
		sha256sum "$n.tar.gz"
		for cmd in $CMDS; do sha256sum "$n/$cmd"; done
	done >SHA256SUMS)
	touch -d "@$SOURCE_DATE_EPOCH" "$out/BUILDINFO" "$out/SHA256SUMS"
	[[ $IMAGE == no ]] || build_image
	log "done: $OUT/SHA256SUMS"
	cat "$out/SHA256SUMS"
}

# check builds one binary twice and fails unless the two are byte-identical:
# once from this checkout, once from a copy of its tracked files only, at
# another path, with other mtimes; it archives each and compares the archives
# too. The two builds share the Go build cache (a cold one rebuilds every
# dependency: minutes on a small machine), so the check shows that the output
# depends on neither the path, the mtimes, untracked files nor the archive
# step; that the Go compiler is deterministic is Go's own guarantee.
check() {
	local cmd=${CHECK_CMD:-xds-democp} p=${CHECK_PLATFORM:-linux/amd64}
	local os=${p%/*} arch=${p#*/}
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	log "check: $cmd for $p, twice"
	mkdir -p "$tmp/a/x" "$tmp/b/x" "$tmp/copy/src"
	build_one . "$tmp/a/x/$cmd" "$os" "$arch" "$cmd"
	git ls-files -z --cached | xargs -0 tar -cf - | tar -xf - -C "$tmp/copy/src"
	find "$tmp/copy/src" -exec touch -h -d '2001-02-03 04:05:06' {} +
	build_one "$tmp/copy/src" "$tmp/b/x/$cmd" "$os" "$arch" "$cmd"
	archive "$tmp/a" x
	archive "$tmp/b" x
	if ! cmp "$tmp/a/x/$cmd" "$tmp/b/x/$cmd" || ! cmp "$tmp/a/x.tar.gz" "$tmp/b/x.tar.gz"; then
		log "check: FAILED: two builds of $cmd differ"
		return 1
	fi
	log "check: OK, byte-identical: $(sha256sum "$tmp/a/x/$cmd" | cut -d' ' -f1) $cmd"
}

case ${1:-release} in
release) release ;;
check) check ;;
*)
	echo "usage: scripts/release.sh [release|check]" >&2
	exit 2
	;;
esac

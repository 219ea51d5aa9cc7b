#!/usr/bin/env bash
# Build mm's release archives.
#
#   scripts/release.sh v1.2.3           build every target into dist/, then dist/SHA256SUMS
#   scripts/release.sh --names v1.2.3   print "<registry platform> <archive> <cmd>" per target; build nothing
#   make release VERSION=v1.2.3         the same as the first line
#
# Each archive holds mm (mm.exe on Windows), the binary editors start, and
# mm-node, mm with the cluster (every provider), which `mm serve` runs when
# its config names a cluster; LICENSE and README.md, all at its top level: mm-<version>-<os>-<arch>.tar.gz, or .zip for Windows. Upload them to
# the GitHub release tagged <version>: acp_registry/agent.json points there,
# and cmd/mm/registry_test.go checks its URLs against `--names`, so the names
# are made in one place, archive_name below.
#
# Environment:
#   TARGETS            GOOS/GOARCH pairs to build (default: all six below), e.g.
#                      TARGETS="linux/amd64 darwin/arm64" scripts/release.sh v1.2.3
#   DIST               output directory (default: dist)
#   SOURCE_DATE_EPOCH  timestamp of the archived files (default: the last
#                      commit's time), so that a rebuild gives the same archives
#
# Needs go, tar, gzip, zip (for Windows) and sha256sum or shasum.
set -euo pipefail

all_targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"

die() {
	echo "release: $*" >&2
	exit 1
}

usage() {
	echo "usage: scripts/release.sh [--names] VERSION   (VERSION like v1.2.3)" >&2
	exit 2
}

names_only=false
if [[ ${1-} == --names ]]; then
	names_only=true
	shift
fi
[[ $# -eq 1 ]] || usage
version=$1
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION must look like v1.2.3 (the git tag), not \"$version\""
read -r -a targets <<<"${TARGETS:-$all_targets}"
[[ ${#targets[@]} -gt 0 ]] || die "TARGETS is empty"

# archive_name GOOS GOARCH
archive_name() {
	local ext=tar.gz
	[[ $1 == windows ]] && ext=zip
	printf 'mm-%s-%s-%s.%s' "$version" "$1" "$2" "$ext"
}

# exe_name GOOS
exe_name() {
	if [[ $1 == windows ]]; then echo mm.exe; else echo mm; fi
}

# registry_platform GOOS GOARCH: the ACP registry's name for the target.
registry_platform() {
	local arch=$2
	case $2 in
	amd64) arch=x86_64 ;;
	arm64) arch=aarch64 ;;
	esac
	printf '%s-%s' "$1" "$arch"
}

for t in "${targets[@]}"; do
	[[ $t == */* ]] || die "target \"$t\" is not GOOS/GOARCH"
done

if $names_only; then
	for t in "${targets[@]}"; do
		goos=${t%/*} goarch=${t#*/}
		printf '%s %s ./%s\n' "$(registry_platform "$goos" "$goarch")" "$(archive_name "$goos" "$goarch")" "$(exe_name "$goos")"
	done
	exit 0
fi

cd "$(dirname "$0")/.."
[[ -f LICENSE && -f README.md ]] || die "LICENSE and README.md must exist at the repository root"
mkdir -p "${DIST:-dist}"
dist=$(cd "${DIST:-dist}" && pwd)
if [[ -z ${SOURCE_DATE_EPOCH-} ]]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi

if command -v sha256sum >/dev/null; then
	sha256() { sha256sum "$@"; }
else
	sha256() { shasum -a 256 "$@"; }
fi
# GNU tar can make archives that depend only on their contents.
tar_flags=()
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
	tar_flags=(--sort=name --owner=0 --group=0 --numeric-owner "--mtime=@$SOURCE_DATE_EPOCH")
fi

# Everything is made in a scratch directory and moves to $dist only when
# every target has built: a failed run leaves $dist as it was.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
out="$stage/out"
mkdir "$out" "$stage/docs"
# One copy for every archive, even if README.md is edited meanwhile.
cp LICENSE README.md "$stage/docs/"
host="$(go env GOOS)/$(go env GOARCH)"
built=()
for t in "${targets[@]}"; do
	goos=${t%/*} goarch=${t#*/}
	exe=$(exe_name "$goos")
	archive=$(archive_name "$goos" "$goarch")
	dir="$stage/$goos-$goarch"
	mkdir -p "$dir"
	echo "release: $goos/$goarch → $archive" >&2
	node=${exe/mm/mm-node}
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath \
		-ldflags "-s -w -X github.com/mm-agent/mm/protocol.Version=$version" \
		-o "$dir/$exe" ./cmd/mm ||
		die "go build failed for $goos/$goarch"
	# mm-node, beside mm, is what mm serve runs on a cluster config: it has
	# every cluster provider (docs/cluster.md).
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -tags etcd,consul,k8s \
		-ldflags "-s -w -X github.com/mm-agent/mm/protocol.Version=$version" \
		-o "$dir/$node" ./cmd/mm-node ||
		die "go build of mm-node failed for $goos/$goarch"
	if [[ $t == "$host" ]]; then
		got=$("$dir/$exe" --version)
		[[ $got == "$version" ]] || die "$goos/$goarch: mm --version printed \"$got\", want \"$version\""
		got=$("$dir/$node" --version)
		[[ $got == "$version" ]] || die "$goos/$goarch: mm-node --version printed \"$got\", want \"$version\""
	fi
	cp "$stage/docs/LICENSE" "$stage/docs/README.md" "$dir/"
	touch -d "@$SOURCE_DATE_EPOCH" "$dir"/* 2>/dev/null || true
	if [[ $goos == windows ]]; then
		(cd "$dir" && zip -q -X "$out/$archive" "$exe" "$node" LICENSE README.md)
	else
		tar ${tar_flags[@]+"${tar_flags[@]}"} -C "$dir" -cf - "$exe" "$node" LICENSE README.md | gzip -n -9 >"$out/$archive"
	fi
	built+=("$archive")
done
(cd "$out" && sha256 "${built[@]}" >SHA256SUMS)
for t in $all_targets; do
	rm -f "$dist/$(archive_name "${t%/*}" "${t#*/}")"
done
rm -f "$dist/SHA256SUMS"
mv "$out"/* "$dist/"
echo "release: ${#built[@]} archive(s) and SHA256SUMS in $dist" >&2

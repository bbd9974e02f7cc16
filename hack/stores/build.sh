#!/usr/bin/env bash
# Builds the servers the snapshot-store tests start, from the Go modules pinned in this
# folder's go.mod, into a cache folder keyed by their versions: versitygw (an S3-compatible
# server; the tests run its posix backend), fake-gcs-server (GCS) and local-kms (AWS KMS for
# awskms:// keys); and installs Azurite (Azure Blob, an npm package, run with node). A binary
# that is already there is never rebuilt; nothing here is committed.
#
# Usage: hack/stores/build.sh [--print-dir]
#   --print-dir only prints the binary folder, building nothing.
# The cache root is $REWIND_STORES_CACHE (default: <repo>/.cache/stores).
# Prints the binary folder as its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_root=${REWIND_STORES_CACHE:-$root/.cache/stores}

ver() { awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
vgw=$(ver github.com/versity/versitygw)
kms=$(ver github.com/nsmithuk/local-kms)
gcs=$(ver github.com/fsouza/fake-gcs-server)
azurite=3.37.0
recipe=2
key="versitygw-${vgw}_fake-gcs-${gcs}_azurite-${azurite}_local-kms-${kms##*-}_r${recipe}"
bin="$out_root/$key"
if [ "${1:-}" = "--print-dir" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$bin"
cd "$here"
export CGO_ENABLED=0

build() { # name package
	local name=$1 pkg=$2
	if [ -x "$bin/$name" ]; then
		echo "store-bins: $name is cached ($bin/$name)" >&2
		return
	fi
	echo "store-bins: building $name from $pkg ..." >&2
	local start
	start=$(date +%s)
	# A temporary name of its own: two test packages may build at once.
	local tmp="$bin/$name.tmp.$$"
	if ! go build -trimpath -ldflags="-s -w" -o "$tmp" "$pkg"; then
		rm -f "$tmp"
		echo "store-bins: building $name failed" >&2
		exit 1
	fi
	mv -f "$tmp" "$bin/$name"
	echo "store-bins: built $name in $(($(date +%s) - start))s" >&2
}

build versitygw github.com/versity/versitygw/cmd/versitygw
build local-kms github.com/nsmithuk/local-kms
build fake-gcs-server github.com/fsouza/fake-gcs-server

if [ ! -x "$bin/azurite/node_modules/.bin/azurite-blob" ]; then
	echo "store-bins: installing azurite@$azurite (npm) ..." >&2
	tmp="$bin/azurite.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "azurite@$azurite" >&2; then
		rm -rf "$tmp"
		echo "store-bins: installing azurite failed" >&2
		exit 1
	fi
	rm -rf "$bin/azurite"
	mv "$tmp" "$bin/azurite"
fi
echo "$bin"

#!/usr/bin/env bash
# Builds the testbed binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kwok, and kubectl for trying things by hand) from the Go modules pinned in this folder's
# go.mod into a cache folder keyed by their versions. A binary that is already there is never
# rebuilt. Prints which binary is being built and the elapsed time while the (long, cold) build
# runs.
#
# Usage: hack/testbed/build.sh [--print-dir]
#   --print-dir only prints the binary folder, building nothing.
# The cache root is $REWIND_TESTBED_CACHE (default: <repo>/.cache/testbed).
# Prints the binary folder as its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_root=${REWIND_TESTBED_CACHE:-$root/.cache/testbed}

ver() { awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$here/go.mod"; }
k8s=$(ver k8s.io/kubernetes)
etcd=$(ver go.etcd.io/etcd/server/v3)
kwok=$(ver sigs.k8s.io/kwok)
# The recipe number changes when the way the binaries are built changes (e.g. link flags).
recipe=2
key="k8s-${k8s}_etcd-${etcd}_kwok-${kwok}_r${recipe}"
bin="$out_root/$key"
if [ "${1:-}" = "--print-dir" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$bin"

cd "$here"
export CGO_ENABLED=0
start_all=$(date +%s)

# Kubernetes binaries report their version from link-time variables (as its own build does).
minor=$(echo "$k8s" | cut -d. -f2)
kv=k8s.io/component-base/version
cv=k8s.io/client-go/pkg/version
k8s_ldflags="-X $kv.gitVersion=$k8s -X $kv.gitMajor=1 -X $kv.gitMinor=$minor -X $kv.gitTreeState=clean -X $kv.buildDate=1970-01-01T00:00:00Z"
k8s_ldflags="$k8s_ldflags -X $cv.gitVersion=$k8s -X $cv.gitMajor=1 -X $cv.gitMinor=$minor"

build() { # name package
	local name=$1 pkg=$2 ldflags="-s -w"
	case "$pkg" in k8s.io/kubernetes/*) ldflags="$ldflags $k8s_ldflags" ;; esac
	if [ -x "$bin/$name" ]; then
		echo "testbed-bins: $name is cached ($bin/$name)" >&2
		return
	fi
	echo "testbed-bins: building $name from $pkg ..." >&2
	local start
	start=$(date +%s)
	go build -trimpath -ldflags="$ldflags" -o "$bin/$name.tmp" "$pkg" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 1 30); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "testbed-bins:   still building $name, $(($(date +%s) - start))s elapsed" >&2
		fi
	done
	if ! wait "$pid"; then
		rm -f "$bin/$name.tmp"
		echo "testbed-bins: building $name failed" >&2
		exit 1
	fi
	mv "$bin/$name.tmp" "$bin/$name"
	echo "testbed-bins: built $name in $(($(date +%s) - start))s" >&2
}

build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kwok sigs.k8s.io/kwok/cmd/kwok
build kubectl k8s.io/kubernetes/cmd/kubectl
if [ ! -s "$bin/kwok-stages.yaml" ]; then
	go run ./kwokstages >"$bin/kwok-stages.yaml.tmp"
	mv "$bin/kwok-stages.yaml.tmp" "$bin/kwok-stages.yaml"
fi
echo "testbed-bins: all binaries ready in $bin ($(($(date +%s) - start_all))s)" >&2
echo "$bin"

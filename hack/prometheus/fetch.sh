#!/usr/bin/env bash
# Puts Prometheus's promtool (config/ rule checks) and prometheus (the server the metric-gate
# tests start) into a cache folder, from Debian's prometheus package, without installing it:
# `apt-get download` fetches the .deb and `dpkg -x` unpacks it into a temporary folder, of
# which only the two binaries are kept. Nothing is installed, no service is enabled or
# started, and nothing here is committed. Needs apt-get and dpkg (Debian, Ubuntu); on a
# machine whose package lists are empty, `apt-get update` runs first (as root, or with sudo).
#
# Usage: hack/prometheus/fetch.sh [--print-dir]
#   --print-dir only prints the binary folder, fetching nothing.
# The cache root is $REWIND_TOOLS_CACHE (default: <repo>/.cache/tools).
# Prints the binary folder as its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_root=${REWIND_TOOLS_CACHE:-$root/.cache/tools}
# The Debian version fetched (Debian 12's); the folder is keyed by it.
version=2.42.0+ds-5+b6
bin="$out_root/prometheus-${version}"
if [ "${1:-}" = "--print-dir" ]; then
	echo "$bin"
	exit 0
fi
if [ -x "$bin/promtool" ] && [ -x "$bin/prometheus" ]; then
	echo "prometheus: promtool and prometheus are cached ($bin)" >&2
	echo "$bin"
	exit 0
fi
for cmd in apt-get dpkg; do
	command -v "$cmd" >/dev/null 2>&1 || { echo "prometheus: $cmd is missing: promtool and prometheus come from Debian's prometheus package (see README, Prerequisites)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "prometheus: downloading Debian's prometheus $version (about 19 MB; not installed) ..." >&2
download() { (cd "$tmp" && apt-get download -q "prometheus=$version" >/dev/null 2>"$tmp/apt.log"); }
if ! download; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "prometheus: the package lists lack it: $sudo apt-get update" >&2
	$sudo apt-get update -qq >/dev/null
	download || { cat "$tmp/apt.log" >&2; exit 1; }
fi
dpkg -x "$tmp"/prometheus_*.deb "$tmp/x"
mkdir -p "$bin"
for b in promtool prometheus; do
	install -m 0755 "$tmp/x/usr/bin/$b" "$bin/$b.tmp.$$"
	mv -f "$bin/$b.tmp.$$" "$bin/$b"
done
echo "prometheus: promtool and prometheus are in $bin" >&2
echo "$bin"

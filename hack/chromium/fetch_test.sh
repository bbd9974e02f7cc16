#!/usr/bin/env bash
# Tests hack/chromium/fetch.sh as on a fresh Debian 12 machine without chromium, on any Debian
# 12 machine, installing nothing: apt and dpkg read a copy of this machine's package database
# that keeps only the base system (the packages of priority required, the essential ones and
# what they depend on: about a debian:12 image), through APT_CONFIG and DPKG_ADMINDIR. fetch.sh
# then downloads chromium with every library that base lacks into a temporary cache, and the
# test checks that
#   - the launcher runs the unpacked binary (/proc/<pid>/exe) and it renders a page;
#   - each shared library the binary and its libraries load comes from the unpacked tree or
#     from a package of that base, none is missing (ldd with the launcher's LD_LIBRARY_PATH);
#   - this machine's package database is unchanged (nothing installed).
# Downloads about 130 MB and unpacks about 420 MB into a temporary folder it removes.
# Usage: hack/chromium/fetch_test.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

db_before=$(sha256sum /var/lib/dpkg/status)

# The base system: priority required and essential packages, and their installed dependencies.
base=$(awk -v RS= '/\nPriority: required/ || /\nEssential: yes/ {split($0, a, "\n"); sub("Package: ", "", a[1]); print a[1]}' /var/lib/dpkg/status)
# shellcheck disable=SC2086
apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
	--no-replaces --no-enhances $base 2>/dev/null | grep -v '^ ' | grep -v '^<' | sed 's/:.*//' | sort -u >"$tmp/base.txt"
mkdir -p "$tmp/dpkg/updates" "$tmp/dpkg/info"
awk 'NR == FNR {keep[$1] = 1; next} {split($0, a, "\n"); p = a[1]; sub("Package: ", "", p); if (p in keep) print $0 "\n"}' \
	"$tmp/base.txt" RS= /var/lib/dpkg/status >"$tmp/dpkg/status"
n=$(grep -c '^Package:' "$tmp/dpkg/status")
grep -q '^Package: chromium$' "$tmp/dpkg/status" && fail "the base system holds chromium"
echo "base system: $n packages (of $(grep -c '^Package:' /var/lib/dpkg/status) installed here)"
printf 'Dir::State::status "%s";\n' "$tmp/dpkg/status" >"$tmp/apt.conf"

start=$(date +%s)
launcher=$(APT_CONFIG="$tmp/apt.conf" DPKG_ADMINDIR="$tmp/dpkg" REWIND_TOOLS_CACHE="$tmp/cache" "$here/fetch.sh" | tail -1)
echo "fetch: $(($(date +%s) - start)) s, launcher $launcher"
[ "$launcher" = "$(cd "$tmp/cache/chromium" && pwd -P)/chromium" ] || fail "launcher $launcher is not in the cache"
tree=$(find "$tmp/cache/chromium" -mindepth 1 -maxdepth 1 -type d -not -name '.*')
bin="$tree/usr/lib/chromium/chromium"
echo "unpacked: $(du -sm "$tree" | cut -f1) MB in $tree"

# The unpacked binary runs and renders. Its temporary files (the process-singleton socket,
# left behind when it is stopped) go into the test's folder.
export TMPDIR="$tmp/tmp"
mkdir -p "$TMPDIR"
out=$("$launcher" --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/profile" \
	--dump-dom 'data:text/html,<p id=x>rendered by the unpacked chromium</p>' 2>/dev/null)
[[ $out == *'<p id="x">rendered by the unpacked chromium</p>'* ]] || fail "no page from the unpacked chromium: $out"
"$launcher" --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/profile2" --remote-debugging-port=0 about:blank 2>/dev/null &
pids+=($!)
exe=""
for _ in $(seq 100); do
	exe=$(readlink "/proc/${pids[0]}/exe" || true)
	[ "$exe" = "$bin" ] && break
	sleep 0.1
done
[ "$exe" = "$bin" ] || fail "the launcher runs $exe, not $bin"
echo "process ${pids[0]} runs $exe"
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
pids=()

# Every library resolves, to the tree or to the base system.
libpath=$(sed -n 's/^export LD_LIBRARY_PATH="\([^$]*\)\$.*/\1/p' "$launcher")
[ -n "$libpath" ] || fail "the launcher sets no LD_LIBRARY_PATH"
ldd_out=$(LD_LIBRARY_PATH="$libpath" ldd "$bin")
if grep 'not found' <<<"$ldd_out"; then fail "libraries missing"; fi
from_tree=0 from_base=0
while read -r lib path; do
	case "$path" in
	"$tree"/*) from_tree=$((from_tree + 1)) ;;
	/*)
		pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | sed 's/:.*//') || true
		[ -n "$pkg" ] || pkg=$(dpkg -S "$path" 2>/dev/null | head -1 | sed 's/:.*//') || true
		grep -qx "$pkg" "$tmp/base.txt" || fail "$lib comes from $path ($pkg), not from the tree nor the base system"
		from_base=$((from_base + 1))
		;;
	esac
done < <(awk '$2 == "=>" {print $1, $3}' <<<"$ldd_out")
echo "libraries: $from_tree from the unpacked tree, $from_base from the base system, none missing"

[ "$(sha256sum /var/lib/dpkg/status)" = "$db_before" ] || fail "the package database changed"
echo "PASS: nothing installed; the package database is unchanged"

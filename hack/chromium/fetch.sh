#!/usr/bin/env bash
# Puts Debian's chromium (the browser test/dashboard drives with chromedp) into a cache folder
# without installing it: `apt-get download` fetches the chromium and chromium-common packages,
# and those of the shared libraries they need that this machine lacks, and `dpkg -x` unpacks
# them into the folder. A launcher, <folder>/chromium, points LD_LIBRARY_PATH (and fontconfig,
# ALSA) at the unpacked libraries and runs the unpacked browser. Nothing is installed, no
# system file is written, and nothing here is committed. Needs apt-get and dpkg with Debian
# 12's package lists; when the lists are empty or stale, `apt-get update` runs first (as root,
# or with sudo).
#
# Which libraries: chromium's and chromium-common's `lib*` dependencies (GTK, only an
# alternative and loaded by a browser with a window, is left out; so are the desktop tools
# x11-utils and xdg-utils) and fonts-liberation, the fonts chromium recommends. apt-get's own
# resolver, run as a simulation (`apt-get -s install`, which needs no root and changes nothing),
# says which of them and of their dependencies are missing or too old here; only those are
# downloaded. On a machine with chromium installed that is none of them.
#
# Usage: hack/chromium/fetch.sh [--print-dir]
#   --print-dir only prints the folder (the launcher is <folder>/chromium), fetching nothing.
# The cache root is $REWIND_TOOLS_CACHE (default: <repo>/.cache/tools); the folder is
# <root>/chromium. The version is the package lists' candidate; once a launcher runs, it is
# kept (remove the folder to fetch a newer one). Prints the launcher as its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out_root=${REWIND_TOOLS_CACHE:-$root/.cache/tools}
dir="$out_root/chromium"
launcher="$dir/chromium"
if [ "${1:-}" = "--print-dir" ]; then
	echo "$dir"
	exit 0
fi
if [ -x "$launcher" ] && out=$("$launcher" --version 2>/dev/null) && [[ $out == Chromium* ]]; then
	echo "chromium: cached, $out ($launcher)" >&2
	echo "$launcher"
	exit 0
fi
for cmd in apt-get apt-cache dpkg; do
	command -v "$cmd" >/dev/null 2>&1 || { echo "chromium: $cmd is missing: the browser tests' chromium comes from Debian's chromium package (see README, Prerequisites), or set REWIND_CHROMIUM to a chromium" >&2; exit 1; }
done

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
updated=""
update() {
	[ -z "$updated" ] || return 1
	updated=1
	echo "chromium: the package lists lack it or are stale: $sudo apt-get update" >&2
	$sudo apt-get update -qq >/dev/null
}
candidate() { apt-cache policy chromium 2>/dev/null | awk '$1 == "Candidate:" {print $2}'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	update
	version=$(candidate)
	[ -n "$version" ] && [ "$version" != "(none)" ] || { echo "chromium: no chromium package in the package lists (Debian 12 has one; elsewhere set REWIND_CHROMIUM to a chromium)" >&2; exit 1; }
fi

mkdir -p "$dir"
# The launcher names the folder by its physical path (.cache may be a symbolic link).
dir=$(cd "$dir" && pwd -P)
launcher="$dir/chromium"
# One fetch at a time (two makes may start at once); the other then finds it cached.
exec 9>"$dir/.lock"
flock 9
if [ -x "$launcher" ] && out=$("$launcher" --version 2>/dev/null) && [[ $out == Chromium* ]]; then
	echo "chromium: cached, $out ($launcher)" >&2
	echo "$launcher"
	exit 0
fi
# The temporary folder is in the cache (the unpacked tree is about 350 MB: renamed, not copied);
# one an interrupted fetch left is removed.
rm -rf "$dir"/.fetch.*
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# libs prints the packages to resolve: the lib* dependencies of chromium and chromium-common
# that are not installed here or are older than they ask for (an item with alternatives, GTK's,
# is left out), and fonts-liberation unless it is installed.
libs() {
	for p in chromium chromium-common; do
		apt-cache show "$p=$version" | awk '/^Depends:/ {sub(/^Depends: /, ""); print; exit}'
	done | tr ',' '\n' | sed 's/^ *//' | grep -v '|' | grep '^lib' | sort -u
	echo fonts-liberation
}
need() {
	local name op want have
	while read -r name op want; do
		op=${op#(} want=${want%)}
		have=$(dpkg-query -W -f='${db:Status-Abbrev}|${Version}\n' "$name" 2>/dev/null | head -1 || true)
		if [[ $have == "ii "* ]] && { [ -z "$op" ] || dpkg --compare-versions "${have#*|}" "$op" "$want"; }; then
			continue
		fi
		echo "$name"
	done < <(libs)
}
# missing prints name=version for each package apt-get would install or upgrade to give this
# machine those packages: a simulation, that installs nothing.
missing() {
	[ -n "$(need)" ] || return 0
	# shellcheck disable=SC2046
	apt-get -s -o Debug::NoLocking=1 install --no-install-recommends $(need) >"$tmp/sim.log" 2>&1 || { cat "$tmp/sim.log" >&2; return 1; }
	awk '$1 == "Inst" {v = $3; if (v ~ /^\[/) v = $4; sub(/^\(/, "", v); print $2 "=" v}' "$tmp/sim.log"
}
download() {
	rm -rf "$tmp/debs" && mkdir -p "$tmp/debs"
	local list
	list=$(missing) || return 1
	pkgs=("chromium=$version" "chromium-common=$version")
	for p in $list; do pkgs+=("$p"); done
	echo "chromium: downloading Debian's chromium $version and chromium-common (about 100 MB) and $((${#pkgs[@]} - 2)) library packages this machine lacks (not installed) ..." >&2
	(cd "$tmp/debs" && apt-get download -q "${pkgs[@]}" >/dev/null 2>"$tmp/apt.log")
}
if ! download; then
	# A security update replaces chromium's package in the archive: stale lists name one that
	# is gone.
	update || { cat "$tmp/apt.log" "$tmp/sim.log" 2>/dev/null >&2; exit 1; }
	version=$(candidate)
	download || { cat "$tmp/apt.log" >&2; exit 1; }
fi
echo "chromium: downloaded $(du -sm "$tmp/debs" | cut -f1) MB: $(cd "$tmp/debs" && ls | sed 's/_.*//' | tr '\n' ' ')" >&2

tree="$tmp/$version"
mkdir -p "$tree"
for deb in "$tmp"/debs/*.deb; do
	dpkg -x "$deb" "$tree"
done
rm -rf "$tmp/debs"
[ -x "$tree/usr/lib/chromium/chromium" ] || { echo "chromium: Debian's chromium package $version holds no usr/lib/chromium/chromium (a snap wrapper?): set REWIND_CHROMIUM to a chromium" >&2; exit 1; }

final="$dir/$version"
# The launcher's environment: every folder of the tree that holds a shared library...
libpath=$(cd "$tree" && find . -name '*.so*' \( -type f -o -type l \) -not -path './usr/lib/chromium/*' -printf '%h\n' | sort -u | sed "s|^\.|$final|" | paste -sd:)
env_lines=""
[ -z "$libpath" ] || env_lines+="export LD_LIBRARY_PATH=\"$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""$'\n'
# ... fonts unpacked here, added to this machine's fontconfig (or to the unpacked one) ...
if [ -d "$tree/usr/share/fonts" ]; then
	sysconf=/etc/fonts/fonts.conf
	if [ ! -f "$sysconf" ]; then
		sysconf="$final/etc/fonts/fonts.conf"
		env_lines+="export FONTCONFIG_PATH=\"$final/etc/fonts\""$'\n'
	fi
	cat >"$tree/fonts.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<!-- Written by hack/chromium/fetch.sh: this machine's fontconfig and the fonts unpacked here. -->
<fontconfig>
  <include ignore_missing="yes">$sysconf</include>
  <dir>$final/usr/share/fonts</dir>
</fontconfig>
EOF
	env_lines+="export FONTCONFIG_FILE=\"$final/fonts.conf\""$'\n'
fi
# ... and ALSA's configuration when it is unpacked here (no sound card is opened headless).
if [ -f "$tree/usr/share/alsa/alsa.conf" ] && [ ! -f /usr/share/alsa/alsa.conf ]; then
	env_lines+="export ALSA_CONFIG_PATH=\"$final/usr/share/alsa/alsa.conf\""$'\n'
fi
cat >"$tmp/launcher" <<EOF
#!/bin/sh
# Written by hack/chromium/fetch.sh: Debian's chromium $version, unpacked into
# $final (nothing installed).
${env_lines}export CHROME_WRAPPER="\$0"
exec "$final/usr/lib/chromium/chromium" "\$@"
EOF
chmod 0755 "$tmp/launcher"

rm -rf "$final"
mv "$tree" "$final"
mv -f "$tmp/launcher" "$launcher"
out=$("$launcher" --version 2>&1) && [[ $out == Chromium* ]] || {
	echo "chromium: the unpacked chromium does not start: $out" >&2
	LD_LIBRARY_PATH="$libpath" ldd "$final/usr/lib/chromium/chromium" | grep 'not found' >&2 || true
	exit 1
}
# Older versions unpacked here.
for old in "$dir"/*/; do
	[ "${old%/}" = "$final" ] || rm -rf "${old%/}"
done
echo "chromium: $out, unpacked into $final ($(du -sm "$final" | cut -f1) MB); launcher $launcher" >&2
echo "$launcher"

#!/usr/bin/env bash
# Builds both guest modules (tiering.ko, demeter_balloon.ko) against every
# installed Debian 6.1 and 6.12 kernel header tree, with the kernel's own
# flags and -Werror, and checks that modpost found no undefined symbol
# (every symbol used is exported by the stock kernel or the module
# itself).  Each build runs on a copy in a temporary directory, so the
# source tree stays clean.  Fails if a series has no headers installed
# (scripts/lib/deps.sh installs linux-headers-amd64 and -6.12-amd64).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kmod=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for series in 6.1 6.12; do
    kdir=$(ls -d /usr/src/linux-headers-"$series".*-amd64 2>/dev/null | sort -V | tail -n 1)
    if [[ -z $kdir || ! -e $kdir/Makefile ]]; then
        echo "kbuild-matrix: no linux-headers-$series.*-amd64 installed" >&2
        rc=1
        continue
    fi
    for m in tiering balloon; do
        d=$tmp/$series/$m
        mkdir -p "$d"
        cp -r "$kmod/$m/." "$d/"
        if make -s -C "$kdir" M="$d" modules -j2 >"$d.log" 2>&1 &&
            ! grep -qE 'undefined!|warning' "$d.log"; then
            echo "kbuild-matrix: $m on $(basename "$kdir"): ok ($(ls "$d"/*.ko | xargs -n1 basename))"
        else
            echo "kbuild-matrix: $m on $(basename "$kdir"): FAILED" >&2
            sed 's/^/    /' "$d.log" >&2
            rc=1
        fi
    done
done
exit $rc

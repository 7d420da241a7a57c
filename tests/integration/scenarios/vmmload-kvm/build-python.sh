#!/usr/bin/env bash
# Builds the python3 tree of the vmmload-kvm scenario: an uncompressed tar of
# Debian's /usr/bin/python3.11, its standard library (without tests, IDLE,
# Tk, lib2to3, ensurepip, distutils, pydoc data and the static libpython) with the
# byte code Debian compiled at install time, the extension modules a
# headless program may load, and every shared library those need, at their
# host paths. The testbed packs it into L1 through the scenario's l2-disk
# entry (a file built here, cached by key, shipped as
# /tb/l2/disks/vlpython.img); l1.sh unpacks it into L1's root so the
# python3 cases of the real-program suite run there as on this host.
#
#   build-python.sh OUT   build the tar
#   build-python.sh --key print what it depends on besides this folder
set -euo pipefail

PY=/usr/bin/python3.11
LIB=/usr/lib/python3.11

if [[ ${1:-} == --key ]]; then
    for p in python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libssl3 libffi8 libsqlite3-0; do
        printf '%s %s\n' "$p" "$(dpkg-query -W -f '${Version}' "$p" 2>/dev/null || echo none)"
    done
    exit 0
fi
out=${1:?usage: build-python.sh OUT | --key}
[[ -x $PY && -d $LIB ]] || {
    echo "build-python: $PY or $LIB missing (apt-get install python3.11)" >&2
    exit 1
}

list=$(mktemp "${TMPDIR:-/tmp}/vlpython.XXXXXX")
trap 'rm -f "$list" "$out.tmp"' EXIT

# elf_with_libs FILE: FILE and the libraries ldd resolves for it, at the
# paths ldd names (tar -h stores them as files, as the testbed packs
# L1's libraries).
elf_with_libs() {
    printf '%s\n' "$1"
    ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }'
}

{
    elf_with_libs "$PY"
    find "$LIB" \( -path "$LIB/test" -o -path "$LIB/idlelib" -o -path "$LIB/tkinter" \
        -o -path "$LIB/turtledemo" -o -path "$LIB/lib2to3" -o -path "$LIB/ensurepip" \
        -o -path "$LIB/pydoc_data" -o -path "$LIB/distutils" -o -path "$LIB/config-3.11-*" -o -path "$LIB/site-packages" \
        -o -path "$LIB/dist-packages" -o -path "$LIB/lib-dynload" \) -prune -o \
        \( -name '*.py' -o -name '*.cpython-311.pyc' \) -type f -print
    for so in "$LIB"/lib-dynload/*.so; do
        case ${so##*/} in
        _test* | xx* | _ctypes_test* | _curses* | readline* | _dbm* | nis* | ossaudiodev* | audioop* | _tkinter*) ;;
        *) elf_with_libs "$so" ;;
        esac
    done
} | sed 's|^/||' | sort -u >"$list"

tar -C / --no-recursion --dereference -cf "$out.tmp" -T "$list"
mv -f "$out.tmp" "$out"
echo "build-python: $out ($(du -k "$out" | cut -f1) KiB, $(wc -l <"$list") files)" >&2

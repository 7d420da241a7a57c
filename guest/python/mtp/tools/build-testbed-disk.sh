#!/usr/bin/env bash
# Builds the virtio-blk image of the mtp-python testbed scenario: an ext4
# file system holding a minimal root for chroot -- Debian's python3.11 with
# its standard library and the shared libraries it and its extension
# modules load, the mtp extension built from this tree, and the PyPI
# workloads (NetworkX, SQLAlchemy, pinned below) -- plus the scenario's
# workload script as /mtp/workload.py.
#
#   build-testbed-disk.sh OUT.img   build the image
#   build-testbed-disk.sh --key     print what the image depends on besides
#                                   this tree (for the testbed's image cache)
#
# Needs python3.11, python3-venv, python3-dev, gcc, e2fsprogs (mke2fs -d)
# and network access to PyPI (pip's cache is used when it has the wheels).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
MTP_SRC=$(cd "$HERE/.." && pwd)
PY=/usr/bin/python3.11
PINS=(networkx==3.4.2 SQLAlchemy==2.0.36 greenlet==3.1.1 typing_extensions==4.12.2)

if [[ ${1:-} == --key ]]; then
    printf 'python3.11 %s\n' "$(dpkg-query -W -f '${Version}' python3.11 2>/dev/null || "$PY" -VV)"
    printf 'libc6 %s\n' "$(dpkg-query -W -f '${Version}' libc6 2>/dev/null || true)"
    printf 'pins %s\n' "${PINS[*]}"
    exit 0
fi
out=${1:?usage: build-testbed-disk.sh OUT.img | --key}
[[ -x $PY ]] || { echo "build-testbed-disk: $PY not found (apt-get install python3.11)" >&2; exit 1; }
command -v mke2fs >/dev/null || { echo "build-testbed-disk: mke2fs not found (e2fsprogs)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mtp-disk.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{usr/bin,proc,sys,dev,tmp,mtp} "$root/usr/lib/python3/dist-packages"

# copy_elf FILE: FILE and every library ldd resolves for it, same paths.
copy_elf() {
    local f lib
    for f in "$1" $(ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }'); do
        lib=$(readlink -f "$f")
        install -D -m 0755 "$lib" "$root$f"
    done
}
copy_elf "$PY"
ln -sf python3.11 "$root/usr/bin/python3"
# The standard library without what a headless workload never imports
# (tests, IDLE, Tk, the static libpython in config-*).
tar -C /usr/lib -cf - --exclude='python3.11/test' --exclude='python3.11/idlelib' \
    --exclude='python3.11/tkinter' --exclude='python3.11/turtledemo' \
    --exclude='python3.11/lib2to3' --exclude='python3.11/ensurepip' \
    --exclude='python3.11/config-3.11-*' --exclude='python3.11/pydoc_data' python3.11 | tar -C "$root/usr/lib" -xf -
for so in "$root"/usr/lib/python3.11/lib-dynload/*.so; do
    copy_elf "/usr/lib/python3.11/lib-dynload/${so##*/}"
done

# mtp from a clean copy of its tracked files (pip builds in the source
# directory; keep this tree free of build products), then the workloads.
src=$work/mtp-src
mkdir -p "$src"
git -C "$MTP_SRC" ls-files -co --exclude-standard -- . | tar -C "$MTP_SRC" -cf - -T - | tar -C "$src" -xf -
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check \
    --target "$root/usr/lib/python3/dist-packages" "${PINS[@]}" "$src"
install -m 0644 "$HERE/testbed_workload.py" "$root/mtp/workload.py"
# The packages' own test suites are a third of their size.
find "$root/usr/lib/python3/dist-packages" -type d -name tests -prune -exec rm -rf {} +
"$PY" -m compileall -q "$root/usr/lib/python3/dist-packages" >/dev/null

kb=$(du -sk "$root" | cut -f1)
size_mb=$((kb * 12 / 10 / 1024 + 16))
rm -f "$out.tmp"
mke2fs -q -F -t ext4 -O ^has_journal -L mtp-python -d "$root" "$out.tmp" "${size_mb}M"
mv -f "$out.tmp" "$out"
echo "build-testbed-disk: $out (${size_mb} MiB, $((kb / 1024)) MiB of files)" >&2

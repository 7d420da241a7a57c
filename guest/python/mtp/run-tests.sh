#!/usr/bin/env bash
# Builds and installs mtp into a venv of Debian's python3 (the interpreter a
# guest user has), the way a user would (pip install), and runs its pytest
# suite against the installed copy; then checks real page migration on a
# two-node QEMU TCG machine (tools/tcg-two-node.sh; MTP_TCG=0 skips it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
python=${MTP_PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=$(command -v python3)
venv=${MTP_VENV:-$repo/target/mtp-venv}

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "$here[test]"
# run from the tests folder so that the installed package, not src/, is used
(cd "$here/tests" && "$venv/bin/python" -m pytest -q -p no:cacheprovider .)

# Real move_pages(2) between two NUMA nodes: a two-node QEMU TCG machine
# (this host has one node). One core, low priority: about a minute.
if [[ ${MTP_TCG:-1} == 0 ]]; then
    echo "two-node migration check: skipped (MTP_TCG=0)"
elif ! command -v qemu-system-x86_64 >/dev/null || ! compgen -G '/boot/vmlinuz-6.12*-amd64' >/dev/null; then
    echo "two-node migration check: skipped (needs qemu-system-x86 and linux-image-6.12-amd64)"
else
    MTP_VENV=$venv MTP_TCG_SMP=1 nice -n 10 "$here/tools/tcg-two-node.sh"
fi

#!/usr/bin/env bash
# Checks MTP's migration path for real on a two-node machine: boots the
# Debian kernel under QEMU TCG (no nesting) with node 0 = CPUs + 1 GiB and
# node 1 = memory-only 1 GiB, with Debian's python3 and the installed mtp in
# the initramfs, and runs two_node_check.py there. Takes both cores for a
# few minutes: run it as
#   flock /tmp/testbed.lock guest/python/mtp/tools/tcg-two-node.sh
# or, while others use the testbed, on one core at the lowest priority:
#   MTP_TCG_SMP=1 nice -n 19 guest/python/mtp/tools/tcg-two-node.sh
# Needs guest/python/mtp/run-tests.sh to have built target/mtp-venv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
venv=${MTP_VENV:-$repo/target/mtp-venv}
smp=${MTP_TCG_SMP:-2}
[[ $smp =~ ^[1-8]$ ]] || { echo "MTP_TCG_SMP must be 1..8" >&2; exit 2; }
cpus=0
((smp > 1)) && cpus=0-$((smp - 1))
site=$("$venv/bin/python" -c 'import mtp, os; print(os.path.dirname(os.path.dirname(mtp.__file__)))')
kernel=$(ls /boot/vmlinuz-6.12*-amd64 | sort -V | tail -n1)
work=$(mktemp -d /tmp/mtp-tcg.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root

mkdir -p "$root"/{bin,proc,sys,dev,tmp,mtp,usr/bin,usr/lib}
cp /usr/bin/busybox "$root/bin/"
for t in sh mount cat poweroff; do ln -s busybox "$root/bin/$t"; done
cp /usr/bin/python3.11 "$root/usr/bin/python3"
# the interpreter's libraries and those of ctypes (libffi), which the check uses
for lib in $(ldd /usr/bin/python3.11 /usr/lib/python3.11/lib-dynload/_ctypes.*.so |
    awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | sort -u); do
    install -D "$lib" "$root$lib"
done
# the standard library without tests and GUI bits
tar -C /usr/lib -cf - --exclude=test --exclude=tkinter --exclude=idlelib \
    --exclude=__pycache__ python3.11 | tar -C "$root/usr/lib" -xf -
cp -r "$site/mtp" "$root/mtp/"
cp "$here/two_node_check.py" "$root/"
# numa_balancing=disable on the kernel command line: the kernel's own NUMA
# balancing would pull node-1 pages back when the check walks its objects,
# and this measures MTP alone.
cat >"$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
PYTHONPATH=/mtp PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 /two_node_check.py
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) >"$work/initrd.cpio"

# stdin from /dev/null: CI runs without one, and `-serial stdio` fails on a
# closed fd 0.
timeout 900 qemu-system-x86_64 -accel tcg,thread=multi -M pc -cpu max -smp "$smp" -m 2G \
    -object memory-backend-ram,id=m0,size=1G -object memory-backend-ram,id=m1,size=1G \
    -numa node,nodeid=0,cpus=$cpus,memdev=m0 -numa node,nodeid=1,memdev=m1 \
    -nodefaults -display none -serial stdio -monitor none -no-reboot \
    -kernel "$kernel" -initrd "$work/initrd.cpio" \
    -append "console=ttyS0 panic=-1 quiet numa_balancing=disable" </dev/null | tee "$work/console.log" | grep -a '^{\|MTP-CHECK\|Traceback\|Error'
grep -aq '^MTP-CHECK PASS' "$work/console.log"

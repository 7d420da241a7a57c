#!/bin/sh
# /init of the L2 test guest (busybox sh). Runs the L2 half of the scenario
# named on the kernel command line (tb.run=<name>), then powers off.
# Optional: tb.standalone=1 (no L1 side listening: --l2-in-qemu),
# tb.ack_timeout=<s>, tb.timeout=<s>, tb.loglevel=<n> (console loglevel
# while the scenario runs, default 1 so kernel messages do not interleave
# with result lines).
# Console protocol:
#   @@TB-L2 INIT uptime_ms=<n> stext=<address of _stext> kernel=<uname -r>
#   @@TB-L2 BEGIN <name>
#   ... scenario output, its JSON line, "@@TB-L2 READY <name>" (handshake)
#   @@TB-L2 END <name> rc=<n>

export PATH=/tb/bin:/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

uptime_ms() {
    read -r up _ </proc/uptime
    s=${up%.*}
    f=${up#*.}
    echo "$((s * 1000 + ${f#0} * 10))"
}

# stext: where the kernel's text starts (KASLR), to name the functions in
# the guest RIPs the L1 side samples when this guest hangs (tb_vmm_diag)
echo "@@TB-L2 INIT uptime_ms=$(uptime_ms) stext=0x$(grep -m 1 ' _stext$' /proc/kallsyms | cut -d ' ' -f 1) kernel=$(uname -r)"

poweroff_now() {
    sync
    poweroff -f
    echo o >/proc/sysrq-trigger
    while :; do sleep 60; done
}

mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
hostname tb-l2
ln -sf /proc/self/fd /dev/fd 2>/dev/null

kver=$(uname -r)
if [ -f "/lib/modules/$kver/tb-load" ]; then
    while read -r mod params; do
        [ -n "$mod" ] || continue
        # shellcheck disable=SC2086
        insmod "/lib/modules/$kver/$mod" $params || echo "@@TB-L2 WARN insmod $mod failed"
    done <"/lib/modules/$kver/tb-load"
fi

name=""
standalone=0
ack_timeout=30
timeout=600
loglevel=1
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.run=*) name=${arg#tb.run=} ;;
    tb.standalone=*) standalone=${arg#tb.standalone=} ;;
    tb.ack_timeout=*) ack_timeout=${arg#tb.ack_timeout=} ;;
    tb.timeout=*) timeout=${arg#tb.timeout=} ;;
    tb.loglevel=*) loglevel=${arg#tb.loglevel=} ;;
    esac
done
dmesg -n "$loglevel" 2>/dev/null

if [ -z "$name" ]; then
    echo "@@TB-L2 ERROR no tb.run=<scenario> on the kernel command line"
    poweroff_now
fi

echo "@@TB-L2 BEGIN $name"
script=/tb/scenarios/$name/l2.sh
if [ ! -f "$script" ]; then
    echo "no such scenario: $script"
    rc=127
else
    export TB_SCENARIO="$name" TB_SIDE=l2 TB_MODE=l2 TB_LIB=/tb/lib TB_BIN=/tb/bin
    export TB_STANDALONE="$standalone" TB_ACK_TIMEOUT="$ack_timeout"
    export TB_SCENARIO_DIR="/tb/scenarios/$name"
    # The scenario keeps the console as stdin (it reads the L1 ack there).
    sh "$script" </dev/console &
    pid=$!
    (sleep "$timeout"; echo "@@TB-L2 TIMEOUT $name after ${timeout}s"; kill -KILL "$pid") &
    killer=$!
    wait "$pid"
    rc=$?
    kill "$killer" 2>/dev/null
fi
echo "@@TB-L2 END $name rc=$rc"
poweroff_now

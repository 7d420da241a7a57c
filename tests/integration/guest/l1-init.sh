#!/bin/sh
# /init of the L1 testbed host (busybox sh). Runs the scenarios named on the
# kernel command line (tb.scenarios=name:timeout,name:timeout,...), one after
# the other, then powers off. Protocol on the console (ttyS0), parsed by
# scripts/testbed.sh:
#   @@TB L1-READY ...                 modules loaded, about to run scenarios
#   @@TB HEARTBEAT <uptime_ms>        every 15 s while L1 runs
#   @@TB BEGIN <name> timeout=<s>
#   @@TB END <name> rc=<n> ms=<n>     rc 124 = timed out (killed)
#   @@TB L1-DONE
# After each scenario, /tb/out/<name> is sent as a tar stream on ttyS1.

export PATH=/tb/bin:/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
hostname tb-l1
ln -sf /proc/self/fd /dev/fd 2>/dev/null

uptime_ms() {
    read -r up _ </proc/uptime
    s=${up%.*}
    f=${up#*.}
    echo "$((s * 1000 + ${f#0} * 10))"
}

poweroff_now() {
    sync
    poweroff -f
    echo o >/proc/sysrq-trigger
    while :; do sleep 60; done
}

kver=$(uname -r)
mods_ok=1
if [ -f "/lib/modules/$kver/tb-load" ]; then
    while read -r mod params; do
        [ -n "$mod" ] || continue
        # shellcheck disable=SC2086 # module parameters are separate words
        if ! insmod "/lib/modules/$kver/$mod" $params; then
            echo "@@TB WARN insmod $mod failed"
            mods_ok=0
        fi
    done <"/lib/modules/$kver/tb-load"
fi

scenarios=""
mode=nested
vmm=/tb/bin/cloud-hypervisor
selftest=""
kvm_hold=1
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.vmm=*) vmm=${arg#tb.vmm=} ;;
    tb.selftest=*) selftest=${arg#tb.selftest=} ;;
    tb.kvm_hold=*) kvm_hold=${arg#tb.kvm_hold=} ;;
    tb.scenarios=*) scenarios=$(echo "${arg#tb.scenarios=}" | tr ',' ' ') ;;
    tb.mode=*) mode=${arg#tb.mode=} ;;
    esac
done


# Keep KVM's per-VM/per-vCPU static keys (preempt notifiers, APIC state)
# raised for the whole L1 lifetime, so starting L2 guests does not live-patch
# kernel code: under multi-threaded TCG that patching races with the other
# vCPU ("Oops: int3" in __schedule or kvm_arch_vcpu_ioctl_run, then an L1
# panic). See tests/integration/guest/tb-kvm-hold.c. tb.kvm_hold=0 disables.
hold_state=off
if [ "$kvm_hold" = 1 ] && [ -c /dev/kvm ] && [ -x /tb/bin/tb-kvm-hold ]; then
    tb-kvm-hold </dev/null >/tmp/tb-kvm-hold.out 2>&1 &
    i=0
    while [ $i -lt 100 ] && ! grep -q kvm-hold /tmp/tb-kvm-hold.out; do
        sleep 0.1
        i=$((i + 1))
    done
    hold_state=$(tr -d ' \n' </tmp/tb-kvm-hold.out)
    [ -n "$hold_state" ] || hold_state=timeout
fi

echo "@@TB L1-READY kernel=$kver uptime_ms=$(uptime_ms) modules_ok=$mods_ok cpus=$(nproc) kvm_hold=$hold_state"
# Heartbeat: lets the harness tell a frozen L1 (seen once under nested TCG)
# from a scenario that is merely quiet, long before the scenario timeout.
(while :; do sleep 15; echo "@@TB HEARTBEAT $(uptime_ms)"; done) &

if [ -c /dev/ttyS1 ]; then
    stty -F /dev/ttyS1 raw -echo 2>/dev/null
fi

mkdir -p /tb/out
for item in $scenarios; do
    name=${item%%:*}
    timeout=${item#*:}
    [ "$timeout" != "$item" ] || timeout=300
    out=/tb/out/$name
    mkdir -p "$out"
    echo "@@TB BEGIN $name timeout=$timeout"
    t0=$(uptime_ms)
    # Harness self-test hook (--l1-append tb.selftest=panic:<name>): crash
    # L1 where <name> would run, to exercise L1-failure handling.
    if [ "$selftest" = "panic:$name" ]; then
        echo "selftest: crashing L1 on purpose"
        echo 1 >/proc/sys/kernel/sysrq
        echo c >/proc/sysrq-trigger
    fi
    script=/tb/scenarios/$name/l1.sh
    if [ ! -f "$script" ]; then
        echo "no such scenario: $script"
        rc=127
    else
        rm -f /tmp/tb-timeout
        (
            export TB_MODE="$mode" TB_SCENARIO="$name" TB_SCENARIO_DIR="/tb/scenarios/$name"
            export TB_LIB=/tb/lib TB_OUT="$out" TB_BIN=/tb/bin TB_TIMEOUT="$timeout"
            export TB_VMM="$vmm" TB_CH_REMOTE=/tb/bin/ch-remote
            export TB_VMMLOAD=/tb/bin/vmmload
            # Upstream Cloud Hypervisor v53 (packed only when the anchors exist)
            export TB_CH_UPSTREAM=/usr/local/bin/ch-upstream TB_CH_REMOTE_UPSTREAM=/usr/local/bin/ch-remote-upstream
            export TB_L2_KERNEL=/tb/l2/vmlinuz TB_L2_INITRD=/tb/l2/initrd.img
            # a scenario with an l2-kernel file boots its own kernel
            if [ -f "/tb/l2/kernels/$name/vmlinuz" ]; then
                export TB_L2_KERNEL="/tb/l2/kernels/$name/vmlinuz" TB_L2_INITRD="/tb/l2/kernels/$name/initrd.img"
            fi
            cd "$out" || exit 1
            exec setsid sh "$script"
        ) </dev/null &
        pid=$!
        # Bounded: kill the scenario's whole process group on timeout.
        # It first prints what each of the group's processes was doing, so
        # a hang names the command that hung.
        setsid sh -c "sleep $timeout; echo timeout >/tmp/tb-timeout; sh /tb/lib/group-report.sh $pid; kill -TERM -$pid; sleep 5; kill -KILL -$pid" &
        killer=$!
        wait "$pid"
        rc=$?
        kill -KILL "-$killer" 2>/dev/null
        kill -KILL "-$pid" 2>/dev/null
        if [ -f /tmp/tb-timeout ]; then
            echo "scenario $name timed out after ${timeout}s"
            rc=124
        fi
    fi
    echo "$rc" >"$out/rc"
    echo ""
    echo "@@TB END $name rc=$rc ms=$(($(uptime_ms) - t0))"
    if [ -c /dev/ttyS1 ]; then
        tar -C /tb/out -cf - "$name" >/dev/ttyS1 2>/dev/null
    fi
    # An L2 triple fault under nested TCG has been followed by corruption of
    # this (emulated) host's kernel (docs/testbed.md): run nothing more in
    # it; the harness runs the remaining scenarios in a fresh L1.
    if grep -qs 'guest triple fault' "$out"/*.stderr "$out"/*/*.stderr; then
        echo "@@TB L1-TAINTED by $name: the L2 guest triple-faulted; the remaining scenarios run in a fresh L1 boot"
        break
    fi
done

echo "@@TB L1-DONE uptime_ms=$(uptime_ms)"
poweroff_now

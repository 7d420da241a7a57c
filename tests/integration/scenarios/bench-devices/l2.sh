# shellcheck shell=sh
# bench-devices (guest side): tb.devb=boot only says it booted;
# tb.devb=io runs devbench on the first virtio disk (sequential and random
# 4 KiB reads and writes, tb.secs seconds each, one thread per vCPU), then
# bulk TCP both ways over the TAP, tb.tcpreps times each (default 5; one unreported warm-up out first), a
# fresh set of streams (one per vCPU, tb.netmb MiB in all) every time:
#  - tx (guest to host): devbench sends to L1's listeners on ports
#    5200 + 10 r + i (repetition r = 1.., stream i = 0..);
#  - rx (host to guest): devbench listens on ports 5300 + 10 r + i, prints
#    "@@DEVB LISTENING tcp-rx-<r> ..." and L1 then connects and sends.
# It prints one "@@DEVB RESULT ..." line with the raw counts
# (tx<r>_bytes, tx<r>_ms, rx<r>_bytes, rx<r>_ms per repetition) and powers
# off by itself (upstream's VMM takes no console input here).
#
# Progress: "@@DEVB STEP <name> uptime_ms=N oops=N" before each step
# (seqread, seqwrite, randread, randwrite, net, tcp-tx-1.., tcp-rx-1..),
# so that L1 bounds every step on its own; oops= counts the kernel's
# oopses and warnings since the script began.
# Each step is bounded here too: devbench gives up on a disk run still
# going 30 s after its tb.secs, on a TCP stream without progress for 30 s
# (connect, accept, send, receive) and on a TCP run longer than
# tb.tcplimit s (default 120), and prints what it was doing to the console
# (its stderr); ping waits 30 s at most. A failed repetition is reported
# and the next one runs.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^tb\.$1=//p" | tail -n 1; }
mode=$(arg devb)
secs=$(arg secs)
mb=$(arg netmb)
tcplimit=$(arg tcplimit)
case $tcplimit in '' | *[!0-9]*) tcplimit=120 ;; esac
reps=$(arg tcpreps)
case $reps in '' | *[!0-9]*) reps=5 ;; esac
streams=$(grep -c '^processor' /proc/cpuinfo)

if [ "$mode" != io ]; then
    echo "@@DEVB BOOTED"
    tb_pass booted
    tb_report
    exit 0
fi

# Console messages stay at loglevel 1 (they would cut into the result
# lines), so each marker carries the kernel's oopses and warnings since
# this script began (boot-time warnings such as the SRSO notice excluded).
oops_count() { dmesg | grep -ciE 'Oops|BUG:|WARNING:|general protection'; }
oops_at_start=$(oops_count)
oopses() { echo "$(($(oops_count) - oops_at_start))"; }
step() { echo "@@DEVB STEP $1 uptime_ms=$(tb_now_ms) oops=$(oopses)"; }
# num KEY TEXT: the number after "KEY=" in devbench's output line
num() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=\([0-9][0-9]*\)$/\1/p" | head -n 1; }

# shellcheck disable=SC2012 # sysfs names
disk=$(basename "$(ls -d /sys/block/vd* 2>/dev/null | head -n 1)")
# shellcheck disable=SC2012
hwq=$(ls "/sys/block/$disk/mq" 2>/dev/null | wc -l)
nic=$(grep -l '12:34:56:78:9a:d0' /sys/class/net/*/address 2>/dev/null | head -n 1)
nic=$(basename "$(dirname "$nic")")
# shellcheck disable=SC2012
rxq=$(ls -d "/sys/class/net/$nic/queues/rx-"* 2>/dev/null | wc -l)
result="@@DEVB RESULT hwq=$hwq rxq=$rxq streams=$streams"
for m in seqread seqwrite randread randwrite; do
    step "$m"
    # stdout (the counts) is captured; devbench's complaints (stderr) go
    # straight to the console.
    out=$(/tb/bin/devbench disk "/dev/$disk" "$m" "$secs" "$streams")
    rc=$?
    ops=$(num ops "$out")
    ms=$(num ms "$out")
    if [ "$rc" = 0 ] && [ -n "$ops" ] && [ -n "$ms" ]; then
        tb_pass "disk-$m" "$ops ops in $ms ms"
    else
        tb_fail "disk-$m" "devbench rc $rc, output '$out'"
    fi
    result="$result ${m}_ops=$ops ${m}_ms=$ms"
done

step net
ip link set "$nic" up && ip addr add 192.168.30.2/24 dev "$nic"
tb_check ping-host-tap ping -c 1 -w 30 -q 192.168.30.1
bytes=$((mb * 1048576 / streams))
# tcp_run DIR R: one repetition, DIR tx or rx; adds its counts to $result.
tcp_run() {
    step "tcp-$1-$2"
    if [ "$1" = tx ]; then
        out=$(/tb/bin/devbench tcp 192.168.30.1 $((5200 + 10 * $2)) "$bytes" "$streams" "$tcplimit")
        rc=$?
    else
        out=$(/tb/bin/devbench tcprecv $((5300 + 10 * $2)) "$bytes" "$streams" "$tcplimit" \
            "@@DEVB LISTENING tcp-rx-$2 ports=$((5300 + 10 * $2))+$streams")
        rc=$?
    fi
    tbytes=$(num bytes "$out")
    tms=$(num ms "$out")
    if [ "$rc" = 0 ] && [ -n "$tbytes" ] && [ -n "$tms" ]; then
        tb_pass "tcp-$1-$2" "$tbytes bytes in $tms ms"
    else
        tb_fail "tcp-$1-$2" "devbench rc $rc, output '$out'"
        ip -s link show dev "$nic"
        grep -E "^ *$nic:" /proc/net/dev
    fi
    result="$result $1$2_bytes=$tbytes $1$2_ms=$tms"
}
# A warm-up transfer first (repetition 0, not among the reported ones):
# the first transfer after boot was the slowest in every configuration.
tcp_run tx 0
for d in tx rx; do
    r=1
    while [ "$r" -le "$reps" ]; do
        tcp_run "$d" "$r"
        r=$((r + 1))
    done
done
result="$result reps=$reps oops=$(oopses)"
echo "$result"
tb_report

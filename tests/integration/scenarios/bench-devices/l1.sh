# shellcheck shell=sh
# bench-devices: virtio device figures for scripts/bench.sh devices; not
# part of --all (not-in-all).
#
# In this one L1 boot:
#  1. boot time of our VMM with --virtio-transport mmio and pci, and of
#     upstream Cloud Hypervisor v53 (PCI only), interleaved, TB_BOOTS each
#     (tb.boots=N, default 3): VMM start -> the guest's "@@DEVB BOOTED",
#     same VM (2 vCPUs, 1 GiB, a disk, a NIC);
#  2. I/O with 1 and with 2 queues (queue pairs) per device, ours on
#     virtio-pci and upstream's, interleaved (ours 1q, upstream 1q,
#     upstream 1q without its NIC offloads, ours 2q, upstream 2q): the
#     guest's devbench does sequential and random 4 KiB O_DIRECT reads and
#     writes on the disk (tb.secs seconds each, one thread per vCPU) and
#     sends tb.netmb MiB over TCP to the host end of the TAP (one stream
#     per vCPU, busybox nc listening here). Every run gets a fresh zeroed
#     disk image.
# Guest time, on a TCG-emulated L1: compare the VMMs with each other only.
#
# Same command line for both VMMs, every key explicit: image_type=raw (v53
# refuses guest writes to sector 0 of an image whose type it autodetected:
# devbench's sequential writes start there), the queue sizes both default
# to (disk 128, NIC 256). Upstream offers TSO/UFO/checksum offload on its
# NIC by default and ours offers none: the extra upstream run with
# offload_*=off separates that from the rest of the data path.
#
# Bounded: the guest prints "@@DEVB STEP <name>" before each step and
# every step has its own limit here (boot BOOT_LIMIT, a disk step
# SECS + 60 s, ping 60 s, TCP TCPLIMIT + 30 s, power-off 60 s). A step
# that overstays (or a VMM that exits early, or a guest that reboots or
# oopses) fails that run with the last step reached and the serial tail, saves
# diagnostics (diag-NAME.txt: the VMM's threads and KVM counters, L1's
# links, addresses, routes and TCP sockets, the listeners, the VMM's
# stderr and the serial tail), stops the VMM and goes on with the next run.
# (busybox ip: no -s/-br; the TAP's counters come from /proc/net/dev.)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
trap 'tb_vmm_stop; stop_listeners' EXIT

kopt() { tr ' ' '\n' </proc/cmdline | sed -n "s/^tb\.$1=//p" | tail -n 1; }
BOOTS=${TB_BOOTS:-$(kopt boots)}
case $BOOTS in '' | *[!0-9]*) BOOTS=3 ;; esac
[ "$BOOTS" -ge 1 ] || BOOTS=1
SECS=5
NETMB=64
BOOT_LIMIT=200
TCPLIMIT=120
tb_fact boots "$BOOTS"
tb_fact disk_seconds_per_test "$SECS"
tb_fact tcp_mib "$NETMB"

OURS_VMM=$TB_VMM
UPSTREAM=""
if [ -n "${TB_CH_UPSTREAM:-}" ] && [ -x "$TB_CH_UPSTREAM" ]; then
    UPSTREAM=$TB_CH_UPSTREAM
    tb_fact_str upstream_vmm "$("$TB_CH_UPSTREAM" --version 2>&1 | head -n 1)"
else
    tb_fact_str upstream_absent "anchors absent: no upstream cloud-hypervisor in L1 (../shared/anchors/cloud-hypervisor-v53/ missing on the host); only our VMM measured"
fi

DISK=$TB_OUT/disk.img
new_disk() { rm -f "$DISK" && dd if=/dev/zero of="$DISK" bs=1M count=64 2>/dev/null; }
new_disk

# The receivers' stdin: a FIFO this shell holds open for writing, so nc
# never sees EOF there (busybox nc would then shut its sending side and the
# guest's wait for the close would end before the data arrived).
NC=nc
command -v nc >/dev/null 2>&1 || NC="busybox nc"
mkfifo "$TB_OUT/nc.in"
exec 8<>"$TB_OUT/nc.in"
LISTENERS=""
stop_listeners() {
    for p in $LISTENERS; do kill "$p" 2>/dev/null; done
    LISTENERS=""
}

# start LABEL QUEUES MODE: LABEL is mmio, pci (ours), upstream or
# upstream-nooffload; QUEUES the disk's queues and the NIC's pairs.
start() {
    netx=""
    case $1 in
    upstream) TB_VMM=$UPSTREAM transport="" ;;
    upstream-nooffload) TB_VMM=$UPSTREAM transport="" netx=",offload_tso=off,offload_ufo=off,offload_csum=off" ;;
    *) TB_VMM=$OURS_VMM transport="--virtio-transport $1" ;;
    esac
    # shellcheck disable=SC2086 # transport is two words or none
    tb_vmm_start $transport --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=bench-devices tb.devb=$3 tb.secs=$SECS tb.netmb=$NETMB tb.tcplimit=$TCPLIMIT tb.timeout=400" \
        --cpus boot=2 --memory size=1G \
        --disk "path=$DISK,num_queues=$2,queue_size=128,image_type=raw" \
        --net "ip=192.168.30.1,mask=255.255.255.0,mac=12:34:56:78:9a:d0,num_queues=$(($2 * 2)),queue_size=256$netx" \
        --serial tty --console off
}

serial_tail() { tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | grep -v '^$' | tail -n "${1:-3}" | tr '\n' '|'; }
guest_inits() { tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | grep -c '@@TB-L2 INIT'; }

# diag NAME: what the VMM, L1's network and the guest were doing, saved to
# $TB_OUT/diag-NAME.txt (the TAP and TCP lines also to the log).
diag() {
    tb_vmm_diag "$TB_OUT/vmm-diag-$1.txt"
    {
        echo "# $1 at L1 uptime $(tb_now_ms) ms, VMM started at $TB_VMM_START_MS ms"
        echo "## ip link"
        ip link 2>&1
        echo "## /proc/net/dev"
        cat /proc/net/dev
        echo "## ip addr"
        ip addr 2>&1
        echo "## ip route"
        ip route 2>&1
        echo "## netstat -tan"
        netstat -tan 2>&1
        echo "## listeners"
        for p in $LISTENERS; do
            if tb_pid_alive "$p"; then echo "$p running"; else echo "$p gone"; fi
        done
        echo "## VMM stderr (tail)"
        tail -n 60 "$TB_VMM_STDERR" 2>/dev/null
        echo "## serial (tail)"
        tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | tail -n 80
    } >"$TB_OUT/diag-$1.txt" 2>&1
    tb_log "$1: diagnostics in diag-$1.txt and vmm-diag-$1.txt"
    grep -i 'tap' /proc/net/dev | sed "s/^ */[$1 net] /"
    netstat -tan 2>/dev/null | grep ':520[0-9]' | sed "s/^/[$1] /"
    tail -n 5 "$TB_VMM_STDERR" 2>/dev/null | sed "s/^/[$1 vmm] /"
}

# await NAME MARKER SECS: wait for MARKER on the guest's console; on a
# timeout or an early VMM exit, fail NAME-progress with the last step the
# guest reached, save diagnostics and return 1.
await() {
    _r=0
    tb_vmm_wait_line "$2" "$3" || _r=$?
    [ "$_r" != 0 ] || return 0
    _last=$(tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | grep '@@DEVB STEP' | tail -n 1 | sed 's/.*@@DEVB STEP //')
    if [ "$_r" = 2 ]; then _why="the VMM exited before '$2'"; else _why="no '$2' within $3 s"; fi
    diag "$1"
    tb_fail "$1-progress" "$_why (last step: ${_last:-none}, guest boots: $(guest_inits)); serial: $(serial_tail 4)"
    return 1
}

median() { printf '%s\n' $1 | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "null" }'; }

# --- 1. boot time -------------------------------------------------------
LABELS="mmio pci"
[ -z "$UPSTREAM" ] || LABELS="$LABELS upstream"
for l in $LABELS; do eval "boot_$l="; done
i=1
while [ "$i" -le "$BOOTS" ]; do
    for l in $LABELS; do
        start "$l" 1 boot
        if await "boot-$l-$i" '@@DEVB BOOTED' "$BOOT_LIMIT"; then
            ms=$(($(tb_now_ms) - TB_VMM_START_MS))
            eval "boot_$l=\"\$boot_$l $ms\""
            tb_log "$l boot $i: $ms ms"
            tb_vmm_wait_exit 60
            [ "$TB_VMM_RC" = 0 ] || tb_fail "boot-$l-$i-exit" "VMM exit status $TB_VMM_RC"
        else
            tb_vmm_stop
        fi
        cp "$TB_VMM_SERIAL" "$TB_OUT/serial-boot-$l-$i.log" 2>/dev/null
        cp "$TB_VMM_STDERR" "$TB_OUT/vmm-boot-$l-$i.stderr" 2>/dev/null
    done
    i=$((i + 1))
done
for l in $LABELS; do
    eval "all=\$boot_$l"
    tb_fact "${l}_boot_ms_median" "$(median "$all")"
    tb_fact_str "${l}_boot_ms_all" "${all# }"
done

# --- 2. I/O, 1 and 2 queues ----------------------------------------------
# field LINE KEY: the number after " KEY=" in LINE
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=\([0-9]*\)$/\1/p"; }
# rate NUM MS SCALE: NUM * SCALE / MS seconds, one decimal
rate() { awk -v n="$1" -v ms="$2" -v s="$3" 'BEGIN { if (n == "" || ms == "" || ms == 0) print "null"; else printf "%.1f\n", n * s / ms }'; }

# io LABEL QUEUES NAME: one I/O run, every step bounded (see the top).
io() {
    stop_listeners
    p=5201
    while [ "$p" -lt 5203 ]; do
        # shellcheck disable=SC2086 # NC is "nc" or "busybox nc"
        $NC -l -p "$p" <"$TB_OUT/nc.in" >/dev/null 2>&1 &
        LISTENERS="$LISTENERS $!"
        p=$((p + 1))
    done
    new_disk
    start "$1" "$2" io
    ok=1
    prev=boot
    limit=$BOOT_LIMIT
    for s in seqread seqwrite randread randwrite net tcp; do
        if ! await "$3-$prev" "@@DEVB STEP $s " "$limit"; then
            ok=0
            break
        fi
        prev=$s
        case $s in net) limit=60 ;; tcp) limit=$((TCPLIMIT + 30)) ;; *) limit=$((SECS + 60)) ;; esac
    done
    if [ "$ok" = 1 ] && await "$3-$prev" '@@DEVB RESULT' "$limit"; then
        line=$(tr -d '\r' <"$TB_VMM_SERIAL" | grep '@@DEVB RESULT' | tail -n 1)
        tb_log "$3: $line"
        tb_check_eq "$3-disk-hw-queues" "$2" "$(field "$line" hwq)"
        tb_check_eq "$3-nic-rx-queues" "$2" "$(field "$line" rxq)"
        tb_check_eq "$3-guest-oopses" 0 "$(field "$line" oops)"
        for m in seqread seqwrite randread randwrite; do
            ops=$(field "$line" "${m}_ops")
            ms=$(field "$line" "${m}_ms")
            tb_fact "${3}_${m}_iops" "$(rate "$ops" "$ms" 1000)"
            tb_fact "${3}_${m}_mib_s" "$(rate "$ops" "$ms" 1000 | awk '{ if ($1 == "null") print "null"; else printf "%.2f\n", $1 * 4096 / 1048576 }')"
        done
        tcp_bytes=$(field "$line" tcp_bytes)
        tcp_ms=$(field "$line" tcp_ms)
        tb_fact "${3}_tcp_mbit_s" "$(rate "$tcp_bytes" "$tcp_ms" 0.008)"
        tb_fact "${3}_tcp_ms" "${tcp_ms:-null}"
        if tb_vmm_wait_line '@@TB-L2 END' 60; then
            tb_vmm_wait_exit 60
            tb_check_eq "$3-vmm-exit" 0 "$TB_VMM_RC"
        else
            diag "$3-poweroff"
            tb_fail "$3-poweroff" "no '@@TB-L2 END' within 60 s of the result; serial: $(serial_tail 4)"
            tb_vmm_stop
        fi
        tb_check_eq "$3-guest-checks" PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
        tb_check_eq "$3-guest-boots" 1 "$(guest_inits)"
    else
        tb_vmm_stop
    fi
    cp "$TB_VMM_SERIAL" "$TB_OUT/serial-$3.log" 2>/dev/null
    cp "$TB_VMM_STDERR" "$TB_OUT/vmm-$3.stderr" 2>/dev/null
    stop_listeners
}

for q in 1 2; do
    io pci "$q" "ours_q$q"
    [ -n "$UPSTREAM" ] || continue
    io upstream "$q" "upstream_q$q"
    [ "$q" != 1 ] || io upstream-nooffload 1 upstream_nooffload_q1
done
tb_finish

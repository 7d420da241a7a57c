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
#     writes on the disk (tb.secs seconds each, one thread per vCPU), then
#     bulk TCP over the TAP, TCPREPS times each way (tb.tcpreps, default
#     5) after one unreported warm-up transfer out (repetition 0), every time a fresh set of streams (one per vCPU) carrying NETMB
#     MiB in all (tb.tcpmib, default 256): tx, the guest sends to
#     listeners here (busybox nc -l -e dd of=/dev/null, ports 5200 + 10 r
#     + i for repetition r and stream i); then rx, the guest listens
#     (ports 5300 + 10 r + i) and senders here (busybox nc -e dd
#     if=/dev/zero) connect once it says "@@DEVB LISTENING tcp-rx-<r>".
#     Each direction reports every repetition and their median. Every run
#     gets a fresh zeroed disk image.
# Guest time, on a TCG-emulated L1: compare the VMMs with each other only.
# L1's TCP ends move 64 KiB per system call (dd; busybox nc's own loop
# moves 1 KiB, three system calls a KiB, dear under TCG), and this script
# polls the console once a second during an I/O run (ten times a second
# only for the boot times, where the poll is the measurement), to leave
# L1's CPUs to the guests.
#
# Same command line for both VMMs, every key explicit: image_type=raw (v53
# refuses guest writes to sector 0 of an image whose type it autodetected:
# devbench's sequential writes start there), the queue sizes both default
# to (disk 128, NIC 256). Both NICs offer checksum and TSO offloads by
# default (ours: CSUM, GUEST_CSUM, HOST/GUEST_TSO4/6, devices/src/virtio/
# net/offload.rs; upstream also UFO); the extra upstream run with
# offload_*=off shows what the offloads are worth on this path.
#
# Bounded: the guest prints "@@DEVB STEP <name>" before each step and
# every step has its own limit here (boot BOOT_LIMIT, a disk step
# SECS + 60 s, ping 60 s, a TCP repetition TCPLIMIT + 30 s, the rx
# listeners 30 s, power-off 60 s). A step
# that overstays (or a VMM that exits early, or a guest that reboots or
# oopses) fails that run with the last step reached and the serial tail, saves
# diagnostics (diag-NAME.txt: the VMM's threads and KVM counters, L1's
# links, addresses, routes and TCP sockets, the L1 TCP ends, the VMM's
# stderr and the serial tail), stops the VMM and goes on with the next run.
# (busybox ip: no -s/-br; the TAP's counters come from /proc/net/dev.)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
trap 'tb_vmm_stop; stop_tcp' EXIT

kopt() { tr ' ' '\n' </proc/cmdline | sed -n "s/^tb\.$1=//p" | tail -n 1; }
BOOTS=${TB_BOOTS:-$(kopt boots)}
case $BOOTS in '' | *[!0-9]*) BOOTS=3 ;; esac
[ "$BOOTS" -ge 1 ] || BOOTS=1
SECS=5
# NETMB MiB per TCP repetition, split over VCPUS streams: a whole number of
# MiB over 2 streams is a whole number of dd's 64 KiB blocks each.
NETMB=$(kopt tcpmib)
case $NETMB in '' | *[!0-9]* | 0) NETMB=256 ;; esac
TCPREPS=$(kopt tcpreps)
case $TCPREPS in [1-9]) ;; *) TCPREPS=5 ;; esac
VCPUS=2
STREAM_BYTES=$((NETMB * MIB / VCPUS))
BOOT_LIMIT=200
TCPLIMIT=120
tb_fact boots "$BOOTS"
tb_fact disk_seconds_per_test "$SECS"
tb_fact tcp_mib "$NETMB"
tb_fact tcp_reps "$TCPREPS"

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

# L1's TCP ends: busybox nc with -e runs dd on the connection (nc's own
# loop moves 1 KiB per read and write). A sink's dd reads until the
# guest's end shuts down, then exits and so closes the connection, which
# the guest's sender waits for; a sender's dd writes exactly its share.
NC=nc
command -v nc >/dev/null 2>&1 || NC="busybox nc"
TCP_PIDS=""
stop_tcp() {
    for p in $TCP_PIDS; do kill "$p" 2>/dev/null; done
    TCP_PIDS=""
}
# tcp_sinks LOG: the listeners of every tx repetition, before the VM starts
tcp_sinks() {
    r=0
    while [ "$r" -le "$TCPREPS" ]; do
        i=0
        while [ "$i" -lt "$VCPUS" ]; do
            # shellcheck disable=SC2086 # NC is "nc" or "busybox nc"
            $NC -l -p $((5200 + 10 * r + i)) -e dd of=/dev/null bs=65536 2>>"$1" &
            TCP_PIDS="$TCP_PIDS $!"
            i=$((i + 1))
        done
        r=$((r + 1))
    done
}
# tcp_senders LOG R: rx repetition R's senders (the guest listens)
tcp_senders() {
    i=0
    while [ "$i" -lt "$VCPUS" ]; do
        # shellcheck disable=SC2086 # NC is "nc" or "busybox nc"
        $NC -w 30 192.168.30.2 $((5300 + 10 * $2 + i)) \
            -e dd if=/dev/zero bs=65536 count=$((STREAM_BYTES / 65536)) 2>>"$1" &
        TCP_PIDS="$TCP_PIDS $!"
        i=$((i + 1))
    done
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
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=bench-devices tb.devb=$3 tb.secs=$SECS tb.netmb=$NETMB tb.tcpreps=$TCPREPS tb.tcplimit=$TCPLIMIT tb.timeout=600" \
        --cpus boot=$VCPUS --memory size=1G \
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
        echo "## L1 TCP ends (nc -e dd)"
        for p in $TCP_PIDS; do
            if tb_pid_alive "$p"; then echo "$p running: $(tr '\0' ' ' <"/proc/$p/cmdline")"; else echo "$p gone"; fi
        done
        echo "## VMM stderr (tail)"
        tail -n 60 "$TB_VMM_STDERR" 2>/dev/null
        echo "## serial (tail)"
        tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | tail -n 80
    } >"$TB_OUT/diag-$1.txt" 2>&1
    tb_log "$1: diagnostics in diag-$1.txt and vmm-diag-$1.txt"
    grep -i 'tap' /proc/net/dev | sed "s/^ */[$1 net] /"
    netstat -tan 2>/dev/null | grep -E ':5[23][0-9][0-9] ' | sed "s/^/[$1] /"
    tail -n 5 "$TB_VMM_STDERR" 2>/dev/null | sed "s/^/[$1 vmm] /"
}

# wait_line MARKER SECS POLL: tb_vmm_wait_line, looking every POLL s
wait_line() {
    _end=$(($(tb_now_ms) + $2 * 1000))
    while :; do
        _r=0
        tb_vmm_wait_line "$1" 0 || _r=$?
        [ "$_r" = 1 ] || return "$_r"
        [ "$(tb_now_ms)" -lt "$_end" ] || return 1
        sleep "$3"
    done
}

# await NAME MARKER SECS [POLL]: wait for MARKER on the guest's console,
# looking every POLL s (default 0.1); on a timeout or an early VMM exit,
# fail NAME-progress with the last step the guest reached, save
# diagnostics and return 1.
await() {
    _r=0
    wait_line "$2" "$3" "${4:-0.1}" || _r=$?
    [ "$_r" != 0 ] || return 0
    _last=$(tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | grep '@@DEVB STEP' | tail -n 1 | sed 's/.*@@DEVB STEP //')
    if [ "$_r" = 2 ]; then _why="the VMM exited before '$2'"; else _why="no '$2' within $3 s"; fi
    diag "$1"
    tb_fail "$1-progress" "$_why (last step: ${_last:-none}, guest boots: $(guest_inits)); serial: $(serial_tail 4)"
    return 1
}

# median "N N ...": of the numbers among the words ("null" left out)
# shellcheck disable=SC2086 # one word a line
median() { printf '%s\n' $1 | grep -E '^[0-9.]+$' | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "null" }'; }

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
    all=""
    eval "all=\$boot_$l"
    tb_fact "${l}_boot_ms_median" "$(median "$all")"
    tb_fact_str "${l}_boot_ms_all" "${all# }"
done

# --- 2. I/O, 1 and 2 queues ----------------------------------------------
# field LINE KEY: the number after " KEY=" in LINE
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=\([0-9]*\)$/\1/p"; }
# rate NUM MS SCALE: NUM * SCALE / MS seconds, one decimal
rate() { awk -v n="$1" -v ms="$2" -v s="$3" 'BEGIN { if (n == "" || ms == "" || ms == 0) print "null"; else printf "%.1f\n", n * s / ms }'; }

# tcp_facts NAME LINE DIR KEY: repetition figures of direction DIR (tx,
# rx) from the result LINE as facts NAME_KEY_mbit_s (median),
# NAME_KEY_mbit_s_all and NAME_KEY_ms_all (JSON lists, null for a failed
# repetition).
tcp_facts() {
    _all=""
    _ms_all=""
    _r=1
    while [ "$_r" -le "$TCPREPS" ]; do
        _ms=$(field "$2" "$3${_r}_ms")
        _all="$_all $(rate "$(field "$2" "$3${_r}_bytes")" "$_ms" 0.008)"
        _ms_all="$_ms_all ${_ms:-null}"
        _r=$((_r + 1))
    done
    tb_fact "${1}_${4}_mbit_s" "$(median "$_all")"
    tb_fact "${1}_${4}_mbit_s_all" "[$(printf '%s' "${_all# }" | tr ' ' ',')]"
    tb_fact "${1}_${4}_ms_all" "[$(printf '%s' "${_ms_all# }" | tr ' ' ',')]"
    tb_log "$1: $4 Mbit/s$_all (median $(median "$_all"))"
}

# io LABEL QUEUES NAME: one I/O run, every step bounded (see the top).
io() {
    stop_tcp
    tcp_sinks "$TB_OUT/nc-$3.log"
    new_disk
    start "$1" "$2" io
    # tcp-tx-0: a warm-up transfer, not reported (the first transfer after
    # boot was the slowest in every configuration)
    steps="seqread seqwrite randread randwrite net tcp-tx-0"
    for d in tx rx; do
        r=1
        while [ "$r" -le "$TCPREPS" ]; do
            steps="$steps tcp-$d-$r"
            r=$((r + 1))
        done
    done
    ok=1
    prev=boot
    limit=$BOOT_LIMIT
    for s in $steps; do
        if ! await "$3-$prev" "@@DEVB STEP $s " "$limit" 1; then
            ok=0
            break
        fi
        case $s in
        tcp-rx-*)
            # the guest listens, then L1 sends
            if ! await "$3-$s-listen" "@@DEVB LISTENING $s " 30; then
                ok=0
                break
            fi
            tcp_senders "$TB_OUT/nc-$3.log" "${s#tcp-rx-}"
            ;;
        esac
        prev=$s
        case $s in net) limit=60 ;; tcp-*) limit=$((TCPLIMIT + 30)) ;; *) limit=$((SECS + 60)) ;; esac
    done
    if [ "$ok" = 1 ] && await "$3-$prev" '@@DEVB RESULT' "$limit" 1; then
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
        tcp_facts "$3" "$line" tx tcp
        tcp_facts "$3" "$line" rx tcp_rx
        if tb_vmm_wait_line '@@TB-L2 END' 60; then
            tb_vmm_wait_exit 60
            tb_check_eq "$3-vmm-exit" 0 "$TB_VMM_RC"
        else
            diag "$3-poweroff"
            tb_fail "$3-poweroff" "no '@@TB-L2 END' within 60 s of the result; serial: $(serial_tail 4)"
            tb_vmm_stop
        fi
        tb_check_eq "$3-guest-checks" PASS "$(tb_l2_json "$TB_VMM_SERIAL" | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
        tb_check_eq "$3-guest-boots" 1 "$(guest_inits)"
    else
        tb_vmm_stop
    fi
    cp "$TB_VMM_SERIAL" "$TB_OUT/serial-$3.log" 2>/dev/null
    cp "$TB_VMM_STDERR" "$TB_OUT/vmm-$3.stderr" 2>/dev/null
    stop_tcp
}

for q in 1 2; do
    io pci "$q" "ours_q$q"
    [ -n "$UPSTREAM" ] || continue
    io upstream "$q" "upstream_q$q"
    [ "$q" != 1 ] || io upstream-nooffload 1 upstream_nooffload_q1
done
tb_finish

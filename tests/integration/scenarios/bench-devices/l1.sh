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
#     virtio-pci and upstream's, interleaved (ours 1q, upstream 1q, ours
#     2q, upstream 2q): the guest's devbench does sequential and random
#     4 KiB O_DIRECT reads and writes on the disk (tb.secs seconds each,
#     one thread per vCPU) and sends tb.netmb MiB over TCP to the host end
#     of the TAP (one stream per vCPU, busybox nc listening here).
# Guest time, on a TCG-emulated L1: compare the VMMs with each other only.
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
dd if=/dev/zero of="$DISK" bs=1M count=64 2>/dev/null

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

# start LABEL QUEUES MODE: LABEL is mmio, pci (ours) or upstream; QUEUES
# the disk's queues and the NIC's pairs.
start() {
    case $1 in
    upstream) TB_VMM=$UPSTREAM transport="" ;;
    *) TB_VMM=$OURS_VMM transport="--virtio-transport $1" ;;
    esac
    # shellcheck disable=SC2086 # transport is two words or none
    tb_vmm_start $transport --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=bench-devices tb.devb=$3 tb.secs=$SECS tb.netmb=$NETMB tb.timeout=400" \
        --cpus boot=2 --memory size=1G \
        --disk "path=$DISK,num_queues=$2" \
        --net "ip=192.168.30.1,mask=255.255.255.0,mac=12:34:56:78:9a:d0,num_queues=$(($2 * 2))" \
        --serial tty --console off
}

median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "null" }'; }

# --- 1. boot time -------------------------------------------------------
LABELS="mmio pci"
[ -z "$UPSTREAM" ] || LABELS="$LABELS upstream"
for l in $LABELS; do eval "boot_$l="; done
i=1
while [ "$i" -le "$BOOTS" ]; do
    for l in $LABELS; do
        start "$l" 1 boot
        if tb_vmm_wait_line '@@DEVB BOOTED' 200; then
            ms=$(($(tb_now_ms) - TB_VMM_START_MS))
            eval "boot_$l=\"\$boot_$l $ms\""
            tb_log "$l boot $i: $ms ms"
        else
            tb_vmm_diag "$TB_OUT/vmm-diag-boot-$l-$i.txt"
            tb_fail "boot-$l-$i" "no @@DEVB BOOTED: $(tail -n 3 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
        fi
        tb_vmm_wait_exit 90
        cp "$TB_VMM_SERIAL" "$TB_OUT/serial-boot-$l-$i.log" 2>/dev/null
        cp "$TB_VMM_STDERR" "$TB_OUT/vmm-boot-$l-$i.stderr" 2>/dev/null
        [ "$TB_VMM_RC" = 0 ] || tb_fail "boot-$l-$i-exit" "VMM exit status $TB_VMM_RC"
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

IO_LABELS="pci"
[ -z "$UPSTREAM" ] || IO_LABELS="pci upstream"
for q in 1 2; do
    for l in $IO_LABELS; do
        name=$( [ "$l" = pci ] && echo ours || echo upstream )_q$q
        stop_listeners
        p=5201
        while [ "$p" -lt 5203 ]; do
            # shellcheck disable=SC2086 # NC is "nc" or "busybox nc"
            $NC -l -p "$p" <"$TB_OUT/nc.in" >/dev/null 2>&1 &
            LISTENERS="$LISTENERS $!"
            p=$((p + 1))
        done
        start "$l" "$q" io
        if tb_vmm_wait_line '@@DEVB RESULT' 400; then
            line=$(tr -d '\r' <"$TB_VMM_SERIAL" | grep '@@DEVB RESULT' | tail -n 1)
            tb_log "$name: $line"
            tb_check_eq "$name-disk-hw-queues" "$q" "$(field "$line" hwq)"
            tb_check_eq "$name-nic-rx-queues" "$q" "$(field "$line" rxq)"
            for m in seqread seqwrite randread randwrite; do
                ops=$(field "$line" "${m}_ops")
                ms=$(field "$line" "${m}_ms")
                tb_fact "${name}_${m}_iops" "$(rate "$ops" "$ms" 1000)"
                tb_fact "${name}_${m}_mib_s" "$(rate "$ops" "$ms" 1000 | awk '{ if ($1 == "null") print "null"; else printf "%.2f\n", $1 * 4096 / 1048576 }')"
            done
            tb_fact "${name}_tcp_mbit_s" "$(rate "$(field "$line" tcp_bytes)" "$(field "$line" tcp_ms)" 0.008)"
        else
            tb_vmm_diag "$TB_OUT/vmm-diag-$name.txt"
            tb_fail "$name-result" "no @@DEVB RESULT: $(tail -n 3 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
        fi
        tb_vmm_wait_exit 120
        cp "$TB_VMM_SERIAL" "$TB_OUT/serial-$name.log" 2>/dev/null
        cp "$TB_VMM_STDERR" "$TB_OUT/vmm-$name.stderr" 2>/dev/null
        tb_check_eq "$name-vmm-exit" 0 "$TB_VMM_RC"
        tb_check_eq "$name-guest-checks" PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
    done
done
stop_listeners
tb_finish

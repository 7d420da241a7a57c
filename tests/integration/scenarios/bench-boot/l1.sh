# shellcheck shell=sh
# bench-boot: boot time and memory overhead of the VMM (scripts/bench.sh
# boot; not part of --all). Boots the numa-boot VM (2 vCPUs, FMem 512 MiB
# on host node 0, SMem 1 GiB on host node 1) TB_BOOTS times (default 3) and
# records for each: VMM start -> the L2 /init marker, VMM start -> the
# guest's handshake, and at the handshake the VMM's RSS split into guest
# RAM (the resident part of the zone mappings) and the VMM's own memory.
# Run it once with our VMM and once with --vmm qemu for the baseline.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
BOOTS=3
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

# guest_rss_kb PID: resident kB of the two zone mappings (found by size)
guest_rss_kb() {
    _kb=0
    _zone=0
    while read -r _a _b _rest; do
        case $_a in
        *-*)
            _s=${_a%-*}
            _e=${_a#*-}
            _size=$((0x$_e - 0x$_s))
            _zone=0
            if [ "$_size" -eq $((512 * MIB)) ] || [ "$_size" -eq $((1024 * MIB)) ]; then _zone=1; fi
            ;;
        Rss:) [ "$_zone" = 1 ] && _kb=$((_kb + _b)) ;;
        esac
    done <"/proc/$1/smaps"
    echo "$_kb"
}

init_list=""
ready_list=""
own_list=""
i=1
while [ $i -le $BOOTS ]; do
    tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=bench-boot" \
        --cpus boot=2 --memory size=0 \
        --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
        --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
        'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
        --serial tty --console off
    if tb_vmm_wait_line '@@TB-L2 INIT' 120; then
        init=$(($(tb_now_ms) - TB_VMM_START_MS))
        if tb_vmm_wait_line '@@TB-L2 READY bench-boot' 60; then
            ready=$(($(tb_now_ms) - TB_VMM_START_MS))
            rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$TB_VMM_PID/status")
            guest=$(guest_rss_kb "$TB_VMM_PID")
            own=$((rss - guest))
            tb_pass "boot-$i" "init ${init} ms, ready ${ready} ms, RSS ${rss} kB of which guest RAM ${guest} kB"
            init_list="$init_list $init"
            ready_list="$ready_list $ready"
            own_list="$own_list $own"
            tb_vmm_send tb-ack
        else
            tb_fail "boot-$i" "no handshake"
        fi
    else
        tb_fail "boot-$i" "no /init marker in 120 s"
    fi
    tb_vmm_wait_exit 60
    cp "$TB_VMM_SERIAL" "$TB_OUT/serial-$i.log" 2>/dev/null
    i=$((i + 1))
done
median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "null" }'; }
tb_fact boots "$BOOTS"
tb_fact init_ms_median "$(median "$init_list")"
tb_fact ready_ms_median "$(median "$ready_list")"
tb_fact vmm_own_rss_kb_median "$(median "$own_list")"
tb_fact_str init_ms_all "${init_list# }"
tb_finish

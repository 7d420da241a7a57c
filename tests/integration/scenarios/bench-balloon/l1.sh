# shellcheck shell=sh
# bench-balloon: balloon speed, our double balloon against the stock single
# balloon in the same L1 boot (scripts/bench.sh balloon; not part of --all).
#
# For each tier of our balloon (demeter_balloon.ko, HETERO_MEM), then for
# Linux's virtio_balloon on the same device without HETERO_MEM: the time
# from the vm.resize call to the guest reporting the target, for a 512 MiB
# inflate and deflate (giving GiB/s) and for a 4 MiB step (the latency an
# operator sees). Times include ch-remote's polling (about every 0.1 s).
# The guest side is the balloon scenario's l2.sh (tb.run=balloon).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
BIG=${TB_BENCH_BALLOON_MIB:-512}
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

SOCK=$TB_API_SOCK

# timed NAME FMEM_MIB SMEM_MIB: resize, wait for the target, record ms
timed() {
    _t0=$(tb_now_ms)
    tb_chr resize --balloon "[$2M,$3M]" >/dev/null 2>&1 || { tb_fail "$1" "resize refused"; return 1; }
    if tb_wait_until 300 tb_balloon_actual_is $(($2 * MIB)) $(($3 * MIB)); then
        _ms=$(($(tb_now_ms) - _t0))
        tb_fact "${1}_ms" "$_ms"
        tb_pass "$1" "$_ms ms"
        LAST_MS=$_ms
        return 0
    fi
    tb_fail "$1" "target not reached in 300 s"
    LAST_MS=0
    return 1
}
# rate NAME MIB MS: GiB/s with three decimals
rate() {
    [ "$3" -gt 0 ] || return 0
    tb_fact "$1_gib_s" "$(awk -v m="$2" -v ms="$3" 'BEGIN { printf "%.3f", m / 1024 / (ms / 1000) }')"
}

boot() { # DRIVER BALLOON-OPTION
    rm -f "$SOCK"
    tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=balloon tb.balloon=$1 tb.timeout=900" \
        --cpus boot=2 --memory size=0 \
        --memory-zone id=fmem,size=1G,host_numa_node=0 id=smem,size=1G,host_numa_node=1,shared=on \
        --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem' \
        'guest_numa_id=1,distances=[0@25],memory_zones=smem' \
        --balloon "$2" --api-socket "path=$SOCK" --serial tty --console off
    tb_vmm_wait_line '@@BAL READY' 180 && return 0
    tb_fail "$1-ready" "guest not ready"
    return 1
}
finish_vm() {
    tb_vmm_send quit
    tb_vmm_wait_exit 60
    tb_check_eq "$1-vmm-exit-0" 0 "$TB_VMM_RC"
}

if boot demeter 'size=[0,0],heterogeneous_memory=on'; then
    timed fmem_step 4 0 && tb_fact fmem_step_latency_ms "$LAST_MS"
    timed fmem_step_back 0 0
    timed fmem_inflate "$BIG" 0 && rate fmem_inflate "$BIG" "$LAST_MS"
    timed fmem_deflate 0 0 && rate fmem_deflate "$BIG" "$LAST_MS"
    timed smem_step 0 4 && tb_fact smem_step_latency_ms "$LAST_MS"
    timed smem_step_back 0 0
    timed smem_inflate 0 "$BIG" && rate smem_inflate "$BIG" "$LAST_MS"
    timed smem_deflate 0 0 && rate smem_deflate "$BIG" "$LAST_MS"
    finish_vm demeter
else
    tb_vmm_stop
fi

if boot stock 'size=0'; then
    timed stock_step 4 0 && tb_fact stock_step_latency_ms "$LAST_MS"
    timed stock_step_back 0 0
    timed stock_inflate "$BIG" 0 && rate stock_inflate "$BIG" "$LAST_MS"
    timed stock_deflate 0 0 && rate stock_deflate "$BIG" "$LAST_MS"
    finish_vm stock
else
    tb_vmm_stop
fi
tb_fact size_mib "$BIG"
tb_finish

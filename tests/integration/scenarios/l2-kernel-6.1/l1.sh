# shellcheck shell=sh
# l2-kernel-6.1: an L2 on Debian 12's default kernel (6.1 LTS) with both guest modules working
# L1 side. The harness boots this scenario's L2 with its own kernel (file
# l2-kernel: the release of the installed linux-headers-amd64, fetched and
# unpacked at L0, never installed) and an initrd with that kernel's modules
# and our modules built against its headers; TB_L2_KERNEL / TB_L2_INITRD
# point at them and a "release" file lies beside the kernel.
# The VM has the tier layout of tiering-gups (fmem 512 MiB on host node 0,
# smem 1 GiB on host node 1, HMAT) and the double balloon with statistics.
# Here: the guest's balloon statistics reach the API; the FMem balloon,
# then the SMem balloon, inflates by 128 MiB and deflates through the API,
# the guest's node free memory following (the balloon scenario's checks);
# the agent's tiering statistics reach the API. The guest (l2.sh) checks
# the kernel, clean loads and unloads of both modules, and tiering on a
# small GUPS target.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"

release=$(cat "$(dirname "$TB_L2_KERNEL")/release" 2>/dev/null)
tb_fact_str l2_kernel "$TB_L2_KERNEL"
tb_fact_str l2_kernel_release "${release:-none}"
if [ -z "$release" ]; then
    tb_fail l2-kernel-packed "no release file beside $TB_L2_KERNEL: the harness did not pack this scenario's kernel"
    tb_finish
fi
tb_pass l2-kernel-packed "$release"

POLL_PID=""
stop_poller() {
    [ -n "$POLL_PID" ] || return 0
    kill "$POLL_PID" 2>/dev/null
    wait "$POLL_PID" 2>/dev/null
    POLL_PID=""
}
trap 'stop_poller; tb_vmm_stop' EXIT
rm -f "$TB_API_SOCK"

# tiering.ko's accessed-bit flush by L1's paging mode (see tiering-gups)
case $(cat /sys/module/kvm_amd/parameters/npt 2>/dev/null) in
Y | 1) L1_PAGING=npt ABIT_FLUSH=2 ;;
*) L1_PAGING=shadow ABIT_FLUSH=1 ;;
esac
tb_fact_str l1_paging "$L1_PAGING"

tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
    --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=l2-kernel-6.1 tb.want_release=$release tb.tier_abit_flush=$ABIT_FLUSH" \
    --cpus boot=2 --memory size=0 \
    --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
    --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
    'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
    --balloon 'size=[0,0],statistics=on,deflate_on_oom=on,heterogeneous_memory=on' \
    --api-socket "path=$TB_API_SOCK" \
    --serial tty --console off

# The host's view of the guest's statistics, every 2 s while the VM runs:
# "<ms> <balloon-stats JSON on one line>" per line.
BSTATS=$TB_OUT/balloon-stats.log
: >"$BSTATS"
(
    while tb_vmm_alive; do
        _s=$(tb_chr balloon-stats 2>/dev/null | tr -d ' \n')
        [ -n "$_s" ] && echo "$(tb_now_ms) $_s" >>"$BSTATS"
        sleep 2
    done
) &
POLL_PID=$!

vmm_gone() {
    tb_fail "vmm-alive-at-$1" "the VMM exited: $(tail -n 1 "$TB_VMM_STDERR" 2>/dev/null)"
    tb_show_tail "$TB_VMM_SERIAL" 40 'L2| '
    tb_finish
}
stats_updated() {
    _n=$(tb_chr balloon-stats 2>/dev/null | tr -d ' \n' | sed -n 's/.*"stats_updates":\([0-9]*\).*/\1/p')
    [ "${_n:-0}" -gt 0 ]
}
abs() { if [ "$1" -lt 0 ]; then echo $((-$1)); else echo "$1"; fi; }
# near NAME EXPECTED_KB GOT_KB TOLERANCE_KB
near() {
    _d=$(abs $(($3 - $2)))
    if [ "$_d" -le "$4" ]; then
        tb_pass "$1" "expected ${2} kB, got ${3} kB"
    else
        tb_fail "$1" "expected ${2} kB +- ${4}, got ${3} kB"
    fi
}
# gm TAG: the guest's nodes' free memory (kB) and balloon sizes (pages)
gm() {
    tb_vmm_alive || vmm_gone "measure-$1"
    if ! _l=$(tb_vmm_ask "m $1" "@@BAL M $1 "); then
        tb_fail "measure-$1" "no answer from the guest"
        N0=0 N1=0 BF=0 BS=0
        return 1
    fi
    N0=$(echo "$_l" | sed -n 's/.* n0=\([0-9]*\).*/\1/p')
    N1=$(echo "$_l" | sed -n 's/.* n1=\([0-9]*\).*/\1/p')
    BF=$(echo "$_l" | sed -n 's/.* bf=\([0-9]*\).*/\1/p')
    BS=$(echo "$_l" | sed -n 's/.* bs=\([0-9]*\).*/\1/p')
    tb_log "guest $1: node0 free ${N0} kB, node1 free ${N1} kB, balloon fmem ${BF} smem ${BS} pages"
}
_at_or_dead() { tb_balloon_actual_is "$1" "$2" || ! tb_vmm_alive; }
# resize_to NAME FMEM_MIB SMEM_MIB SECS: resize through the API and wait
# until the guest reports both balloons at the target
resize_to() {
    tb_vmm_alive || vmm_gone "$1"
    _t0=$(tb_now_ms)
    if ! tb_chr resize --balloon "[$2M,$3M]" >"$TB_OUT/resize-$1.out" 2>&1; then
        tb_fail "$1-resize" "$(head -c 200 "$TB_OUT/resize-$1.out")"
        return 1
    fi
    if tb_wait_until "$4" _at_or_dead $(($2 * MIB)) $(($3 * MIB)) &&
        tb_balloon_actual_is $(($2 * MIB)) $(($3 * MIB)); then
        tb_pass "$1-reached" "[$2M,$3M] after $(($(tb_now_ms) - _t0)) ms"
        return 0
    fi
    tb_fail "$1-reached" "actual [$(tb_balloon_field fmem actual),$(tb_balloon_field smem actual)] after $4 s"
    return 1
}

# ---- boot and the balloon ----
st=0
tb_vmm_wait_line '@@BAL READY' 150 || st=$?
case $st in
0) tb_pass l2-balloon-ready "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start" ;;
1)
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail l2-balloon-ready "not within 150 s; serial tail: $(tail -n 8 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    ;;
2) tb_fail l2-balloon-ready "the VMM exited; serial tail: $(tail -n 8 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')" ;;
esac
if [ "$st" -eq 0 ]; then
    tb_check balloon-stats-updates tb_wait_until 30 stats_updated
    tb_check stats-fmem-guest-total test -n "$(tb_balloon_field fmem guest_total)"
    tb_check stats-smem-guest-total test -n "$(tb_balloon_field smem guest_total)"
    for t in fmem smem; do
        if [ $t = fmem ]; then f=128 s=0; else f=0 s=128; fi
        gm "${t}0"
        a0=$N0 b0=$N1
        resize_to "$t-inflate-128MiB" $f $s 120
        gm "${t}1"
        tb_check_eq "$t-host-inflated-128MiB" $((128 * MIB)) "$(tb_balloon_field $t host_inflated)"
        if [ $t = fmem ]; then
            near fmem-node0-falls-128MiB $((-128 * 1024)) $((N0 - a0)) $((26 * 1024))
            near fmem-node1-unchanged 0 $((N1 - b0)) $((32 * 1024))
            tb_check_eq fmem-guest-balloon-pages 32768 "$BF"
        else
            near smem-node1-falls-128MiB $((-128 * 1024)) $((N1 - b0)) $((26 * 1024))
            near smem-node0-unchanged 0 $((N0 - a0)) $((32 * 1024))
            tb_check_eq smem-guest-balloon-pages 32768 "$BS"
        fi
        resize_to "$t-deflate" 0 0 120
        gm "${t}2"
        near "$t-deflate-restores-node0" "$a0" "$N0" $((26 * 1024))
        near "$t-deflate-restores-node1" "$b0" "$N1" $((26 * 1024))
    done
    tb_check_eq host-nothing-held "0 0" "$(tb_balloon_field fmem host_inflated) $(tb_balloon_field smem host_inflated)"
    tb_vmm_send tiering
fi

# ---- tiering (the guest's part) and the end ----
if [ "$st" -eq 0 ]; then
    left=$((${TB_TIMEOUT:-240} - ($(tb_now_ms) - TB_VMM_START_MS) / 1000 - 30))
    [ "$left" -ge 30 ] || left=30
    st=0
    tb_vmm_wait_line '@@TB-L2 READY l2-kernel-6.1' "$left" || st=$?
    case $st in
    0) tb_pass l2-reached-handshake ;;
    1)
        tb_vmm_diag "$TB_OUT/vmm-diag.txt"
        tb_fail l2-reached-handshake "not within $left s; serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
        ;;
    2) tb_fail l2-reached-handshake "the VMM exited; stderr tail: $(tail -n 5 "$TB_VMM_STDERR" | tr '\n' '|')" ;;
    esac
    [ "$st" -eq 0 ] && tb_vmm_send tb-ack
fi
stop_poller
tb_vmm_wait_exit 30
tb_fact vmm_exit_code "$TB_VMM_RC"
tb_check_eq vmm-exit-code-0 0 "$TB_VMM_RC"

l2=$(tb_l2_json "$TB_VMM_SERIAL")
tb_fact l2 "${l2:-null}"
case $l2 in
*'"result":"PASS"'*) tb_pass l2-checks-passed ;;
'') tb_fail l2-checks-passed "no L2 JSON line in serial.log" ;;
*) tb_fail l2-checks-passed "L2 reported failure (see its JSON)" ;;
esac
tb_check_eq l2-scenario-rc-0 0 "$(tb_l2_marker_rc "$TB_VMM_SERIAL")"

# The agent's totals reached the host on the 6.1 guest's stats queue.
best=$(sed -n 's/.*"tiering_promoted_pages":\([0-9]*\).*/\1/p' "$BSTATS" | sort -n | tail -n 1)
tb_fact balloon_stats_polls "$(wc -l <"$BSTATS")"
tb_check_ge host-tiering-promoted-pages "${best:-0}" 1

echo "--- guest serial console (tail; full log: serial.log) ---"
tb_show_tail "$TB_VMM_SERIAL" 60 'L2| '
echo "--- VMM stderr (tail) ---"
tb_show_tail "$TB_VMM_STDERR" 20 'VMM| '
echo "---"
tb_finish

# shellcheck shell=sh
# balloon: the double balloon end to end (our VMM's device, our guest driver)
# and the stock single balloon as the baseline, in two L2 boots.
#
# VM 1, demeter_balloon.ko, FMem and SMem zones of 1280 MiB each (SMem on a
# memfd, so inflation punches holes), balloon with HETERO_MEM:
#   (c) Demeter's deployment pattern: both zones sized to the full VM and
#       the balloons carving FMem:SMem = 1:4 at boot ([1024M,256M]), then
#       1:1 ([640M,640M]) and back to 1:4 at run time;
#   (a) inflate SMem by 256 MiB: guest node 1 free memory falls by ~256 MiB,
#       node 0 stays, the VMM's RSS falls by ~256 MiB; deflate restores;
#   (b) the same for FMem;
#   (e) 200 resizes while tb-churn allocates in the guest: no crash, the
#       final sizes are exact on both sides, no page lost or leaked.
# VM 2, Linux's stock virtio_balloon (no HETERO_MEM):
#   (d) a 256 MiB single balloon: record which nodes its pages came from.
#
# The guest side (l2.sh) answers "m TAG" with its nodes' free memory.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

SOCK=$TB_API_SOCK
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$TB_VMM_PID/status"; }
stats_updated() {
    _n=$(tb_chr balloon-stats 2>/dev/null | tr -d ' \n' | sed -n 's/.*"stats_updates":\([0-9]*\).*/\1/p')
    [ "${_n:-0}" -gt 0 ]
}
counters_have_balloon() { tb_chr counters 2>/dev/null | grep -q __balloon; }
abs() { if [ "$1" -lt 0 ]; then echo $((-$1)); else echo "$1"; fi; }

# A VMM that died mid-scenario (e.g. the L2 triple-faulted) ends the
# scenario at once: the remaining steps would only time out, and after an
# L2 crash the emulated L1 is suspect (docs/testbed.md), so VM 2 is not
# started in it either.
stop_if_vmm_died() {
    tb_vmm_alive && return 0
    tb_fail "vmm-alive-at-$1" "the VMM exited: $(tail -n 1 "$TB_VMM_STDERR" 2>/dev/null)"
    end_vm "${VM_NAME:-demeter}"
    tb_finish
}

# gm TAG: ask the guest for its nodes' free memory; sets N0, N1 (kB), BF, BS (pages)
gm() {
    stop_if_vmm_died "measure-$1"
    if ! _l=$(tb_vmm_ask "m $1" "@@BAL M $1 " 30); then
        tb_fail "measure-$1" "no answer from the guest"
        # a crash is reported by tb_vmm_wait_line, which stops the VMM
        tb_vmm_alive && tb_l2_hang "no answer to 'm $1' within 30 s"
        tb_finish
    fi
    N0=$(echo "$_l" | sed -n 's/.* n0=\([0-9]*\).*/\1/p')
    N1=$(echo "$_l" | sed -n 's/.* n1=\([0-9]*\).*/\1/p')
    BF=$(echo "$_l" | sed -n 's/.* bf=\([0-9]*\).*/\1/p')
    BS=$(echo "$_l" | sed -n 's/.* bs=\([0-9]*\).*/\1/p')
    tb_log "guest $1: node0 free ${N0} kB, node1 free ${N1} kB, balloon fmem ${BF} smem ${BS} pages"
}

# resize_to NAME FMEM_MIB SMEM_MIB SECS: resize through ch-remote and wait
# until the guest reports both balloons at the target.
_at_or_dead() { tb_balloon_actual_is "$1" "$2" || ! tb_vmm_alive; }
resize_to() {
    stop_if_vmm_died "$1"
    _t0=$(tb_now_ms)
    if ! tb_chr resize --balloon "[$2M,$3M]" >"$TB_OUT/resize-$1.out" 2>&1; then
        tb_fail "$1-resize" "$(head -c 200 "$TB_OUT/resize-$1.out")"
        return 1
    fi
    if tb_wait_until "$4" _at_or_dead $(($2 * MIB)) $(($3 * MIB)) &&
        tb_balloon_actual_is $(($2 * MIB)) $(($3 * MIB)); then
        tb_fact "${1}_ms" "$(($(tb_now_ms) - _t0))"
        tb_pass "$1-reached" "[$2M,$3M] after $(($(tb_now_ms) - _t0)) ms"
        return 0
    fi
    tb_fail "$1-reached" "actual [$(tb_balloon_field fmem actual),$(tb_balloon_field smem actual)] after $4 s; $(stall_evidence "$1")"
    guest_answers "$1" && return 1
    # A hung guest: every later step would only wait out its timeout (the
    # run's budget with it), so the scenario ends here.
    tb_finish
}

# bal_counters: the balloon device's page and statistics counters, as
# "inflated fmem/smem, deflated fmem/smem, stats updates".
bal_counters() {
    tb_chr counters 2>/dev/null | tr -d ' \n' | sed -n 's/.*"__balloon":{\([^}]*\)}.*/\1/p' |
        awk -F, '{ for (i = 1; i <= NF; i++) { split($i, kv, ":"); gsub(/"/, "", kv[1]); v[kv[1]] = kv[2] } }
            END { printf "inflated %s/%s deflated %s/%s stats %s", v["fmem_inflated_pages"], v["smem_inflated_pages"],
                v["fmem_deflated_pages"], v["smem_deflated_pages"], v["stats_updates"] }'
}

# stall_evidence NAME: why a resize did not finish, in one line for the
# summary (CI keeps only that): what the device saw move while the VMM's
# threads and the L2's exits are sampled (vmm-diag-NAME.txt), where the
# L2's vCPUs ran in those 2 s, and the VMM threads not asleep.
stall_evidence() {
    _c0=$(bal_counters)
    tb_vmm_diag "$TB_OUT/vmm-diag-$1.txt" >&2
    _c1=$(bal_counters)
    _busy=$(sed -n 's/^## tid [0-9]* \(.*\) state=\([^S]\) wchan=\(.*\)/\1:\2:\3/p' "$TB_OUT/vmm-diag-$1.txt" 2>/dev/null |
        tr '\n' ' ')
    echo "device counters $_c0 -> $_c1 over the diagnostics; L2 exits in 2 s: $(tb_diag_exit_sites "$TB_OUT/vmm-diag-$1.txt" 3); VMM threads not sleeping: ${_busy:-none}"
}

# guest_answers NAME: does the guest's console loop still answer?
guest_answers() {
    if tb_vmm_ask "m $1-probe" "@@BAL M $1-probe " 30 >/dev/null; then
        tb_log "$1: the guest still answers on its console"
        return 0
    fi
    tb_vmm_alive && tb_l2_hang "no console answer within 30 s after $1 stalled" "$TB_OUT/vmm-diag-$1.txt"
    return 1
}

# near NAME EXPECTED_KB GOT_KB TOLERANCE_KB
near() {
    _d=$(abs $(($3 - $2)))
    if [ "$_d" -le "$4" ]; then
        tb_pass "$1" "expected ${2} kB, got ${3} kB"
    else
        tb_fail "$1" "expected ${2} kB +- ${4}, got ${3} kB"
    fi
}

boot_vm() { # DRIVER then extra VMM args
    _drv=$1
    shift
    rm -f "$SOCK"
    tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=balloon tb.balloon=$_drv tb.timeout=900" \
        --cpus boot=2 --memory size=0 \
        --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
        'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
        --api-socket "path=$SOCK" --serial tty --console off "$@"
    if tb_vmm_wait_line '@@BAL READY' 180; then
        tb_pass "$_drv-guest-ready" "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"
        return 0
    fi
    tb_vmm_diag "$TB_OUT/vmm-diag-$_drv.txt"
    tb_fail "$_drv-guest-ready" "serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    return 1
}

end_vm() { # NAME
    tb_vmm_send quit
    tb_vmm_wait_exit 60
    tb_check_eq "$1-vmm-exit-0" 0 "$TB_VMM_RC"
    tb_check_eq "$1-guest-checks" PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
    cp "$TB_VMM_SERIAL" "$TB_OUT/serial-$1.log" 2>/dev/null
    cp "$TB_VMM_STDERR" "$TB_OUT/vmm-$1.stderr" 2>/dev/null
}

# ------------------------------------------------------------- VM 1 --
VM_NAME=demeter
if boot_vm demeter \
    --memory-zone id=fmem,size=1280M,host_numa_node=0 id=smem,size=1280M,host_numa_node=1,shared=on \
    --balloon 'size=[1024M,256M],statistics=on,deflate_on_oom=on,heterogeneous_memory=on'; then

    # (c) 1:4 carved at boot, 1:1, back to 1:4.
    if tb_wait_until 240 tb_balloon_actual_is $((1024 * MIB)) $((256 * MIB)); then
        tb_pass c-boot-1to4-reached "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"
    else
        tb_fail c-boot-1to4-reached "actual [$(tb_balloon_field fmem actual),$(tb_balloon_field smem actual)]"
    fi
    gm c14
    tb_check_eq c-guest-fmem-balloon-pages 262144 "$BF"
    tb_check_eq c-guest-smem-balloon-pages 65536 "$BS"
    tb_check_le c-node0-free-within-256MiB "$N0" $((256 * 1024))
    tb_check_ge c-node1-free-over-800MiB "$N1" $((800 * 1024))
    info=$(tb_chr info | tr -d ' \n')
    tb_check_eq c-info-memory-actual-size $((1280 * MIB)) \
        "$(echo "$info" | sed -n 's/.*"memory_actual_size":\([0-9]*\).*/\1/p')"
    c0=$N0 c1=$N1
    resize_to c-1to1 640 640 240
    gm c11
    near c-1to1-node0-gains-384MiB $((384 * 1024)) $((N0 - c0)) $((40 * 1024))
    near c-1to1-node1-gives-384MiB $((-384 * 1024)) $((N1 - c1)) $((40 * 1024))
    resize_to c-back-1to4 1024 256 240
    gm c14b
    near c-back-node0 "$c0" "$N0" $((40 * 1024))
    near c-back-node1 "$c1" "$N1" $((40 * 1024))

    # Per-tier statistics reach the host API.
    tb_check stats-updates tb_wait_until 10 stats_updated
    tb_chr balloon-stats >"$TB_OUT/balloon-stats.json" 2>&1
    tb_check stats-fmem-guest-total test -n "$(tb_balloon_field fmem guest_total)"
    tb_check stats-smem-guest-total test -n "$(tb_balloon_field smem guest_total)"
    tb_check counters-have-balloon counters_have_balloon
    tb_check_eq host-agrees-fmem "$(tb_balloon_field fmem actual)" "$(tb_balloon_field fmem host_inflated)"
    tb_check_eq host-agrees-smem "$(tb_balloon_field smem actual)" "$(tb_balloon_field smem host_inflated)"

    resize_to all-deflated 0 0 240

    # (a) SMem, then (b) FMem: guest node free memory and host RSS.
    for t in smem fmem; do
        if [ $t = smem ]; then node=1 f=0 s=256; else node=0 f=256 s=0; fi
        # Make (nearly) all of the node's free memory host-resident first,
        # so that the pages the balloon takes have RSS to give back.
        gm "${t}pre"
        # At most 768 MiB: enough that the 256 MiB the balloon takes next
        # are resident, without filling the L1 host's small slow node.
        if [ $node = 0 ]; then mib=$((N0 / 1024 - 128)); else mib=$((N1 / 1024 - 128)); fi
        [ "$mib" -le 768 ] || mib=768
        tb_vmm_send "touch $node:$mib"
        tb_vmm_wait_line "@@BAL TOUCHED $node:$mib" 120 || tb_fail "$t-touch" "guest did not touch node $node"
        gm "${t}0"
        a0=$N0 b0=$N1 r0=$(rss_kb)
        resize_to "$t-inflate-256MiB" $f $s 180
        gm "${t}1"
        r1=$(rss_kb)
        tb_fact "${t}_rss_drop_kb" $((r0 - r1))
        if [ $t = smem ]; then
            near a-node1-falls-256MiB $((-256 * 1024)) $((N1 - b0)) $((26 * 1024))
            near a-node0-unchanged 0 $((N0 - a0)) $((32 * 1024))
            tb_check_eq a-guest-smem-pages 65536 "$BS"
        else
            near b-node0-falls-256MiB $((-256 * 1024)) $((N0 - a0)) $((26 * 1024))
            near b-node1-unchanged 0 $((N1 - b0)) $((32 * 1024))
            tb_check_eq b-guest-fmem-pages 65536 "$BF"
        fi
        near "$t-vmm-rss-falls-256MiB" $((256 * 1024)) $((r0 - r1)) $((40 * 1024))
        resize_to "$t-deflate" 0 0 180
        gm "${t}2"
        near "$t-deflate-restores-node0" "$a0" "$N0" $((26 * 1024))
        near "$t-deflate-restores-node1" "$b0" "$N1" $((26 * 1024))
    done

    # (e) 200 resizes under a memory-hungry guest program.
    tb_vmm_send "churn 192"
    tb_vmm_wait_line '@@BAL CHURNING' 30 || tb_fail e-churn-started "no churn"
    bad=0
    i=1
    t0=$(tb_now_ms)
    while [ $i -le 200 ]; do
        f=$(((i * 37 % 8) * 32))
        s=$(((i * 53 % 8) * 64))
        tb_chr resize --balloon "[${f}M,${s}M]" >/dev/null 2>&1 || bad=$((bad + 1))
        i=$((i + 1))
    done
    tb_fact e_200_resizes_ms "$(($(tb_now_ms) - t0))"
    tb_check_eq e-200-resizes-accepted 0 "$bad"
    resize_to e-final 96 192 240
    gm e
    tb_check_eq e-guest-fmem-exact $((96 * 256)) "$BF"
    tb_check_eq e-guest-smem-exact $((192 * 256)) "$BS"
    tb_check_eq e-host-fmem-exact $((96 * MIB)) "$(tb_balloon_field fmem host_inflated)"
    tb_check_eq e-host-smem-exact $((192 * MIB)) "$(tb_balloon_field smem host_inflated)"
    tb_vmm_send unchurn
    tb_vmm_wait_line '@@BAL CHURN rc=' 60 || tb_fail e-churn-ended "no churn summary"
    tb_check_eq e-churn-rc-0 0 "$(tr -d '\r' <"$TB_VMM_SERIAL" | sed -n 's/.*@@BAL CHURN rc=\([0-9]*\).*/\1/p' | tail -n 1)"
    resize_to e-deflated 0 0 240
    tb_check_eq e-host-nothing-held "0 0" "$(tb_balloon_field fmem host_inflated) $(tb_balloon_field smem host_inflated)"
    rss=$(rss_kb)
    tb_fact vmm_rss_end_kb "$rss"
    tb_check_le e-vmm-rss-within-guest-ram-plus-64MiB "$rss" $(((2560 + 64) * 1024))
    tb_check vmm-alive tb_vmm_alive
    end_vm demeter
else
    tb_vmm_stop
fi

# ------------------------------------------------------------- VM 2 --
VM_NAME=stock
if boot_vm stock \
    --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
    --balloon 'size=0,statistics=on,deflate_on_oom=on'; then
    gm d0
    d0=$N0 d1=$N1
    resize_to d-stock-inflate-256MiB 256 0 180
    gm d1
    from0=$(((d0 - N0) / 1024))
    from1=$(((d1 - N1) / 1024))
    tb_fact stock_from_node0_mib "$from0"
    tb_fact stock_from_node1_mib "$from1"
    tb_fact stock_host_fmem_bytes "$(tb_balloon_field fmem host_inflated)"
    tb_fact stock_host_smem_bytes "$(tb_balloon_field smem host_inflated)"
    tb_log "stock balloon of 256 MiB took $from0 MiB from node 0 (FMem) and $from1 MiB from node 1 (SMem)"
    tb_check_eq d-host-sees-256MiB $((256 * MIB)) \
        $(($(tb_balloon_field fmem host_inflated) + $(tb_balloon_field smem host_inflated)))
    if tb_chr resize --balloon '[0,64M]' >"$TB_OUT/d-smem.out" 2>&1; then
        tb_fail d-smem-target-refused "an SMem target was accepted without HETERO_MEM"
    else
        tb_pass d-smem-target-refused "$(head -c 160 "$TB_OUT/d-smem.out")"
    fi
    resize_to d-stock-deflate 0 0 180
    end_vm stock
else
    tb_vmm_stop
fi
tb_finish

# shellcheck shell=sh
# l2-kernel-6.1, L2 side: Debian 12's default kernel (6.1 LTS) running both
# guest modules. demeter_balloon.ko must load cleanly and take its orders
# from the host (the L1 side resizes each tier's balloon through the API
# and asks for the nodes' free memory in between); tiering.ko and
# tiering-agent must manage a small GUPS target whose hot set starts in
# SMem (it must get samples and the agent must promote pages), then both
# modules must unload, all without a kernel warning or a taint other than
# out-of-tree (O) and unsigned (E).
#
# Console commands from the L1 side (answers prefixed "@@BAL", the format
# of the balloon scenario):
#   m TAG     "@@BAL M TAG n0=<kB> n1=<kB> bf=<pages> bs=<pages>"
#   tiering   the balloon part is over: go on
# Kernel command line: tb.want_release=R (the release L1 packed; checked
# against uname -r), tb.tier_abit_flush=N (tiering.ko's abit_tlb_flush, by
# L1's paging mode as in tiering-gups), tb.k61_run_s=N (GUPS seconds).
# Under --l2-in-qemu (no VMM, no balloon device) the balloon part is left
# out.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

BAL=/sys/kernel/demeter_balloon
SYS=/sys/kernel/tiering
# 45 s: the manager promotes only ranges clearly denser than the
# footprint's mean (tiering.ko hot_pct), so its first promotion waits
# for the classifier to split the hot 16 MiB out (about 10-15 s on the
# shadow-paging L1); with 20 s the agent had promoted nothing yet.
RUN_S=45
want=""
abit_flush=""
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.want_release=*) want=${arg#*=} ;;
    tb.tier_abit_flush=*) abit_flush=${arg#*=} ;;
    tb.k61_run_s=*) RUN_S=${arg#*=} ;;
    esac
done

rel=$(uname -r)
tb_fact_str kernel "$rel"
tb_fact_str kernel_version "$(cat /proc/version)"
case $rel in
6.1.*) tb_pass kernel-is-6.1 "$rel" ;;
*) tb_fail kernel-is-6.1 "uname -r says $rel" ;;
esac
[ -z "$want" ] || tb_check_eq kernel-is-the-packed-release "$want" "$rel"
tb_check_eq two-numa-nodes 2 "$(tb_node_count)"

# Taints and kernel messages from here on. Loading an out-of-tree,
# unsigned module sets O (4096) and E (8192); any other new bit (W for a
# warning, D for an oops, ...) fails.
TAINT_MODULE=$((4096 | 8192))
taint0=$(cat /proc/sys/kernel/tainted)
tb_fact taint_at_start "$taint0"
# Boot-time warnings are the nested CPU's, not the modules' (6.12 shows the
# same "XSAVE consistency problem" under this testbed): recorded only.
tb_fact_str boot_warning "$(dmesg | grep -B1 -m1 'WARNING: CPU' | tr '\n' '|')"
dmesg0=$(dmesg | wc -l)
KWARN='WARNING:|BUG:|Oops|general protection|Call Trace|refcount_t|list_(add|del) corruption|Unknown symbol|disagrees about version|Invalid module format'
new_taint() { echo $((($(cat /proc/sys/kernel/tainted) & ~taint0) & ~TAINT_MODULE)); }
new_warnings() { dmesg | tail -n +$((dmesg0 + 1)) | grep -E "$KWARN" | head -n 3 | tr '\n' '|'; }

# insmod_clean NAME KO [PARAM...]: the load succeeds and leaves no warning
# and no taint but O/E behind
insmod_clean() {
    _n=$1
    shift
    if ! insmod "$@" 2>/tmp/insmod.err; then
        tb_fail "insmod-$_n" "$(tr '\n' ' ' </tmp/insmod.err)| dmesg: $(dmesg | tail -n 4 | tr '\n' '|')"
        return 1
    fi
    tb_pass "insmod-$_n" "taint now $(cat /proc/sys/kernel/tainted)"
    tb_check_eq "$_n-no-taint-but-O-E" 0 "$(new_taint)"
    tb_check_eq "$_n-no-kernel-warning" "" "$(new_warnings)"
}

# Free memory of node $1 in kB: buddy free pages plus the per-CPU lists
# (the balloon scenario's measure).
node_free_kb() {
    awk -v n="$1" '
        $1 == "Node" { node = $2 + 0 }
        node == n && $1 == "pages" && $2 == "free" { kb += $3 * 4 }
        node == n && $1 == "count:" { kb += $2 * 4 }
        END { print kb + 0 }' /proc/zoneinfo
}
bal_pages() { cat "$BAL/$1/size_pages" 2>/dev/null || echo 0; }

# ---- the double balloon ----
balloon_dev=0
if grep -qx 0x0005 /sys/bus/virtio/devices/*/device 2>/dev/null; then balloon_dev=1; fi
if [ "$TB_STANDALONE" != 1 ]; then
    tb_check_eq virtio-balloon-device-present 1 "$balloon_dev"
fi
insmod_clean demeter_balloon /tb/kmod/demeter_balloon.ko
if [ "$balloon_dev" = 1 ]; then
    tb_check balloon-sysfs-present test -d "$BAL/fmem"
    tb_check_eq hetero-mem-negotiated 1 "$(cat "$BAL/hetero_mem" 2>/dev/null)"
    tb_check_eq stats-vq-negotiated 1 "$(cat "$BAL/stats_vq" 2>/dev/null)"
    tb_check_eq fmem-balloon-is-node0 0 "$(cat "$BAL/fmem/node" 2>/dev/null)"
    tb_check_eq smem-balloon-is-node1 1 "$(cat "$BAL/smem/node" 2>/dev/null)"
fi
if [ "$TB_STANDALONE" != 1 ] && [ "$balloon_dev" = 1 ]; then
    echo "@@BAL READY"
    ended=0
    # bounded: an L1 side that died must not keep the guest here
    # shellcheck disable=SC3045 # busybox ash has read -t
    while read -r -t 180 cmd arg; do
        case $cmd in
        m) echo "@@BAL M $arg n0=$(node_free_kb 0) n1=$(node_free_kb 1) bf=$(bal_pages fmem) bs=$(bal_pages smem)" ;;
        tiering)
            ended=1
            break
            ;;
        esac
    done
    tb_check_eq l1-ended-balloon-part 1 "$ended"
else
    tb_fact_str balloon "no balloon device (--l2-in-qemu): resizes not tried"
fi

# ---- tiering.ko + tiering-agent on a GUPS target ----
# abit_max_level=1: this scenario checks that the manager works on 6.1,
# not how fast it converges (tiering-gups does, with the defaults). With
# the default back-off (scanner epochs up to 8 s) and the agent's own
# (rounds up to 8 epochs apart), a hot range must qualify in two rounds
# up to a minute apart, and in 2 of 6 runs on 27 Nov none did within the
# 45 s: nothing promoted. That interplay is open work (issue 14).
if insmod_clean tiering /tb/kmod/tiering.ko abit_max_level=1 ${abit_flush:+abit_tlb_flush=$abit_flush}; then
    tb_check tiering-sysfs-present test -d "$SYS/targets"
    tb_check_eq tiering-fmem-node-0 0 "$(cat "$SYS/fmem_node" 2>/dev/null)"
    tb_check_eq tiering-smem-node-1 1 "$(cat "$SYS/smem_node" 2>/dev/null)"
    tb_fact_str sampler "$(tr '\n' ' ' <"$SYS/sampler" 2>/dev/null)"
    # 128 MiB with its last 16 MiB hot, first touched on SMem (preferred
    # node 1), so every hot page the manager wants in FMem must be moved
    numactl --preferred=1 "$TB_BIN/gups-hotset" -s 128 -H 16 -r 10 -t "$RUN_S" -i 1000 -f 0 >/tmp/gups.out 2>&1 &
    g_pid=$!
    if tb_wait_line /tmp/gups.out '"gups":"start"' 120; then
        tb_check_eq agent-add-slot-0 0 "$("$TB_BIN/tiering-agent" add "$g_pid" 2>&1)"
        tb_check_eq target-running running "$(cat "$SYS/targets/0/state" 2>/dev/null)"
        tb_bg_start AG "$TB_BIN/tiering-agent" run -v
        # gups ends itself after RUN_S; bounded wait with slack
        if ! tb_wait_until $((RUN_S + 60)) sh -c "! kill -0 $g_pid 2>/dev/null"; then
            tb_fail gups-finished "still running after $((RUN_S + 60)) s"
            kill "$g_pid" 2>/dev/null
        fi
        wait "$g_pid" 2>/dev/null
        cat "$SYS/targets/0/stats" >/tmp/target-stats 2>&1
        tb_bg_stop "$AG_PID"
        ag=$(grep '"agent":"done"' "$AG_OUT" | tail -n 1)
        done_l=$(grep '"gups":"done"' /tmp/gups.out | tail -n 1)
        series=$(grep '"gups":"tick"' /tmp/gups.out | sed -n 's/.*"hot_fmem_pct":\([0-9.]*\).*/\1/p' | tr '\n' ',' | sed 's/,$//')
        tb_fact agent_done "${ag:-null}"
        tb_fact gups_done "${done_l:-null}"
        tb_fact hot_fmem_pct_series "[$series]"
        first=$(echo "$series" | cut -d, -f1)
        best=$(echo "$series" | tr ',' '\n' | sort -n | tail -n 1)
        first=${first:-100}
        best=${best:-0}
        tb_check_le hot-set-starts-in-smem "${first%.*}" 10
        samples=$(awk '$1 == "samples" { print $2 }' /tmp/target-stats)
        tb_fact target_samples "${samples:-null}"
        tb_fact_str target_source "$(awk '$1 == "source" { print $2 }' /tmp/target-stats)"
        tb_check_ge target-got-samples "${samples:-0}" 1
        promoted=$(echo "$ag" | sed -n 's/.*"promoted":\([0-9]*\).*/\1/p')
        tb_check_ge agent-promoted-pages "${promoted:-0}" 1
        # Residency is reported, not checked: in the first nested run
        # (shadow paging) the agent's first rounds went to the cold part
        # and the hot set was still in SMem after 20 s, while under
        # --l2-in-qemu it was all in FMem after 12 s.
        tb_fact hot_fmem_pct_best "$best"
        tb_fact target_reloc_failed "$(awk '$1 == "reloc_failed" { print $2 }' /tmp/target-stats | sed 's/^$/null/')"
        tb_check_eq target-exited-with-workload exited "$(cat "$SYS/targets/0/state" 2>/dev/null)"
        echo "--- target stats ---"
        tb_show_tail /tmp/target-stats 40 'T| '
        echo "--- agent log (tail) ---"
        tb_show_tail "$AG_OUT" 10 'A| '
    else
        tb_fail gups-started "no start line: $(tail -n 3 /tmp/gups.out | tr '\n' '|')"
        kill "$g_pid" 2>/dev/null
    fi
    tb_check rmmod-tiering rmmod tiering
fi
tb_check rmmod-demeter_balloon rmmod demeter_balloon

tb_fact taint_at_end "$(cat /proc/sys/kernel/tainted)"
tb_check_eq no-new-taint-but-O-E 0 "$(new_taint)"
tb_check_eq no-kernel-warnings "" "$(new_warnings)"
dmesg | tail -n +$((dmesg0 + 1)) | grep -iE 'tiering|balloon|taint' | tail -n 8 | sed 's/^/K| /'

tb_report
tb_l2_handshake "${TB_ACK_TIMEOUT:-30}"
exit "$TB_RC"

# shellcheck shell=sh
# bench-boot: boot time and memory overhead, our VMM against upstream Cloud Hypervisor v53 (scripts/bench.sh boot)
# Not part of --all. Boots the numa-boot VM (2 vCPUs, FMem 512 MiB on host
# node 0, SMem 1 GiB on host node 1) TB_BOOTS times (default 5) with each
# VMM, interleaved in this one L1 boot (ours, upstream, ours, upstream,
# ...), with the same L2 kernel, initramfs and command line (upstream's
# without our tier keys latency_ns=/bandwidth_mbps=). For each boot:
# VMM start -> the L2 /init marker, VMM start -> the guest's handshake, and
# at the handshake the VMM's RSS split into guest RAM (the resident part of
# the two zone mappings, found by size in /proc/PID/smaps) and the VMM's
# own memory. A boot in which the guest rebooted (a second kernel banner or
# /init marker), oopsed or panicked (the guest's dmesg, reported before the
# handshake, and the console), triple-faulted or did not exit cleanly is
# reported as a crash and left out of the medians.
#
# With --vmm qemu, TB_VMM is the QEMU stand-in: only it is booted (label
# "qemu"); scripts/bench/boot.sh runs that in a second L1 boot.
# TB_BOOTS comes from the environment (direct mode) or tb.boots=N on the
# L1 kernel command line (scripts/bench/boot.sh passes it).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

BOOTS=${TB_BOOTS:-$(tr ' ' '\n' </proc/cmdline | sed -n 's/^tb\.boots=//p' | tail -n 1)}
case $BOOTS in '' | *[!0-9]*) BOOTS=5 ;; esac
[ "$BOOTS" -ge 1 ] || BOOTS=1
tb_fact boots "$BOOTS"

OURS_VMM=$TB_VMM
case $TB_VMM in
*qemu-as-ch*) LABELS="qemu" ;;
*)
    LABELS="ours"
    if [ -n "${TB_CH_UPSTREAM:-}" ] && [ -x "$TB_CH_UPSTREAM" ]; then
        LABELS="ours upstream"
        tb_fact_str upstream_vmm "$("$TB_CH_UPSTREAM" --version 2>&1 | head -n 1)"
    else
        tb_fact_str upstream_absent "anchors absent: no upstream cloud-hypervisor in L1 (../shared/anchors/cloud-hypervisor-v53/ missing on the host); only our VMM measured"
        tb_log "anchors absent: upstream Cloud Hypervisor not measured"
    fi
    ;;
esac
tb_fact_str vmms "$LABELS"

NUMA0='guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000'
NUMA1='guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000'

start_vmm() { # LABEL
    case $1 in
    upstream)
        TB_VMM=$TB_CH_UPSTREAM
        n0=$(tb_strip_tier_keys "$NUMA0")
        n1=$(tb_strip_tier_keys "$NUMA1")
        ;;
    *)
        TB_VMM=$OURS_VMM
        n0=$NUMA0
        n1=$NUMA1
        ;;
    esac
    tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=bench-boot" \
        --cpus boot=2 --memory size=0 \
        --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
        --numa "$n0" "$n1" \
        --serial tty --console off
}

# zone_rss PID SAVE: resident kB of the guest RAM mappings, found by size
# (exactly 512 MiB or 1 GiB, the two zones); prints "kB count". Every
# mapping of 64 MiB or more goes to SAVE with its Rss, to check that the
# zones are found the same way in both VMMs.
zone_rss() {
    awk -v mib="$MIB" -v save="$2" '
        /^[0-9a-f]+-[0-9a-f]+ / {
            split($1, r, "-")
            size = hex(r[2]) - hex(r[1]); zone = (size == 512 * mib || size == 1024 * mib)
            big = (size >= 64 * mib); name = $1 " " $2 " " $6
            next
        }
        $1 == "Rss:" {
            if (big) printf "%s size=%dMiB rss=%dkB%s\n", name, size / mib, $2, zone ? " zone" : "" >save
            if (zone) { kb += $2; n++ }
        }
        function hex(h,   i, v) { v = 0; for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1; return v }
        END { print kb + 0, n + 0 }' "/proc/$1/smaps"
}

count_in() { tr -d '\r' <"$1" 2>/dev/null | grep -c -- "$2"; }

median() { printf '%s\n' $1 | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "null" }'; }

for l in $LABELS; do
    eval "sigrc_$l= init_$l= ready_$l= own_$l= rss_$l= crash_$l= ncrash_$l=0 nclean_$l=0 zones_$l="
done

i=1
while [ "$i" -le "$BOOTS" ]; do
    for l in $LABELS; do
        start_vmm "$l"
        init="" ready="" own="" rss="" zones="" why="" stopped=0
        tb_vmm_wait_line '@@TB-L2 INIT' 150
        st=$?
        if [ "$st" -eq 0 ]; then
            init=$(($(tb_now_ms) - TB_VMM_START_MS))
            tb_vmm_wait_line '@@TB-L2 READY bench-boot' 90
            st=$?
            if [ "$st" -eq 0 ]; then
                ready=$(($(tb_now_ms) - TB_VMM_START_MS))
                rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$TB_VMM_PID/status")
                set -- $(zone_rss "$TB_VMM_PID" "$TB_OUT/bigmaps-$l-$i.txt")
                guest=$1
                zones=$2
                own=$((rss - guest))
                tb_vmm_send tb-ack
                if [ "$l" = upstream ]; then
                    # Upstream takes serial input only from a terminal
                    # (here stdin is a FIFO: the ack never reached its
                    # guest, which then waited out its 60 s): measured,
                    # so stop it with SIGTERM.
                    kill -TERM "$TB_VMM_PID" 2>/dev/null
                    stopped=1
                fi
            else
                why="no handshake (wait rc $st: 1 timeout, 2 VMM exited)"
                tb_vmm_diag "$TB_OUT/vmm-diag-$l-$i.txt"
            fi
        else
            why="no /init marker (wait rc $st: 1 timeout, 2 VMM exited)"
            tb_vmm_diag "$TB_OUT/vmm-diag-$l-$i.txt"
        fi
        tb_vmm_wait_exit 60
        ser=$TB_OUT/serial-$l-$i.log
        cp "$TB_VMM_SERIAL" "$ser" 2>/dev/null
        cp "$TB_VMM_STDERR" "$TB_OUT/vmm-$l-$i.stderr" 2>/dev/null
        cp "$TB_OUT/vmm.cmdline" "$TB_OUT/vmm-$l.cmdline" 2>/dev/null
        # What happened to the guest during this boot.
        ev=""
        [ "$(count_in "$ser" 'Linux version')" -le 1 ] || ev="$ev reboot($(count_in "$ser" 'Linux version') kernel banners)"
        [ "$(count_in "$ser" '@@TB-L2 INIT')" -le 1 ] || ev="$ev reboot($(count_in "$ser" '@@TB-L2 INIT') /init markers)"
        k=$(tr -d '\r' <"$ser" | sed -n 's/.*@@TB-BENCH KERNEL oops=\([0-9]*\).*/\1/p' | tail -n 1)
        [ "${k:-0}" -eq 0 ] || ev="$ev oops-in-dmesg($k)"
        o=$(tr -d '\r' <"$ser" | grep -m 1 -E 'Oops|Kernel panic|BUG:|general protection fault|invalid opcode' | cut -c1-100)
        [ -z "$o" ] || ev="$ev console:'$o'"
        if grep -qis 'triple fault' "$TB_VMM_STDERR"; then ev="$ev triple-fault"; fi
        if [ "$stopped" = 1 ]; then
            [ "$TB_VMM_RC" != 124 ] || ev="$ev vmm-did-not-stop-on-SIGTERM"
            eval "sigrc_$l=\"\$sigrc_$l $TB_VMM_RC\""
        else
            [ "$TB_VMM_RC" = 0 ] || ev="$ev vmm-exit-rc=$TB_VMM_RC"
        fi
        [ -z "$why" ] || ev="$why;$ev"
        if [ -n "$ev" ]; then
            tb_log "$l boot $i: GUEST CRASH/REBOOT:$ev (init ${init:-?} ms, ready ${ready:-?} ms; not counted)"
            eval "crash_$l=\"\$crash_$l [$i]$ev\"; ncrash_$l=\$((ncrash_$l + 1))"
        else
            tb_log "$l boot $i: init $init ms, ready $ready ms, RSS $rss kB, own $own kB ($zones zone mappings)"
            eval "init_$l=\"\$init_$l $init\" ready_$l=\"\$ready_$l $ready\" own_$l=\"\$own_$l $own\" rss_$l=\"\$rss_$l $rss\" zones_$l=\"\$zones_$l $zones\" nclean_$l=\$((nclean_$l + 1))"
        fi
    done
    i=$((i + 1))
done

for l in $LABELS; do
    eval "il=\$init_$l rl=\$ready_$l ol=\$own_$l rs=\$rss_$l zl=\$zones_$l cr=\$crash_$l nc=\$ncrash_$l ok=\$nclean_$l"
    tb_fact "${l}_init_ms_median" "$(median "$il")"
    tb_fact "${l}_ready_ms_median" "$(median "$rl")"
    tb_fact "${l}_own_rss_kb_median" "$(median "$ol")"
    tb_fact "${l}_rss_kb_median" "$(median "$rs")"
    tb_fact_str "${l}_init_ms_all" "${il# }"
    tb_fact_str "${l}_ready_ms_all" "${rl# }"
    tb_fact_str "${l}_own_rss_kb_all" "${ol# }"
    tb_fact_str "${l}_zone_mappings_found" "${zl# }"
    tb_fact "${l}_clean_boots" "$ok"
    tb_fact "${l}_crashed_boots" "$nc"
    tb_fact_str "${l}_crashes" "${cr# }"
    eval "sr=\$sigrc_$l"
    [ -z "$sr" ] || tb_fact_str "${l}_exit_status_after_sigterm" "${sr# }"
    # A measurement needs clean boots; the zones must be found (2 mappings)
    # or the own-RSS figure is meaningless.
    tb_check_ge "$l-clean-boots" "$ok" 1
    for z in $zl; do
        [ "$z" = 2 ] || { tb_fail "$l-zone-mappings" "found $z mappings of zone size (want 2): see bigmaps-$l-*.txt"; break; }
    done
done
# Compatibility with the single-VMM fact names (scripts/bench/boot.sh).
first=${LABELS%% *}
eval "tb_fact init_ms_median \"\$(median \"\$init_$first\")\""
eval "tb_fact ready_ms_median \"\$(median \"\$ready_$first\")\""
eval "tb_fact vmm_own_rss_kb_median \"\$(median \"\$own_$first\")\""
eval "tb_fact_str init_ms_all \"\${init_$first# }\""
tb_finish

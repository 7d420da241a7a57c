# shellcheck shell=sh
# numa-boot: L2 with fmem/smem zones bound to host nodes 0/1: guest topology + VMM numa_maps
# L1 side: boot a stock L2 kernel with two memory zones bound to
# the two host nodes, let the guest check its topology (l2.sh), and check
# the VMM's own memory placement in /proc/PID/numa_maps while the guest
# still holds memory on both nodes.
#
# Handshake: the guest prints its result JSON, then "@@TB-L2 READY
# numa-boot" and waits (at most 30 s) for "tb-ack" on its console. We
# sample numa_maps on READY, then send the ack; the guest powers off and
# the VMM must exit 0.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM (cargo build of cloud-hypervisor failed or was skipped)"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"

trap 'tb_vmm_stop' EXIT

# The exact command line of the scenario (do not change it casually: it is
# the interface contract with the VMM). With a cloud-hypervisor binary (ours
# or upstream's) it also sets the SMBIOS identity (--platform, as a
# cloud-init NoCloud user would) and tells the guest (tb.smbios=1) to check
# it against the values in l2.sh; the QEMU stand-in (--vmm qemu) has its own
# SMBIOS and gets neither.
cmdline="console=ttyS0 reboot=k panic=-1 tb.run=numa-boot"
set -- --cpus boot=2 --memory size=0 \
    --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
    --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
    'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
    --serial tty --console off
if [ "${TB_VMM##*/}" = cloud-hypervisor ]; then
    cmdline="$cmdline tb.smbios=1"
    set -- "$@" --platform 'system_serial_number=ds=nocloud;s=http://10.0.2.2:8000/numa-boot/,system_uuid=d1a3c5e7-0b2d-4f6a-8c9e-123456789abc,oem_strings=[tb-oem-1,io.systemd.credential:tb=numa-boot]'
fi
tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" --cmdline "$cmdline" "$@"

# Budget (bounded by the scenario timeout, keeping 70 s for the exit wait
# and the report): half of it to reach the L2 /init, the rest to READY.
budget=$((${TB_TIMEOUT:-240} - 70))
[ "$budget" -ge 20 ] || budget=20
tb_vmm_wait_line '@@TB-L2 INIT' $((budget / 2))
st=$?
if [ "$st" -eq 0 ]; then
    t=$(tb_now_ms)
    tb_fact vmm_start_to_l2_init_ms "$((t - TB_VMM_START_MS))"
    tb_pass "l2-reached-init" "$((t - TB_VMM_START_MS)) ms after VMM start"
    left=$((budget - (t - TB_VMM_START_MS) / 1000))
    [ "$left" -ge 10 ] || left=10
    tb_vmm_wait_line '@@TB-L2 READY numa-boot' "$left"
    st=$?
elif [ "$st" -eq 2 ]; then
    tb_fail "l2-reached-init" "the VMM exited before the L2 /init ran"
else
    tb_fail "l2-reached-init" "no @@TB-L2 INIT within $((budget / 2)) s"
fi
case $st in
0)
    t=$(tb_now_ms)
    tb_fact vmm_start_to_l2_ready_ms "$((t - TB_VMM_START_MS))"
    tb_pass "l2-reached-handshake"
    ;;
1)
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail "l2-reached-handshake" "timed out (threads/KVM stats: vmm-diag.txt); serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    ;;
2) tb_fail "l2-reached-handshake" "VMM exited early; stderr tail: $(tail -n 5 "$TB_VMM_STDERR" | tr '\n' '|')" ;;
esac

# --- the VMM's memory placement (sampled while the guest holds memory) ---
if [ "$st" -eq 0 ] && tb_vmm_alive; then
    cp "/proc/$TB_VMM_PID/numa_maps" "$TB_OUT/numa_maps.txt" 2>/dev/null
    cp "/proc/$TB_VMM_PID/maps" "$TB_OUT/maps.txt" 2>/dev/null
    grep -E '^(VmHWM|VmRSS)' "/proc/$TB_VMM_PID/status" >"$TB_OUT/status.txt" 2>/dev/null
    tb_numa_maps_summary "$TB_VMM_PID" >"$TB_OUT/numa_maps.summary"
    hwm=$(awk '/VmHWM/ { print $2 }' "$TB_OUT/status.txt")
    tb_fact vmm_vmhwm_kb "${hwm:-null}"
    echo "VMM mappings with a policy or resident pages (start size policy nodes):"
    cat "$TB_OUT/numa_maps.summary"

    # check_zone SIZE NODE NAME: the mapping of exactly SIZE bytes is bound
    # to NODE and all its resident pages are on NODE (at least one page).
    check_zone() {
        z_size=$1
        z_node=$2
        z_name=$3
        line=$(awk -v s="$z_size" '$2 == s && $3 ~ /^bind:/' "$TB_OUT/numa_maps.summary" | head -n 1)
        [ -n "$line" ] || line=$(awk -v s="$z_size" '$2 == s' "$TB_OUT/numa_maps.summary" | head -n 1)
        tb_fact_str "${z_name}_mapping" "$line"
        if [ -z "$line" ]; then
            tb_fail "${z_name}-mapping-found" "no mapping of $z_size bytes in numa_maps"
            return
        fi
        # shellcheck disable=SC2086 # split "start size policy N0=.. N1=.."
        set -- $line
        tb_check_eq "${z_name}-policy-bind:$z_node" "bind:$z_node" "$3"
        shift 3
        on=0
        off=""
        for f in "$@"; do
            case $f in
            "N$z_node="*) on=${f#*=} ;;
            N*=*) off="$off $f" ;;
            esac
        done
        if [ "$on" -gt 0 ] && [ -z "$off" ]; then
            tb_pass "${z_name}-pages-only-on-N$z_node" "N$z_node=$on pages, none elsewhere"
        else
            tb_fail "${z_name}-pages-only-on-N$z_node" "N$z_node=$on, elsewhere:${off:- none}"
        fi
    }
    check_zone $((512 * MIB)) 0 fmem
    check_zone $((1024 * MIB)) 1 smem
    tb_vmm_send tb-ack
else
    tb_fail "numa_maps-sampled" "VMM not running at handshake time"
fi

tb_vmm_wait_exit 60
tb_fact vmm_exit_code "$TB_VMM_RC"
tb_check_eq "vmm-exit-code-0" 0 "$TB_VMM_RC"

l2=$(tb_l2_json "$TB_VMM_SERIAL")
l2rc=$(tb_l2_marker_rc "$TB_VMM_SERIAL")
tb_fact l2 "${l2:-null}"
ack=$(tr -d '\r' <"$TB_VMM_SERIAL" | sed -n 's/.*@@TB-L2 ACK numa-boot \([a-z]*\).*/\1/p' | tail -n 1)
tb_fact_str l2_ack "${ack:-none}"
case $l2 in
*'"result":"PASS"'*) tb_pass "l2-checks-passed" ;;
'') tb_fail "l2-checks-passed" "no L2 JSON line in serial.log" ;;
*) tb_fail "l2-checks-passed" "L2 reported failure (see its JSON)" ;;
esac
tb_check_eq "l2-scenario-rc-0" 0 "$l2rc"
if [ -n "$TB_VMM_EXIT_MS" ]; then
    tb_fact vmm_total_ms "$((TB_VMM_EXIT_MS - TB_VMM_START_MS))"
fi

echo "--- guest serial console (tail; full log: serial.log) ---"
tb_show_tail "$TB_VMM_SERIAL" 30 'L2| '
echo "--- VMM stderr (tail) ---"
tb_show_tail "$TB_VMM_STDERR" 20 'VMM| '
echo "---"
tb_finish

# shellcheck shell=sh
# mtp-python: MTP (object-level tiering for CPython, guest/python/mtp) in
# an L2 booted by our VMM with two NUMA nodes (FMem 256 MiB on host node 0,
# SMem 1 GiB on host node 1, HMAT making node 1 the slow tier), a double
# balloon, and Python on a read-only virtio-blk disk (/tb/l2/disks/
# mtp-python.img, built at L0 by guest/python/mtp/tools/build-testbed-disk.sh).
# The guest (l2.sh) asks for FMem balloon sizes on the console
# ("@@MTP balloon N fmem_bytes=B"); this side applies them with
# `ch-remote resize`. One vCPU: l2.sh switches numa_balancing, i.e. patches
# kernel text, which races with a second vCPU under TCG (docs/testbed.md).
# TB_MTP_APPEND (environment) adds L2 command line keys (bench-mtp-python).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

DISK=${TB_L2_DISK_DIR:-/tb/l2/disks}/mtp-python.img
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM (cargo build of cloud-hypervisor failed or was skipped)"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
[ -f "$DISK" ] || tb_skip "no Python disk image at $DISK (packed by nested runs only)"
trap 'tb_vmm_stop' EXIT
rm -f "$TB_API_SOCK"

tb_vmm_start --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
    --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=mtp-python tb.timeout=$((${TB_TIMEOUT:-600} - 60)) ${TB_MTP_APPEND:-}" \
    --cpus boot=1 --memory size=0 \
    --memory-zone id=fmem,size=256M,host_numa_node=0 id=smem,size=1G,host_numa_node=1 \
    --numa 'guest_numa_id=0,cpus=[0],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
    'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
    --balloon 'size=[0,0],heterogeneous_memory=on' \
    --disk "path=$DISK,readonly=on" \
    --api-socket "path=$TB_API_SOCK" \
    --serial tty --console off

budget=$((${TB_TIMEOUT:-600} - 40))

# Progress on the L1 console while the L2 runs (each run's start, failed
# checks, kernel reports): the serial log is packed only at the end, and a
# run killed before then (a hung L2) leaves nothing else. Polls every 2 s
# until the VMM exits.
mtp_relay() {
    _mtp_seen=0
    while tb_vmm_alive; do
        _mtp_n=$(wc -l <"$TB_VMM_SERIAL" 2>/dev/null || echo 0)
        if [ "$_mtp_n" -gt "$_mtp_seen" ]; then
            tr -d '\r' <"$TB_VMM_SERIAL" | awk -v a="$_mtp_seen" -v b="$_mtp_n" '
                NR > a && NR <= b && /run [^ ]+ starts|^FAIL|^dmesg |Kernel panic|Oops|BUG:|Linux version/ {
                    print "L2> " $0 }'
            _mtp_seen=$_mtp_n
        fi
        sleep 2
    done
}
mtp_relay &
MTP_RELAY_PID=$!
trap 'kill "$MTP_RELAY_PID" 2>/dev/null; tb_vmm_stop' EXIT

# A triple fault reboots the guest with no message: a second kernel banner
# is a crash too (tb_vmm_wait_line, lib/l1.sh).
# shellcheck disable=SC2034 # read by lib/l1.sh
TB_L2_SINGLE_BOOT=1
tb_vmm_wait_line '@@TB-L2 INIT' 120
st=$?
case $st in
0)
    t=$(tb_now_ms)
    tb_pass "l2-reached-init" "$((t - TB_VMM_START_MS)) ms after VMM start"
    ;;
1) tb_fail "l2-reached-init" "no @@TB-L2 INIT within 120 s" ;;
2) tb_fail "l2-reached-init" "the VMM exited before the L2 /init ran" ;;
esac

# Serve the guest's balloon requests until it reports READY.
n=1
while [ "$st" -eq 0 ]; do
    left=$((budget - ($(tb_now_ms) - TB_VMM_START_MS) / 1000))
    [ "$left" -ge 10 ] || left=10
    tb_vmm_wait_line "@@MTP balloon $n |@@TB-L2 READY mtp-python" "$left"
    st=$?
    [ "$st" -eq 0 ] || break
    line=$(tr -d '\r' <"$TB_VMM_SERIAL" | grep -E "@@MTP balloon $n " | head -n 1)
    [ -n "$line" ] || break # READY
    bytes=${line##*fmem_bytes=}
    if out=$(tb_chr resize --balloon "[$bytes,0]" 2>&1); then
        tb_log "balloon request $n: FMem balloon $bytes bytes"
    else
        tb_fail "balloon-request-$n" "resize to [$bytes,0] failed: $out"
    fi
    n=$((n + 1))
done
tb_fact balloon_requests "$((n - 1))"
case $st in
0) tb_pass "l2-reached-handshake" ;;
3) ;; # reported (l2-no-crash), the VMM stopped
1)
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail "l2-reached-handshake" "timed out; serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    ;;
2) tb_fail "l2-reached-handshake" "VMM exited early; stderr tail: $(tail -n 5 "$TB_VMM_STDERR" | tr '\n' '|')" ;;
esac
[ "$st" -eq 0 ] && tb_vmm_alive && tb_vmm_send tb-ack

tb_vmm_wait_exit 60
tb_fact vmm_exit_code "$TB_VMM_RC"
tb_check_eq "vmm-exit-code-0" 0 "$TB_VMM_RC"
l2=$(tb_l2_json "$TB_VMM_SERIAL")
# the guest runs mtp-python/l2.sh also for bench-mtp-python
l2rc=$(tr -d '\r' <"$TB_VMM_SERIAL" | sed -n 's/.*@@TB-L2 END mtp-python rc=\([0-9]*\).*/\1/p' | tail -n 1)
tb_fact l2 "${l2:-null}"
case $l2 in
*'"result":"PASS"'*) tb_pass "l2-checks-passed" ;;
'') tb_fail "l2-checks-passed" "no L2 JSON line in serial.log" ;;
*) tb_fail "l2-checks-passed" "L2 reported failure (see its JSON)" ;;
esac
tb_check_eq "l2-scenario-rc-0" 0 "$l2rc"

echo "--- figures ---"
tr -d '\r' <"$TB_VMM_SERIAL" | grep '@@FIGURE' | sed 's/^/L2| /'
echo "--- guest serial console (tail; full log: serial.log) ---"
tb_show_tail "$TB_VMM_SERIAL" 60 'L2| '
echo "--- VMM stderr (tail) ---"
tb_show_tail "$TB_VMM_STDERR" 20 'VMM| '
echo "---"
tb_finish

# shellcheck shell=sh
# sandbox: our VMM with seccomp (--seccomp true) and Landlock (--landlock)
# boots a guest that uses its disk and RNG (l2.sh), and
#  - every VMM thread runs under a seccomp filter: the process ceiling
#    (with its two no-fork filters) plus its role's own (main, http-server,
#    device-spawner: at least 2), with vCPU, device and console-helper
#    threads also under their creator's (at least 3);
#  - no thread made a forbidden syscall (the VMM log has no SIGSYS report,
#    see tb_sigsys_check, and the VMM exits 0);
#  - after start, the VMM cannot open a path its command line did not
#    name: a VM re-created through the API with a disk outside those paths
#    fails to boot with EACCES, while one naming only the start-up paths
#    boots again (its kernel, initramfs and disk reopened under Landlock).
# Facts: the Landlock ABI the L1 kernel enforces (from the VMM's log) and
# each thread's seccomp mode and filter count.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
trap 'tb_vmm_stop' EXIT

SOCK=$TB_OUT/api.sock
chr() { "$TB_CH_REMOTE" --api-socket "$SOCK" "$@"; }
state() {
    chr info 2>/dev/null | tr -d ' \n' | sed -n 's/.*"state":"\([A-Za-z]*\)".*/\1/p' | grep . || echo none
}
# The disk the command line names, and one in a directory it does not.
IN_DIR=/tmp/tb-sandbox-in
OUT_DIR=/tmp/tb-sandbox-out
rm -rf "$IN_DIR" "$OUT_DIR"
mkdir -p "$IN_DIR" "$OUT_DIR"
for d in "$IN_DIR" "$OUT_DIR"; do
    dd if=/dev/zero of="$d/disk.raw" bs=1M count=4 2>/dev/null
    printf TB-SANDBOX-DISK | dd of="$d/disk.raw" conv=notrunc 2>/dev/null
done
CMDLINE="console=ttyS0 reboot=k panic=-1 tb.run=sandbox"

rm -f "$SOCK"
tb_vmm_start -v --seccomp true --landlock \
    --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" --cmdline "$CMDLINE" \
    --cpus boot=2 --memory size=512M --disk "path=$IN_DIR/disk.raw" \
    --serial tty --console off --api-socket "path=$SOCK"

if tb_wait_line "$TB_VMM_STDERR" 'landlock: ' 20; then
    ll=$(grep -a 'landlock: ' "$TB_VMM_STDERR" | head -n 1 | sed 's/.*landlock: //')
    tb_fact_str landlock "$ll"
    case $ll in
    FullyEnforced*) tb_pass landlock-enforced "$ll" ;;
    *) tb_fail landlock-enforced "$ll" ;;
    esac
else
    tb_fail landlock-enforced "no 'landlock:' line in the VMM log: $(tail -n 3 "$TB_VMM_STDERR" | tr '\n' '|')"
fi

if tb_vmm_wait_line "@@TB-L2 READY $TB_SCENARIO" $((TB_TIMEOUT / 2)); then
    tb_pass guest-ready "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"
    L2_JSON=$(tb_l2_json)
    # Per thread: name, seccomp mode (2 = filter), number of filters.
    table=""
    unfiltered=""
    for t in /proc/"$TB_VMM_PID"/task/*; do
        comm=$(cat "$t/comm" 2>/dev/null)
        [ "${t##*/}" = "$TB_VMM_PID" ] && comm=main
        mode=$(awk '$1 == "Seccomp:" { print $2 }' "$t/status" 2>/dev/null)
        nf=$(awk '$1 == "Seccomp_filters:" { print $2 }' "$t/status" 2>/dev/null)
        table="$table$comm:$mode/$nf "
        case $comm in
        # KVM's own workers (kvm-nx-lpage-recovery) run kernel code only.
        kvm-*) ;;
        *) [ "$mode" = 2 ] || unfiltered="$unfiltered $comm" ;;
        esac
        # The process ceiling plus the thread's own; vCPUs, devices and
        # console helpers also carry their creator's (vmm/src/seccomp.rs).
        case $comm in
        main | http-server | device-spawner)
            tb_check_ge "own-filter-$comm" "$nf" 2
            ;;
        vcpu* | virtio-* | balloon | serial-* | console-in)
            tb_check_ge "own-filter-$comm" "$nf" 3
            ;;
        esac
    done
    tb_fact_str threads "$table"
    tb_check_eq every-thread-filtered "" "$unfiltered"
    case $table in
    *virtio-blk:* ) tb_pass blk-thread-seen ;;
    *) tb_fail blk-thread-seen "$table" ;;
    esac
else
    tb_fail guest-ready "no READY from the guest; serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    tb_vmm_diag
fi

# Landlock after start: stop this VM and create one through the API.
tb_check shutdown chr shutdown
tb_check delete chr delete
config() { # $1 = disk path
    cat <<JSON
{
  "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
  "memory": {"size": 268435456},
  "payload": {"kernel": "$TB_L2_KERNEL", "initramfs": "$TB_L2_INITRD",
              "cmdline": "$CMDLINE tb.second=1"},
  "disks": [{"path": "$1"}],
  "rng": {"src": "/dev/urandom"},
  "serial": {"mode": "Tty"},
  "console": {"mode": "Off"}
}
JSON
}
config "$OUT_DIR/disk.raw" >"$TB_OUT/vm-outside.json"
config "$IN_DIR/disk.raw" >"$TB_OUT/vm-inside.json"
# Creating may or may not look at the file; booting must open it.
if chr create "$TB_OUT/vm-outside.json" >"$TB_OUT/outside.out" 2>&1 &&
    chr boot >>"$TB_OUT/outside.out" 2>&1; then
    tb_fail outside-disk-refused "a VM with $OUT_DIR/disk.raw booted: $(tr '\n' ' ' <"$TB_OUT/outside.out")"
elif grep -q -E 'Permission denied|os error 13' "$TB_OUT/outside.out"; then
    tb_pass outside-disk-refused "$(grep -E 'Permission denied|os error 13' "$TB_OUT/outside.out" | head -n 1)"
else
    tb_fail outside-disk-refused "failed, but not with EACCES: $(tr '\n' ' ' <"$TB_OUT/outside.out" | head -c 300)"
fi
chr delete >/dev/null 2>&1
tb_check create-inside chr create "$TB_OUT/vm-inside.json"
tb_check boot-inside chr boot
tb_check_eq state-inside Running "$(state)"
tb_check shutdown-vmm chr shutdown-vmm
tb_vmm_wait_exit 30
tb_check_eq vmm-exit-code-0 0 "$TB_VMM_RC"
tb_check_eq outside-disk-untouched TB-SANDBOX-DISK "$(head -c 15 "$OUT_DIR/disk.raw")"
tb_check_eq guest-write-reached-disk TB-GUEST-WROTE \
    "$(dd if="$IN_DIR/disk.raw" bs=512 skip=7 count=1 2>/dev/null | head -c 14)"

if [ -n "${L2_JSON:-}" ]; then
    tb_fact l2 "$L2_JSON"
    case $L2_JSON in
    *'"result":"PASS"'*) tb_pass l2-checks-passed ;;
    *) tb_fail l2-checks-passed "$L2_JSON" ;;
    esac
else
    tb_fail l2-checks-passed "no L2 result line"
fi
echo "--- VMM stderr (tail) ---"
tb_show_tail "$TB_VMM_STDERR" 15 'VMM| '
tb_finish

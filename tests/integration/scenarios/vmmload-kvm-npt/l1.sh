# shellcheck shell=sh
# vmmload-kvm-npt: vmmload on standard KVM with nested paging (NPT) in L1,
# the paging mode of every current VMX/SVM host. `--reads auto` must pick
# the guest-TLB-flush re-arm there, and tracking must stay exact. Only
# programs that do not fork run here: a fork makes guest RAM copy-on-write
# in L1 while both VMs run, and QEMU's nested-paging emulation then leaves
# stale translations in the L2s (docs/vmmload.md, "Triple faults under
# NPT"); vmmload-kvm runs the forking programs on L1's shadow MMU.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

[ -x "$TB_VMMLOAD" ] || tb_skip "no vmmload binary at $TB_VMMLOAD"
[ -e /dev/kvm ] || tb_skip "no /dev/kvm"
VLK=$TB_SCENARIO_DIR/../vmmload-kvm
# shellcheck source=../vmmload-kvm/vl-common.sh
. "$VLK/vl-common.sh"
# shellcheck source=../vmmload-kvm/accuracy.sh
. "$VLK/accuracy.sh"

# In the testbed L1 this scenario asks for NPT; on a direct host the CPU's.
npt=$(cat /sys/module/kvm_amd/parameters/npt /sys/module/kvm_intel/parameters/ept 2>/dev/null | head -n 1)
tb_fact_str kvm_tdp "${npt:-unknown}"
case $npt in
Y | 1) ;;
*) tb_skip "KVM runs without EPT/NPT here (npt/ept=${npt:-unknown})" ;;
esac

same echo "$BB" echo hello from a VM with no guest OS
same md5sum "$BB" md5sum "$TB_VMM"
same static-c "$TB_BIN/vl-hello" one two
same threads "$TB_BIN/vl-threads"
for m in alarm-spin faults nested fpstate; do
    same "signals-$m" "$TB_BIN/vl-signals" "$m"
done
dd if=/dev/urandom of=/tmp/vl-50m bs=1M count=50 2>/dev/null
same dyn-md5sum-50MB /usr/bin/md5sum /tmp/vl-50m
rm -f /tmp/vl-50m
tb_check_eq backend-is-standard-kvm standard-kvm "$(field md5sum backend)"
tb_check_ge md5sum-pages-written "$(total md5sum pages_written)" 1
tb_check_ge md5sum-pages-touched "$(total md5sum pages_touched)" 1
vl_accuracy accessed-bits+tlb-flush
tb_finish

# shellcheck shell=sh
# bench-boot (guest side): nothing to do but be measured. Before the
# handshake it reports how many oopses its kernel logged (the console
# loglevel hides them), so the L1 side can tell a boot that went through
# an `Oops: int3` from a clean one; the handshake holds the guest while
# the L1 side reads the VMM's memory, then the guest powers off.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2
echo "@@TB-BENCH KERNEL oops=$(dmesg | grep -c -E 'Oops|BUG:|general protection fault') taint=$(cat /proc/sys/kernel/tainted)"
tb_l2_handshake 60
tb_report

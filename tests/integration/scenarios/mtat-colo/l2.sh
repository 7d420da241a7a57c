# shellcheck shell=sh
# mtat-colo, guest side: one of the co-located VMs (tb.colo_role on the
# kernel command line).
#   lc  memcached (Debian's) on eth0, which the load generator in L1 drives
#   be  gups-hotset managed by tiering.ko + tiering-agent, whose per-tier
#       access counts (tags 0x800d/0x800e) reach the host through the
#       double balloon's guest_report
# Both load demeter_balloon.ko, so the host daemon can move their FMem,
# and run tiering.ko + tiering-agent on their workload (the LC VM's access
# count is part of the daemon's SAC state), then wait for the L1 side's
# tb-ack (the whole run).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

ROLE=""
ADDR=""
HOLD_S=600
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.colo_role=*) ROLE=${arg#*=} ;;
    tb.colo_addr=*) ADDR=${arg#*=} ;;
    tb.colo_hold_s=*) HOLD_S=${arg#*=} ;;
    esac
done
tb_fact_str role "$ROLE"

SYS=/sys/kernel/tiering
tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
tb_check insmod-tiering insmod /tb/kmod/tiering.ko
echo 1 >"$SYS/targets/nr_targets"
# manage PID with tiering.ko and start the agent (AG_PID)
manage() {
    tb_check_eq "$ROLE-agent-add-slot-0" 0 "$("$TB_BIN/tiering-agent" add "$1")"
    tb_bg_start AG "$TB_BIN/tiering-agent" run
    sleep 1
    tb_check "$ROLE-agent-running" kill -0 "$AG_PID"
}
case $ROLE in
lc)
    [ -n "$ADDR" ] || tb_fail lc-address "no tb.colo_addr on the command line"
    dev=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
    tb_check lc-has-nic test -n "$dev"
    ip addr add "$ADDR/24" dev "$dev" && ip link set "$dev" up && ip link set lo up
    tb_check lc-nic-up test "$(cat "/sys/class/net/$dev/operstate" 2>/dev/null)" != down
    tb_bg_start MC memcached -u root -l 0.0.0.0 -p 11211 -t 1 -m 32 -c 256
    sleep 0.5
    tb_check lc-memcached-running kill -0 "$MC_PID"
    manage "$MC_PID"
    ;;
be)
    # small enough that the guest keeps free FMem to give to its balloon
    tb_bg_start GUPS "$TB_BIN/gups-hotset" -s 48 -H 8 -t "$HOLD_S" -i 5000
    manage "$GUPS_PID"
    ;;
*) tb_fail role "tb.colo_role must be lc or be, got '$ROLE'" ;;
esac

tb_l2_handshake "$HOLD_S"
tb_check_eq l1-acked ok "$TB_ACK"
echo "tiering stats: $(tr '\n' ' ' <"$SYS/stats")"
fs=$(awk '$1 == "fmem_samples" { print $2 }' "$SYS/stats")
ss=$(awk '$1 == "smem_samples" { print $2 }' "$SYS/stats")
tb_fact fmem_samples "${fs:-null}"
tb_fact smem_samples "${ss:-null}"
# GUPS touches its whole region all the time; memcached at 20 requests/s
# may not be sampled young at all, so only the BE VMs must show samples.
[ "$ROLE" != be ] || tb_check_ge be-tier-samples-positive $((${fs:-0} + ${ss:-0})) 1
tb_bg_stop "$AG_PID"
case $ROLE in
lc) tb_bg_stop "$MC_PID" ;;
be) tb_bg_stop "$GUPS_PID" ;;
esac
tb_finish

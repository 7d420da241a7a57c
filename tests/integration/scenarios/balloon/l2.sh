# shellcheck shell=sh
# balloon (guest side): loads a balloon driver and answers the L1 side's
# commands on the console, so the host can compare what it asked for with
# what the guest's NUMA nodes show.
#
# tb.balloon=demeter (default): our demeter_balloon.ko, one balloon per tier.
# tb.balloon=stock: Linux's own virtio_balloon (the single-balloon baseline).
#
# Commands (one per line on the console), answers prefixed "@@BAL":
#   m TAG        "@@BAL M TAG n0=<kB> n1=<kB> bf=<pages> bs=<pages>":
#                free memory of node 0/1 and the driver's balloon sizes
#   show         "@@BAL SHOW node=N cpus=.. memtotal_kb=.. distance=.. tier=.."
#                per node: the topology the guest sees
#   touch N:MIB  make MIB MiB of node N's free memory host-resident (touch
#                it with tb-numa hold, then free it): "@@BAL TOUCHED ..."
#   churn MIB    start tb-churn MIB (a memory-hungry program) in the background
#   unchurn      stop it; "@@BAL CHURN rc=<exit> <its summary>"
#   quit         report and end (the guest powers off)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

driver=demeter
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in tb.balloon=*) driver=${arg#tb.balloon=} ;; esac
done
tb_fact_str driver "$driver"
SYS=/sys/kernel/demeter_balloon

# Free memory of node $1 in kB: buddy free pages plus the pages parked on
# the per-CPU lists (MemFree leaves those out, and 6.12 lets the lists grow
# to tens of MiB right after a large free, such as a deflate).
node_free_kb() {
    awk -v n="$1" '
        $1 == "Node" { node = $2 + 0 }
        node == n && $1 == "pages" && $2 == "free" { kb += $3 * 4 }
        node == n && $1 == "count:" { kb += $2 * 4 }
        END { print kb + 0 }' /proc/zoneinfo
}
bal_pages() { cat "$SYS/$1/size_pages" 2>/dev/null || echo 0; }

# Kernel oopses and warnings (the emulated CPU causes a few at boot: only
# new ones count).
oops_count() { dmesg | grep -ciE "Oops|BUG:|WARNING:|general protection"; }
oops_at_start=$(oops_count)
tb_check virtio-mmio-device sh -c 'ls /sys/bus/virtio/devices/ | grep -q .'
if [ "$driver" = stock ]; then
    tb_check load-virtio_balloon modprobe virtio_balloon
    tb_check stock-driver-bound sh -c 'ls -l /sys/bus/virtio/drivers/virtio_balloon/ | grep -q virtio'
else
    tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
    tb_check_eq hetero-mem-negotiated 1 "$(cat $SYS/hetero_mem 2>/dev/null)"
    tb_check_eq stats-vq-negotiated 1 "$(cat $SYS/stats_vq 2>/dev/null)"
    tb_check_eq deflate-on-oom-negotiated 1 "$(cat $SYS/deflate_on_oom 2>/dev/null)"
    tb_check_eq fmem-is-node0 0 "$(cat $SYS/fmem/node 2>/dev/null)"
    tb_check_eq smem-is-node1 1 "$(cat $SYS/smem/node 2>/dev/null)"
fi
echo "@@BAL READY"

churn_pid=""
while read -r cmd arg; do
    case $cmd in
    m)
        echo "@@BAL M $arg n0=$(node_free_kb 0) n1=$(node_free_kb 1) bf=$(bal_pages fmem) bs=$(bal_pages smem)"
        ;;
    show)
        for n in 0 1; do
            echo "@@BAL SHOW node=$n cpus=$(tb_node_cpulist $n) memtotal_kb=$(tb_node_memtotal_kb $n)" \
                "distance=$(tb_node_distance $n | tr ' ' ,) tier=$(tb_memory_tier_of $n)"
        done
        ;;
    touch)
        rm -f /tmp/hold.out
        "$TB_BIN/tb-numa" hold "${arg%:*}" "${arg#*:}" >/tmp/hold.out 2>&1 &
        hold_pid=$!
        i=0
        while [ ! -s /tmp/hold.out ] && [ "$i" -lt 600 ] && kill -0 "$hold_pid" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -TERM "$hold_pid" 2>/dev/null
        wait "$hold_pid" 2>/dev/null
        echo "@@BAL TOUCHED $arg $(head -n 1 /tmp/hold.out)"
        ;;
    churn)
        "$TB_BIN/tb-churn" "$arg" >/tmp/churn.out 2>&1 &
        churn_pid=$!
        echo "@@BAL CHURNING pid=$churn_pid"
        ;;
    unchurn)
        if [ -n "$churn_pid" ]; then
            kill -TERM "$churn_pid" 2>/dev/null
            wait "$churn_pid"
            rc=$?
            echo "@@BAL CHURN rc=$rc $(tail -n 1 /tmp/churn.out)"
            tb_check_eq churn-survived-and-verified 0 "$rc"
            churn_pid=""
        fi
        ;;
    quit) break ;;
    esac
done
tb_check_eq no-new-kernel-oops-or-warning "$oops_at_start" "$(oops_count)"
tb_fact oom_kills "$(dmesg | grep -c 'Killed process')"
if [ "$driver" = demeter ]; then
    tb_check rmmod-demeter_balloon rmmod demeter_balloon
fi
tb_report

# shellcheck shell=sh
# resize-zone (guest side): Linux's stock virtio_mem driver with hot-plugged
# memory onlined movable (so it can be unplugged again), and our
# demeter_balloon.ko; answers the L1 side's commands on the console.
#
# Commands (one per line), answers prefixed "@@RZ":
#   m TAG        "@@RZ M TAG t0=<kB> t1=<kB> f0=<kB> f1=<kB> bs=<pages> c1=<cpus>":
#                MemTotal and free memory of nodes 0 and 1 (from
#                /sys/devices/system/node/nodeN/meminfo), the SMem balloon's
#                size, node 1's CPU list ("none" when empty)
#   touch N:MIB  make MIB MiB of node N host-resident (tb-numa hold, then
#                free it): "@@RZ TOUCHED N:MIB <tb-numa's line>"
#   quit         final checks and report (the guest powers off)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

node_kb() { # NODE FIELD: a kB figure of the node's meminfo
    awk -v f="$2:" '$3 == f { print $4 }' "/sys/devices/system/node/node$1/meminfo"
}
oops_count() { dmesg | grep -ciE "Oops|BUG:|WARNING:|general protection"; }
oops_at_start=$(oops_count)

# Hot-plugged memory goes to ZONE_MOVABLE, so unplugging can migrate
# whatever the guest put there.
tb_check online-movable sh -c 'echo online_movable >/sys/devices/system/memory/auto_online_blocks'
tb_check load-virtio_mem modprobe virtio_mem
tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
bound() { ls /sys/bus/virtio/drivers/virtio_mem/ 2>/dev/null | grep -c '^virtio'; }
two_bound() { [ "$(bound)" -ge 2 ]; }
tb_wait_until 10 two_bound
tb_check_eq virtio-mem-devices-bound 2 "$(bound)"
tb_check_eq hetero-mem-negotiated 1 "$(cat /sys/kernel/demeter_balloon/hetero_mem 2>/dev/null)"
dmesg | grep -i virtio_mem >/tmp/virtio_mem.dmesg
tb_show_tail /tmp/virtio_mem.dmesg 20 "dmesg: "
echo "@@RZ READY"

while read -r cmd arg; do
    case $cmd in
    m)
        c1=$(cat /sys/devices/system/node/node1/cpulist 2>/dev/null)
        echo "@@RZ M $arg t0=$(node_kb 0 MemTotal) t1=$(node_kb 1 MemTotal)" \
            "f0=$(node_kb 0 MemFree) f1=$(node_kb 1 MemFree)" \
            "bs=$(cat /sys/kernel/demeter_balloon/smem/size_pages 2>/dev/null || echo 0)" \
            "c1=${c1:-none}"
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
        echo "@@RZ TOUCHED $arg $(head -n 1 /tmp/hold.out)"
        ;;
    quit) break ;;
    esac
done
dmesg | grep -i virtio_mem >/tmp/virtio_mem.dmesg
tb_show_tail /tmp/virtio_mem.dmesg 20 "dmesg: "
tb_check_eq no-new-kernel-oops-or-warning "$oops_at_start" "$(oops_count)"
tb_report

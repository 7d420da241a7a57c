# shellcheck shell=sh
# pci-hotplug (guest side): keeps I/O running on the boot disk while the
# host hot-plugs a disk and a NIC and takes them away again; answers
#   add N   wait for the disk with serial hpdN and the NIC with MAC
#           52:54:00:30:00:NN, check the disk's marker, write a 1 MiB
#           pattern with fsync and read it back after a cache drop, ping the
#           host end of the NIC's TAP
#   gone N  the disk and the NIC have left (block device, net device, PCI)
#   full N  wait (bounded) until N virtio block devices are there; count them
#   quit    stop the background I/O and report
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

MIB=1048576
oops_count() { dmesg | grep -ciE "Oops|BUG:|WARNING:|general protection"; }
oops_at_start=$(oops_count)

lspci -n >/tmp/lspci.txt 2>&1
tb_show_tail /tmp/lspci.txt 20 "lspci: "
tb_check acpiphp-slots-registered sh -c 'ls /sys/bus/pci/slots/ | grep -q .'
tb_fact pci_slots "$(ls /sys/bus/pci/slots/ 2>/dev/null | wc -l)"

# Background I/O on the boot disk: 256 KiB rounds at rotating offsets,
# written with fsync and read back through O_DIRECT, every round checked.
boot_disk=$(basename "$(ls -d /sys/block/vd* 2>/dev/null | head -n 1)")
io_loop() {
    n=0
    bad=0
    while [ ! -e /tmp/io-stop ]; do
        off=$((n % 16))
        head -c 262144 /dev/urandom >/tmp/io-block
        want=$(sha256sum </tmp/io-block | cut -d ' ' -f 1)
        if dd if=/tmp/io-block of="/dev/$boot_disk" bs=256k seek=$((16 + off)) conv=fsync 2>/dev/null; then
            got=$(dd if="/dev/$boot_disk" bs=256k skip=$((16 + off)) count=1 iflag=direct 2>/dev/null |
                sha256sum | cut -d ' ' -f 1)
            [ "$got" = "$want" ] || bad=$((bad + 1))
        else
            bad=$((bad + 1))
        fi
        n=$((n + 1))
        echo "$n $bad" >/tmp/io-count
    done
}
tb_bg_start IO io_loop

disk_with_serial() { # SERIAL: the vdX whose serial is SERIAL
    for d in /sys/block/vd*; do
        [ "$(cat "$d/serial" 2>/dev/null)" = "$1" ] && basename "$d" && return 0
    done
    return 1
}
nic_with_mac() {
    f=$(grep -l "$1" /sys/class/net/*/address 2>/dev/null | head -n 1)
    [ -n "$f" ] && basename "$(dirname "$f")"
}
wait_for() { # SECS CMD...: poll CMD until it succeeds
    t=$1
    shift
    i=0
    while [ "$i" -lt $((t * 10)) ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

added() { # N
    serial=hpd$1
    mac=52:54:00:30:00:$(printf %02x "$1")
    t0=$(tb_now_ms)
    wait_for 60 disk_with_serial "$serial"
    wait_for 60 nic_with_mac "$mac"
    seen_ms=$(($(tb_now_ms) - t0))
    disk=$(disk_with_serial "$serial")
    nic=$(nic_with_mac "$mac")
    marker=none
    sha=none
    ping=none
    if [ -n "$disk" ]; then
        marker=$(dd if="/dev/$disk" bs=512 count=1 2>/dev/null | head -c 9)
        yes "TB-HP-$1" | head -c $MIB >/tmp/hp-pattern
        if dd if=/tmp/hp-pattern of="/dev/$disk" bs=64k seek=16 conv=fsync 2>/dev/null; then
            echo 3 >/proc/sys/vm/drop_caches
            sha=$(dd if="/dev/$disk" bs=64k skip=16 count=16 2>/dev/null | sha256sum | cut -d ' ' -f 1)
        fi
    fi
    if [ -n "$nic" ]; then
        ip link set "$nic" up && ip addr add 192.168.30.2/24 dev "$nic"
        if ping -c 2 -w 30 -q 192.168.30.1 >/dev/null 2>&1; then ping=ok; else ping=fail; fi
    fi
    # "end" last: the host reads the console while it is written.
    echo "@@HP ADDED $1 disk=${disk:-none} nic=${nic:-none} seen_ms=$seen_ms marker=$marker sha=$sha ping=$ping end"
}

gone() { # N
    serial=hpd$1
    mac=52:54:00:30:00:$(printf %02x "$1")
    disk=$(disk_with_serial "$serial")
    nic=$(nic_with_mac "$mac")
    echo "@@HP GONE $1 disk=${disk:-none} nic=${nic:-none} functions=$(ls /sys/bus/pci/devices | wc -l) end"
}

echo "@@HP READY"
while read -r cmd arg; do
    case $cmd in
    add) added "$arg" ;;
    gone) gone "$arg" ;;
    full) # ARG disks expected: wait (bounded) for the guest to probe them all
        count_disks() { ls -d /sys/block/vd* 2>/dev/null | wc -l; }
        enough_disks() { [ "$(count_disks)" -ge "$arg" ]; }
        wait_for 120 enough_disks
        echo "@@HP FULL disks=$(count_disks) end"
        ;;
    quit) break ;;
    esac
done
touch /tmp/io-stop
wait "$IO_PID" 2>/dev/null
read -r io_rounds io_bad </tmp/io-count || true
tb_fact io_rounds "${io_rounds:-0}"
tb_check_ge background-io-rounds "${io_rounds:-0}" 20
tb_check_eq background-io-errors 0 "${io_bad:-x}"
dmesg | grep -iE "acpiphp|pci 0000:00:[0-9a-f]{2}" | tail -n 20 >/tmp/hp-dmesg.txt
tb_show_tail /tmp/hp-dmesg.txt 20 "dmesg: "
tb_check_eq no-new-kernel-oops-or-warning "$oops_at_start" "$(oops_count)"
tb_report

# shellcheck shell=sh
# virtio-pci (guest side): the stock kernel's view of our PCI transport.
# Then answers "b TAG" with the double balloon's sizes until "quit".
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

MIB=1048576
oops_count() { dmesg | grep -ciE "Oops|BUG:|WARNING:|general protection"; }
oops_at_start=$(oops_count)

# --- enumeration ------------------------------------------------------
lspci -n >/tmp/lspci.txt 2>&1
tb_show_tail /tmp/lspci.txt 20 "lspci: "
# "BB:DD.F CLASS: VENDOR:DEVICE (rev RR)"; modern virtio IDs 0x1040 + type.
has_fn() { grep -q " $1: $2" /tmp/lspci.txt; }
tb_check lspci-host-bridge has_fn 0600 8086:0d57
tb_check lspci-virtio-net has_fn 0200 1af4:1041
tb_check lspci-virtio-blk has_fn 0180 1af4:1042
tb_check lspci-virtio-rng has_fn ff00 1af4:1044
tb_check lspci-virtio-balloon has_fn ff00 1af4:1045
tb_check_eq virtio-pci-bound 4 "$(ls -d /sys/bus/pci/drivers/virtio-pci/0000:* 2>/dev/null | wc -l)"
tb_check_eq virtio-devices 4 "$(ls /sys/bus/virtio/devices/ | wc -l)"
# Linux uses ECAM only if ACPI reserves it (our MBRD device); until then it
# falls back to configuration mechanism #1 (the 0xcf8 ports).
tb_check ecam-reserved-by-acpi sh -c 'dmesg | grep -q "ECAM .* reserved as ACPI motherboard resource"'

# --- entropy ------------------------------------------------------------
tb_check hwrng-is-virtio grep -q virtio_rng /sys/class/misc/hw_random/rng_current
tb_check_eq hwrng-read 64 "$(dd if=/dev/hwrng bs=64 count=1 2>/dev/null | wc -c)"

# --- block --------------------------------------------------------------
sector() { dd if="/dev/$1" bs=512 skip="$2" count=1 2>/dev/null | head -c "$3"; }
disk=$(basename "$(ls -d /sys/block/vd* 2>/dev/null | head -n 1)")
tb_check_eq disk-sectors 16384 "$(cat "/sys/block/$disk/size" 2>/dev/null)"
tb_check_eq disk-read-first-sector TB-PCI-HEAD "$(sector "$disk" 0 11)"
tb_check_eq disk-read-last-sector TB-PCI-TAIL "$(sector "$disk" 16383 11)"
yes TB-PCI-PATTERN | head -c $MIB >/tmp/pattern
want=$(sha256sum </tmp/pattern | cut -d ' ' -f 1)
if dd if=/tmp/pattern of="/dev/$disk" bs=64k seek=32 conv=fsync 2>/dev/null; then
    echo 3 >/proc/sys/vm/drop_caches
    tb_check_eq disk-pattern-read-back "$want" \
        "$(dd if="/dev/$disk" bs=64k skip=32 count=16 2>/dev/null | sha256sum | cut -d ' ' -f 1)"
else
    tb_fail disk-pattern-read-back "dd to /dev/$disk failed"
fi

# --- network ------------------------------------------------------------
nic=$(grep -l '12:34:56:78:9a:bc' /sys/class/net/*/address 2>/dev/null | head -n 1)
nic=$(basename "$(dirname "$nic")")
tb_check nic-with-configured-mac test -n "$nic"
ip link set "$nic" up && ip addr add 192.168.20.2/24 dev "$nic"
tb_check ping-host-tap ping -c 3 -w 60 -q 192.168.20.10

# --- multiqueue (2 vCPUs: disk num_queues=2, NIC num_queues=4) ---------
tb_check_eq blk-mq-hw-queues 2 "$(ls "/sys/block/$disk/mq" 2>/dev/null | wc -l)"
tb_check_eq net-queues "rx-0 rx-1 tx-0 tx-1" "$(ls "/sys/class/net/$nic/queues" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"

# --- interrupts ---------------------------------------------------------
# Every virtio vector is an MSI-X interrupt ("PCI-MSIX-<bdf>" or "PCI-MSI"
# by kernel version) and the data queues' vectors fired.
grep virtio /proc/interrupts >/tmp/irqs.txt
tb_show_tail /tmp/irqs.txt 20 "irq: "
tb_check_eq no-virtio-irq-without-msi 0 "$(grep -vc PCI-MSI /tmp/irqs.txt)"
# rng, blk and net: a configuration vector each, plus one per queue.
tb_fact msix_virtio_vectors "$(grep -c PCI-MSI /tmp/irqs.txt)"
tb_check_eq msix-config-vectors 3 "$(grep -cE 'virtio[0-9]+-config' /tmp/irqs.txt)"
tb_check_ge msix-virtio-vectors "$(grep -c PCI-MSI /tmp/irqs.txt)" 7
fired() { # NAME-PATTERN: sum of the counts of matching vectors
    grep -E "$1" /tmp/irqs.txt | awk '{ for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { print n + 0 }'
}
tb_check_ge msix-blk-request-interrupts "$(fired 'virtio[0-9]+-req')" 1
tb_check_ge msix-net-input-interrupts "$(fired 'virtio[0-9]+-input')" 1

# --- the double balloon -------------------------------------------------
SYS=/sys/kernel/demeter_balloon
tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
tb_check_eq hetero-mem-negotiated 1 "$(cat $SYS/hetero_mem 2>/dev/null)"
bal_pages() { cat "$SYS/$1/size_pages" 2>/dev/null || echo 0; }
echo "@@VPCI READY"
while read -r cmd arg; do
    case $cmd in
    b) echo "@@VPCI B $arg bf=$(bal_pages fmem) bs=$(bal_pages smem)" ;;
    quit) break ;;
    esac
done
grep -E 'virtio[0-9]+-(deflate|inflate|stats|config)' /proc/interrupts >/tmp/bal-irqs.txt
tb_show_tail /tmp/bal-irqs.txt 10 "irq: "
tb_check_eq no-new-kernel-oops-or-warning "$oops_at_start" "$(oops_count)"
tb_check rmmod-demeter_balloon rmmod demeter_balloon
tb_report

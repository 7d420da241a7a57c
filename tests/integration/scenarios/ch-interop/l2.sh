# shellcheck shell=sh
# ch-interop (guest side): the same guest under our VMM and under upstream
# Cloud Hypervisor. Loads Linux's stock virtio_balloon (the VM has a
# balloon that the L1 side resizes), lists its virtio devices (transport
# and device ids, for the L1 side's facts), then shows progress ("@@TB-TICK
# n" every 200 ms, for pause/resume) and powers off on the ACPI power
# button (tb-powerbtn), as api-lifecycle's guest does. It never ends on
# its own: the power button, vm.shutdown or the VMM ends it.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

tb_check virtio-balloon-module modprobe virtio_balloon
tb_check virtio-balloon-bound sh -c 'ls -d /sys/bus/virtio/drivers/virtio_balloon/virtio* >/dev/null 2>&1'
tb_check power-button-device sh -c 'grep -qs PNP0C0C /sys/bus/acpi/devices/*/hid'
devs=""
for d in /sys/bus/virtio/devices/virtio*; do
    [ -e "$d" ] || continue
    t=mmio
    case $(readlink -f "$d") in */pci*) t=pci ;; esac
    devs="$devs $t:$(cat "$d/device" 2>/dev/null)"
done
echo "@@TB-INTEROP VIRTIO${devs:- none}"
tb_check_ge virtio-devices "$(echo "$devs" | wc -w)" 4
tb_report

tb-powerbtn 600 &
i=0
while :; do
    i=$((i + 1))
    echo "@@TB-TICK $i"
    sleep 0.2
done

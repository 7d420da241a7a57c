# shellcheck shell=sh
# api-lifecycle (guest side): a guest that shows its progress and reacts
# to the ACPI power button the way a distribution does.
#
# It prints "@@TB-TICK n" every 200 ms (the L1 side checks that no tick
# appears while the VM is paused and that ticks resume after), and runs
# tb-powerbtn, which powers the guest off on KEY_POWER. The script never
# ends on its own: the power button (or the VMM) ends the guest.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

tb_check acpi-button-driver test -d /sys/bus/acpi/drivers/button
tb_check power-button-device sh -c 'grep -qs PNP0C0C /sys/bus/acpi/devices/*/hid'
tb_check evdev-present sh -c 'ls /dev/input/event* >/dev/null 2>&1'
tb_report

tb-powerbtn 600 &
i=0
while :; do
    i=$((i + 1))
    echo "@@TB-TICK $i"
    sleep 0.2
done

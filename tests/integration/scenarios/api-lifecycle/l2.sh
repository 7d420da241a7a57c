# shellcheck shell=sh
# api-lifecycle (guest side): a guest that shows its progress and reacts
# to the ACPI power button the way a distribution does.
#
# It answers console lines "tb-echo WORD" with "@@TB-ECHO WORD", prints
# "@@TB-TICK n" every 200 ms (the L1 side checks that no tick
# appears while the VM is paused and that ticks resume after), and runs
# tb-powerbtn, which powers the guest off on KEY_POWER. The script never
# ends on its own: the power button (or the VMM) ends the guest.
#
# In run 1 (tb.api=run1) it first checks the virtio devices the VM was
# created with (upstream's vm.create example shape): the disk (size, the
# L1-written pattern at both ends, a write that must survive a cache drop
# and reach the host file), the read-only disk (found by its GET_ID serial
# "tb-ro"; writes refused), the NIC (the configured MAC; ping and an HTTP
# download of a 1 MiB blob from the host end of the TAP, 192.168.10.10,
# checked against the sha256 L1 passed as tb.blob=).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

tb_check acpi-button-driver test -d /sys/bus/acpi/drivers/button
tb_check power-button-device sh -c 'grep -qs PNP0C0C /sys/bus/acpi/devices/*/hid'
tb_check evdev-present sh -c 'ls /dev/input/event* >/dev/null 2>&1'

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p" | tail -n 1; }

# Console input: "tb-echo WORD" comes back as "@@TB-ECHO WORD" (L1 checks
# that host input reaches the guest, before and after a reboot). A
# background list's stdin is /dev/null unless redirected: fd 3 is the
# console.
exec 3<&0
while read -r line <&3; do
    case $line in "tb-echo "*) echo "@@TB-ECHO ${line#tb-echo }" ;; esac
done &
# sector N of /dev/$1, first $2 bytes
sector() { dd if="/dev/$1" bs=512 skip="$2" count=1 2>/dev/null | head -c "$3"; }

check_disks() {
    rw=
    ro=
    for d in /sys/block/vd*; do
        [ -e "$d" ] || continue
        case $(cat "$d/serial" 2>/dev/null) in
        tb-ro) ro=${d##*/} ;;
        *) rw=${d##*/} ;;
        esac
    done
    tb_log "disks: rw=$rw ro=$ro ($(ls /sys/block | tr '\n' ' '))"
    if [ -z "$rw" ] || [ -z "$ro" ]; then
        tb_fail virtio-blk-disks "want two disks, one with serial tb-ro; got rw='$rw' ro='$ro'"
        return
    fi
    tb_pass virtio-blk-get-id-serial "$ro"
    tb_check_eq disk-sectors 16384 "$(cat "/sys/block/$rw/size")"
    tb_check_eq disk-not-ro 0 "$(cat "/sys/block/$rw/ro")"
    tb_check_eq disk-read-first-sector TB-DISK-HEAD "$(sector "$rw" 0 12)"
    tb_check_eq disk-read-last-sector TB-DISK-TAIL "$(sector "$rw" 16383 12)"
    # A whole sector (conv=sync pads), then fsync: the device sees OUT + FLUSH.
    if printf TB-GUEST-WROTE | dd of="/dev/$rw" bs=512 seek=100 conv=sync,fsync 2>/dev/null; then
        tb_pass disk-write
    else
        tb_fail disk-write "dd to /dev/$rw failed"
    fi
    echo 3 >/proc/sys/vm/drop_caches
    tb_check_eq disk-write-read-back TB-GUEST-WROTE "$(sector "$rw" 100 14)"
    tb_check_eq ro-disk-sectors 8192 "$(cat "/sys/block/$ro/size")"
    tb_check_eq ro-disk-flag 1 "$(cat "/sys/block/$ro/ro")"
    tb_check_eq ro-disk-read TB-RO-DISK "$(sector "$ro" 0 10)"
    if dd if=/dev/zero of="/dev/$ro" bs=512 count=1 conv=fsync 2>/dev/null; then
        tb_fail ro-disk-write-refused "a write to /dev/$ro succeeded"
    else
        tb_pass ro-disk-write-refused
    fi
}

check_net() {
    nic=
    for n in /sys/class/net/*; do
        [ "$(cat "$n/address" 2>/dev/null)" = 12:34:56:78:90:01 ] && nic=${n##*/}
    done
    if [ -z "$nic" ]; then
        tb_fail nic-mac "no interface with MAC 12:34:56:78:90:01: $(cat /sys/class/net/*/address | tr '\n' ' ')"
        return
    fi
    tb_pass nic-mac "$nic"
    ip link set "$nic" up && ip addr add 192.168.10.2/24 dev "$nic"
    tb_check ping-host-tap ping -c 3 -w 60 -q 192.168.10.10
    want=$(arg tb.blob)
    if timeout 120 wget -q -O /tmp/blob http://192.168.10.10:8080/blob; then
        tb_check_eq http-blob-sha256 "$want" "$(sha256sum /tmp/blob | cut -d ' ' -f 1)"
    else
        tb_fail http-blob-sha256 "wget from 192.168.10.10:8080 failed"
    fi
    rm -f /tmp/blob
}

# Rounds of disk and network I/O for L1's pause/resume cycles: write
# 1 MiB of round k's pattern 2 MiB into the disk, fsync, drop the page
# cache, read it back and compare checksums ("@@TB-IO k ok|bad SHA");
# fetch io-stop from the host and, once it exists, report the last round
# ("@@TB-IO DONE k SHA") and stop.
io_loop() {
    k=0
    last=
    while :; do
        k=$((k + 1))
        yes "tb-io-round-$k" | head -c 1048576 >/tmp/io.pat
        want=$(sha256sum </tmp/io.pat | cut -d ' ' -f 1)
        dd if=/tmp/io.pat of="/dev/$rw" bs=64k seek=32 conv=fsync 2>/dev/null
        echo 3 >/proc/sys/vm/drop_caches
        got=$(dd if="/dev/$rw" bs=64k skip=32 count=16 2>/dev/null | sha256sum | cut -d ' ' -f 1)
        if [ "$got" = "$want" ]; then
            echo "@@TB-IO $k ok $want"
            last=$want
        else
            echo "@@TB-IO $k bad want $want got $got"
        fi
        if wget -q -O /dev/null http://192.168.10.10:8080/io-stop 2>/dev/null; then
            echo "@@TB-IO DONE $k $last"
            return
        fi
    done
}

if [ "$(arg tb.api)" = run1 ]; then
    check_disks
    check_net
    # The balloon (statistics on) gives L1 a device with a timer.
    tb_check virtio-balloon-driver modprobe virtio_balloon
fi
tb_report
[ "$(arg tb.api)" = run1 ] && [ -n "$rw" ] && io_loop &

tb-powerbtn 600 &
i=0
while :; do
    i=$((i + 1))
    echo "@@TB-TICK $i"
    sleep 0.2
done

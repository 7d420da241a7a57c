# shellcheck shell=sh
# sandbox (guest side): use the devices whose threads run under their own
# seccomp filters and inside the VMM's Landlock domain: read the disk's
# L1-written marker, write a sector and read it back after a cache drop
# (virtio-blk thread: pread/pwrite/fdatasync on a file opened before
# Landlock), and read the hardware RNG (virtio-rng thread). Then hold the
# VM up for the L1 side's checks (handshake).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

sector() { dd if=/dev/vda bs=512 skip="$1" count=1 2>/dev/null | head -c "$2"; }
if [ -b /dev/vda ]; then
    tb_check_eq disk-read-marker TB-SANDBOX-DISK "$(sector 0 15)"
    if printf TB-GUEST-WROTE | dd of=/dev/vda bs=512 seek=7 conv=sync,fsync 2>/dev/null; then
        tb_pass disk-write
    else
        tb_fail disk-write "dd to /dev/vda failed"
    fi
    echo 3 >/proc/sys/vm/drop_caches
    tb_check_eq disk-write-read-back TB-GUEST-WROTE "$(sector 7 14)"
else
    tb_fail disk-present "no /dev/vda ($(ls /sys/block | tr '\n' ' '))"
fi
rng=$(cat /sys/devices/virtual/misc/hw_random/rng_current 2>/dev/null)
tb_fact_str rng_current "$rng"
case $rng in
virtio_rng*) tb_pass hwrng-is-virtio "$rng" ;;
*) tb_fail hwrng-is-virtio "rng_current '$rng'" ;;
esac
n=$(dd if=/dev/hwrng bs=64 count=1 2>/dev/null | wc -c)
tb_check_eq hwrng-read-64-bytes 64 "$n"

tb_report
tb_l2_handshake
exit "$TB_RC"

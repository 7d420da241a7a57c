# shellcheck shell=sh
# bench-devices (guest side): tb.devb=boot only says it booted;
# tb.devb=io runs devbench on the first virtio disk (sequential and random
# 4 KiB reads and writes, tb.secs seconds each, one thread per vCPU) and
# TCP to the host end of the TAP (tb.netmb MiB over one stream per vCPU,
# to ports 5201, 5202, ... where L1 listens), and prints one
# "@@DEVB RESULT ..." line with the raw counts. It powers off by itself
# (upstream's VMM takes no console input here).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^tb\.$1=//p" | tail -n 1; }
mode=$(arg devb)
secs=$(arg secs)
mb=$(arg netmb)
streams=$(grep -c '^processor' /proc/cpuinfo)

if [ "$mode" != io ]; then
    echo "@@DEVB BOOTED"
    tb_pass booted
    tb_report
    exit 0
fi

disk=$(basename "$(ls -d /sys/block/vd* 2>/dev/null | head -n 1)")
hwq=$(ls "/sys/block/$disk/mq" 2>/dev/null | wc -l)
nic=$(grep -l '12:34:56:78:9a:d0' /sys/class/net/*/address 2>/dev/null | head -n 1)
nic=$(basename "$(dirname "$nic")")
rxq=$(ls -d "/sys/class/net/$nic/queues/rx-"* 2>/dev/null | wc -l)
result="@@DEVB RESULT hwq=$hwq rxq=$rxq streams=$streams"
for m in seqread seqwrite randread randwrite; do
    out=$(/tb/bin/devbench disk "/dev/$disk" "$m" "$secs" "$streams" 2>&1)
    tb_check "disk-$m" test -n "$(echo "$out" | sed -n 's/^ops=\([0-9]*\) .*/\1/p')" || tb_log "$m: $out"
    result="$result ${m}_ops=$(echo "$out" | sed -n 's/^ops=\([0-9]*\) .*/\1/p') ${m}_ms=$(echo "$out" | sed -n 's/.* ms=\([0-9]*\)$/\1/p')"
done

ip link set "$nic" up && ip addr add 192.168.30.2/24 dev "$nic"
tb_check ping-host-tap ping -c 1 -w 60 -q 192.168.30.1
bytes=$((mb * 1048576 / streams))
out=$(/tb/bin/devbench tcp 192.168.30.1 5201 "$bytes" "$streams" 2>&1)
tb_check tcp test -n "$(echo "$out" | sed -n 's/^bytes=\([0-9]*\) .*/\1/p')" || tb_log "tcp: $out"
result="$result tcp_bytes=$(echo "$out" | sed -n 's/^bytes=\([0-9]*\) .*/\1/p') tcp_ms=$(echo "$out" | sed -n 's/.* ms=\([0-9]*\)$/\1/p')"
echo "$result"
tb_report

# shellcheck shell=sh
# virtio-pci: every virtio device (block, net, rng, the double balloon) on
# the PCI transport (--virtio-transport pci), driven by the stock guest
# kernel's virtio_pci driver with MSI-X.
#
# Guest side (l2.sh): lspci lists the virtio functions with their modern
# IDs, virtio_pci binds them, the vectors are PCI-MSI(X) interrupts that
# fire, the disk reads its markers and a 1 MiB pattern written, flushed and
# read back after a cache drop has the right checksum, the NIC pings the
# host end of its TAP, /dev/hwrng gives bytes. Multiqueue: the disk has 2
# queues and the NIC 2 pairs (one per vCPU), so the guest sees 2 blk-mq
# hardware queues and rx-0/rx-1, tx-0/tx-1.
# Host side: the double balloon inflates on both tiers through vm.resize
# and the guest's driver agrees page for page; device ids in vm.counters
# are those of virtio-mmio runs and each device interrupted the guest; the
# guest set the NIC's queue pairs through the control queue
# (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, none refused); the
# pattern reached the disk file; the VMM exits 0.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

DISK=$TB_OUT/disk.img
dd if=/dev/zero of="$DISK" bs=1M count=8 2>/dev/null
printf TB-PCI-HEAD | dd of="$DISK" conv=notrunc 2>/dev/null
printf TB-PCI-TAIL | dd of="$DISK" bs=512 seek=16383 conv=notrunc 2>/dev/null
# The guest writes this pattern at 2 MiB (see l2.sh).
pattern_sha=$(yes TB-PCI-PATTERN | head -c $MIB | sha256sum | cut -d ' ' -f 1)

rm -f "$TB_API_SOCK"
tb_vmm_start --virtio-transport pci \
    --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
    --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=virtio-pci tb.timeout=280" \
    --cpus boot=2 --memory size=0 \
    --memory-zone id=fmem,size=512M,host_numa_node=0 id=smem,size=512M,host_numa_node=1,shared=on \
    --numa 'guest_numa_id=0,cpus=[0-1],distances=[1@25],memory_zones=fmem' \
    'guest_numa_id=1,distances=[0@25],memory_zones=smem' \
    --balloon 'size=[0,0],statistics=on,heterogeneous_memory=on' \
    --disk "path=$DISK,num_queues=2" \
    --net 'tap=,ip=192.168.20.10,mask=255.255.255.0,mac=12:34:56:78:9a:bc,num_queues=4' \
    --api-socket "path=$TB_API_SOCK" --serial tty --console off

if tb_vmm_wait_line '@@VPCI READY' 200; then
    tb_pass guest-ready "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"
    # ask TAG: the guest's balloon sizes in pages; sets BF, BS
    ask() {
        _l=$(tb_vmm_ask "b $1" "@@VPCI B $1 ") || {
            BF=x BS=x
            return 1
        }
        BF=$(echo "$_l" | sed -n 's/.* bf=\([0-9]*\).*/\1/p')
        BS=$(echo "$_l" | sed -n 's/.* bs=\([0-9]*\).*/\1/p')
    }
    if tb_chr resize --balloon '[128M,128M]' >"$TB_OUT/resize.out" 2>&1; then
        tb_check balloon-both-tiers-reached \
            tb_wait_until 120 tb_balloon_actual_is $((128 * MIB)) $((128 * MIB))
    else
        tb_fail balloon-both-tiers-reached "resize: $(head -c 200 "$TB_OUT/resize.out")"
    fi
    ask inflated
    tb_check_eq guest-fmem-balloon-pages 32768 "$BF"
    tb_check_eq guest-smem-balloon-pages 32768 "$BS"
    tb_check_eq host-fmem-inflated $((128 * MIB)) "$(tb_balloon_field fmem host_inflated)"
    tb_check_eq host-smem-inflated $((128 * MIB)) "$(tb_balloon_field smem host_inflated)"
    tb_chr resize --balloon '[0,0]' >/dev/null 2>&1
    tb_check balloon-deflated tb_wait_until 120 tb_balloon_actual_is 0 0

    # Device ids as with virtio-mmio, and every device interrupted the guest.
    tb_chr counters >"$TB_OUT/counters.json" 2>&1
    counters=$(tr -d ' \n' <"$TB_OUT/counters.json")
    for id in __balloon __rng _disk0 _net1; do
        irqs=$(echo "$counters" | sed -n "s/.*\"$id\":{[^}]*\"irq_signals\":\([0-9]*\).*/\1/p")
        tb_check_ge "counters-$id-irq-signals" "${irqs:-0}" 1
    done
    net_counter() { echo "$counters" | sed -n "s/.*\"_net1\":{[^}]*\"$1\":\([0-9]*\).*/\1/p"; }
    tb_check_ge counters-net-ctrl-commands "$(net_counter ctrl_commands)" 1
    tb_check_eq counters-net-ctrl-refused 0 "$(net_counter ctrl_refused)"
    tb_vmm_send quit
else
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail guest-ready "serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
fi
tb_vmm_wait_exit 90
tb_check_eq vmm-exit-0 0 "$TB_VMM_RC"
tb_check_eq guest-checks PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
tb_check_eq disk-file-has-the-guest-pattern "$pattern_sha" \
    "$(dd if="$DISK" bs=64k skip=32 count=16 2>/dev/null | sha256sum | cut -d ' ' -f 1)"
tb_finish

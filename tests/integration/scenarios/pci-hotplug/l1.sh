# shellcheck shell=sh
# pci-hotplug: ACPI PCI hotplug of virtio-pci devices into a running stock
# Debian guest (--virtio-transport pci), 20 times, under guest I/O.
#
# Each cycle hot-adds a disk (vm.add-disk) and a NIC (vm.add-net); the
# guest (its acpiphp driver, through our GED and hotplug controller) finds
# the disk by its serial and the NIC by its MAC, reads the disk's marker,
# writes a 1 MiB pattern with fsync and checks it after a cache drop, and
# pings the host end of the new TAP. vm.counters and vm.info's device tree
# must show both with their PCI address. Then vm.remove-device takes both
# away: the answer comes at once (as upstream's) and the VMM tears each
# device down when the guest ejects it; then vm.counters and vm.info no
# longer list them, the guest no longer sees them, and the pattern is in
# the disk file on the host. Cycles 5 and 15 add and remove while the VM
# is paused (as upstream allows): the devices are plugged at once, the
# guest finds them once resumed, and ejects only once resumed. Every
# fourth cycle is driven by upstream Cloud Hypervisor v53's ch-remote (the
# anchors), the others by ours. Meanwhile the guest writes and re-reads
# its boot disk without a single mismatch.
# Bad input on the running VM: a duplicate id, a missing image, removing an
# unknown id (upstream's 500 and messages), and more disks than the 31
# slots hold (the first one past the last free slot is refused).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

MIB=1048576
CYCLES=20
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
trap 'tb_vmm_stop' EXIT

UPSTREAM=${TB_CH_REMOTE_UPSTREAM:-}
if [ -z "$UPSTREAM" ] || [ ! -x "$UPSTREAM" ]; then
    tb_fail upstream-ch-remote-present "anchors absent: upstream ch-remote not packed (${UPSTREAM:-unset})"
    UPSTREAM=
fi

BOOT_DISK=$TB_OUT/boot.img
dd if=/dev/zero of="$BOOT_DISK" bs=1M count=16 2>/dev/null
# Hot-plugged images live here; Landlock lets the VMM open files beneath.
HP=$TB_OUT/hp
mkdir -p "$HP"

rm -f "$TB_API_SOCK"
tb_vmm_start --virtio-transport pci \
    --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
    --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=pci-hotplug tb.timeout=560" \
    --cpus boot=2 --memory size=768M \
    --disk "path=$BOOT_DISK,id=boot" \
    --net 'tap=,ip=192.168.20.10,mask=255.255.255.0,mac=12:34:56:78:9a:bc' \
    --landlock-rules "path=$HP,access=rw" \
    --api-socket "path=$TB_API_SOCK" --serial tty --console off

# chr WHO ARGS...: ch-remote (ours or upstream's) against our VMM
chr() {
    _who=$1
    shift
    if [ "$_who" = upstream ]; then
        "$UPSTREAM" --api-socket "$TB_API_SOCK" "$@"
    else
        "$TB_CH_REMOTE" --api-socket "$TB_API_SOCK" "$@"
    fi
}
counters_have() { # ID: vm.counters lists the device
    tb_chr counters 2>/dev/null | tr -d ' \n' | grep -q "\"$1\":{"
}
tree_bdf() { # ID: the device's pci_bdf in vm.info's device tree
    tb_chr info 2>/dev/null | tr -d ' \n' |
        sed -n "s/.*\"$1\":{[^}]*\"pci_bdf\":\"\([0-9a-f:.]*\)\".*/\1/p"
}
field() { echo "$2" | sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
vm_state() { tb_chr info 2>/dev/null | tr -d ' \n' | sed -n 's/.*"state":"\([A-Za-z]*\)".*/\1/p'; }
both_listed() { counters_have hpd && counters_have hpn; }
both_gone() { ! counters_have hpd && ! counters_have hpn && [ -z "$(tree_bdf hpd)" ] && [ -z "$(tree_bdf hpn)" ]; }
wait_both_gone() { # SECS: until the guest ejected both and the VMM tore them down
    _end=$(($(tb_now_ms) + $1 * 1000))
    until both_gone; do
        [ "$(tb_now_ms)" -lt "$_end" ] || return 1
        sleep 0.1
    done
}

ok_cycles=0
upstream_cycles=0
paused_cycles=0
cycle() { # N WHO
    n=$1
    who=$2
    img=$HP/disk$n.img
    mac=52:54:00:30:00:$(printf %02x "$n")
    dd if=/dev/zero of="$img" bs=1M count=4 2>/dev/null
    printf 'TB-HP-%03d' "$n" | dd of="$img" conv=notrunc 2>/dev/null
    fails=0
    paused=no
    case $n in 5 | 15) paused=yes ;; esac
    if [ "$paused" = yes ] && ! chr ours pause >"$TB_OUT/pause-$n.out" 2>&1; then
        tb_fail "cycle-$n-pause" "$(tr '\n' ' ' <"$TB_OUT/pause-$n.out" | head -c 300)"
        return
    fi
    t0=$(tb_now_ms)
    if ! chr "$who" add-disk "path=$img,id=hpd,serial=hpd$n" >"$TB_OUT/add-disk-$n.out" 2>&1; then
        tb_fail "cycle-$n-add-disk" "$who ch-remote: $(tr '\n' ' ' <"$TB_OUT/add-disk-$n.out" | head -c 300)"
        [ "$paused" = no ] || chr ours resume >/dev/null 2>&1
        return
    fi
    if ! chr "$who" add-net "tap=hpt$n,ip=192.168.30.1,mask=255.255.255.0,mac=$mac,id=hpn" \
        >"$TB_OUT/add-net-$n.out" 2>&1; then
        tb_fail "cycle-$n-add-net" "$who ch-remote: $(tr '\n' ' ' <"$TB_OUT/add-net-$n.out" | head -c 300)"
        [ "$paused" = no ] || chr ours resume >/dev/null 2>&1
        return
    fi
    add_ms=$(($(tb_now_ms) - t0))
    # The answer is PciDeviceInfo {id, bdf}.
    bdf=$(tr -d ' \n' <"$TB_OUT/add-disk-$n.out" | sed -n 's/.*"bdf":"\([0-9a-f:.]*\)".*/\1/p')
    grep -q '"hpd"' "$TB_OUT/add-disk-$n.out" && [ -n "$bdf" ] || {
        fails=$((fails + 1))
        tb_log "cycle $n: add-disk printed $(tr '\n' ' ' <"$TB_OUT/add-disk-$n.out")"
    }
    [ "$(tree_bdf hpd)" = "$bdf" ] || {
        fails=$((fails + 1))
        tb_log "cycle $n: vm.info device tree has hpd at '$(tree_bdf hpd)', add-disk said '$bdf'"
    }
    counters_have hpd && counters_have hpn || {
        fails=$((fails + 1))
        tb_log "cycle $n: vm.counters lacks hpd or hpn"
    }
    if [ "$paused" = yes ]; then
        # Plugged while paused: the VM stays paused until resumed.
        [ "$(vm_state)" = Paused ] || {
            fails=$((fails + 1))
            tb_log "cycle $n: state '$(vm_state)' after adding to a paused VM"
        }
        chr ours resume >"$TB_OUT/resume-$n.out" 2>&1 || {
            fails=$((fails + 1))
            tb_log "cycle $n: resume: $(tr '\n' ' ' <"$TB_OUT/resume-$n.out")"
        }
    fi
    line=$(tb_vmm_ask "add $n" "@@HP ADDED $n .* end" 150) || line=""
    tb_log "cycle $n ($who): add ${add_ms} ms; guest: ${line:-no answer}"
    [ "$(field marker "$line")" = "$(printf 'TB-HP-%03d' "$n" | head -c 9)" ] &&
        [ "$(field sha "$line")" = "$(yes "TB-HP-$n" | head -c $MIB | sha256sum | cut -d ' ' -f 1)" ] &&
        [ "$(field ping "$line")" = ok ] || fails=$((fails + 1))
    seen=$(field seen_ms "$line")
    [ -n "$seen" ] && tb_fact "cycle_${n}_guest_seen_ms" "$seen"
    if [ "$paused" = yes ] && ! chr ours pause >"$TB_OUT/pause-$n.out" 2>&1; then
        fails=$((fails + 1))
        tb_log "cycle $n: pause before removal: $(tr '\n' ' ' <"$TB_OUT/pause-$n.out")"
    fi
    t0=$(tb_now_ms)
    chr "$who" remove-device hpd >"$TB_OUT/remove-disk-$n.out" 2>&1 || {
        fails=$((fails + 1))
        tb_log "cycle $n: remove hpd: $(tr '\n' ' ' <"$TB_OUT/remove-disk-$n.out")"
    }
    chr "$who" remove-device hpn >"$TB_OUT/remove-net-$n.out" 2>&1 || {
        fails=$((fails + 1))
        tb_log "cycle $n: remove hpn: $(tr '\n' ' ' <"$TB_OUT/remove-net-$n.out")"
    }
    answer_ms=$(($(tb_now_ms) - t0))
    if [ "$paused" = yes ]; then
        # A paused guest cannot eject: both stay until it runs again.
        both_listed || {
            fails=$((fails + 1))
            tb_log "cycle $n: hpd or hpn left while the guest was paused"
        }
        chr ours resume >"$TB_OUT/resume-$n.out" 2>&1 || {
            fails=$((fails + 1))
            tb_log "cycle $n: resume: $(tr '\n' ' ' <"$TB_OUT/resume-$n.out")"
        }
    fi
    # The answers do not wait for the guest; its ejects complete the removal.
    wait_both_gone 60 || {
        fails=$((fails + 1))
        tb_log "cycle $n: hpd or hpn still listed 60 s after removal"
    }
    tb_log "cycle $n: remove answers ${answer_ms} ms, both ejected and torn down after $(($(tb_now_ms) - t0)) ms (paused: $paused)"
    tb_fact "cycle_${n}_remove_answer_ms" "$answer_ms"
    [ "$(dd if="$img" bs=64k skip=16 count=16 2>/dev/null | sha256sum | cut -d ' ' -f 1)" = \
        "$(yes "TB-HP-$n" | head -c $MIB | sha256sum | cut -d ' ' -f 1)" ] || {
        fails=$((fails + 1))
        tb_log "cycle $n: the pattern is not in $img"
    }
    line=$(tb_vmm_ask "gone $n" "@@HP GONE $n .* end" 60) || line=""
    [ "$(field disk "$line")" = none ] && [ "$(field nic "$line")" = none ] || {
        fails=$((fails + 1))
        tb_log "cycle $n: guest after removal: ${line:-no answer}"
    }
    rm -f "$img"
    if [ "$fails" = 0 ]; then
        ok_cycles=$((ok_cycles + 1))
        [ "$who" = upstream ] && upstream_cycles=$((upstream_cycles + 1))
        [ "$paused" = yes ] && paused_cycles=$((paused_cycles + 1))
    else
        tb_fail "cycle-$n" "$fails check(s) failed ($who ch-remote); see the log"
    fi
}

expect_refusal() { # NAME TEXT ARGS...: ch-remote fails with TEXT in its output
    name=$1
    text=$2
    shift 2
    if chr ours "$@" >"$TB_OUT/$name.out" 2>&1; then
        tb_fail "$name" "accepted: $(tr '\n' ' ' <"$TB_OUT/$name.out" | head -c 200)"
    elif grep -q "500\|InternalServerError" "$TB_OUT/$name.out" && grep -qF "$text" "$TB_OUT/$name.out"; then
        tb_pass "$name" "$(grep -m 1 -F "$text" "$TB_OUT/$name.out" | head -c 200)"
    else
        tb_fail "$name" "$(tr '\n' ' ' <"$TB_OUT/$name.out" | head -c 300)"
    fi
}

if tb_vmm_wait_line '@@HP READY' 240; then
    tb_pass guest-ready "$(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start"
    n=1
    while [ "$n" -le "$CYCLES" ]; do
        who=ours
        [ $((n % 4)) = 0 ] && [ -n "$UPSTREAM" ] && who=upstream
        cycle "$n" "$who"
        tb_vmm_alive || break
        n=$((n + 1))
    done
    tb_check_eq hotplug-cycles-passed "$CYCLES" "$ok_cycles"
    [ -n "$UPSTREAM" ] && tb_check_ge cycles-driven-by-upstream-ch-remote "$upstream_cycles" 1
    tb_check_eq cycles-on-a-paused-vm-passed 2 "$paused_cycles"

    # --- bad input on the running VM ---------------------------------------
    dd if=/dev/zero of="$HP/dup.img" bs=1M count=1 2>/dev/null
    expect_refusal duplicate-id-refused "Identifier boot is not unique" add-disk "path=$HP/dup.img,id=boot"
    expect_refusal missing-image-refused "$HP/missing.img" add-disk "path=$HP/missing.img,id=nofile"
    expect_refusal unknown-id-refused "No device with id" remove-device no-such-device
    counters_have nofile && tb_fail missing-image-left-nothing "nofile is in vm.counters"
    # Fill every free slot; the next disk must be refused.
    added=0
    i=0
    while [ "$i" -lt 31 ]; do
        if chr ours add-disk "path=$HP/dup.img,id=fill$i,readonly=on" >"$TB_OUT/fill.out" 2>&1; then
            added=$((added + 1))
        else
            break
        fi
        i=$((i + 1))
    done
    tb_fact slots_filled "$added"
    # Boot devices: rng, disk, NIC in slots 1-3; 28 left.
    tb_check_eq free-slots-filled 28 "$added"
    if grep -q "no free slot" "$TB_OUT/fill.out" && grep -q "500\|InternalServerError" "$TB_OUT/fill.out"; then
        tb_pass more-devices-than-slots-refused "$(grep -m 1 'no free slot' "$TB_OUT/fill.out" | head -c 200)"
    else
        tb_fail more-devices-than-slots-refused "$(tr '\n' ' ' <"$TB_OUT/fill.out" | head -c 300)"
    fi
    # The guest probes all of them: the boot disk plus those added.
    line=$(tb_vmm_ask "full $((added + 1))" "@@HP FULL .* end" 150) || line=""
    tb_check_eq guest-sees-every-disk "$((added + 1))" "$(field disks "$line")"
    tb_vmm_send quit
else
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail guest-ready "serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
fi
tb_vmm_wait_exit 120
tb_check_eq vmm-exit-0 0 "$TB_VMM_RC"
tb_check_eq guest-checks PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
tb_finish

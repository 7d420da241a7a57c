# shellcheck shell=sh
# ch-interop: upstream's ch-remote drives our VMM and upstream Cloud Hypervisor v53 with the same guest; results compared
# Upstream Cloud Hypervisor v53's `ch-remote` (the client users already
# have; ../shared/anchors/cloud-hypervisor-v53/) drives OUR VMM with a
# real L2 guest, and the same calls drive upstream's `cloud-hypervisor`
# running the same guest in this L1 (its config without our tier keys):
#
# VM 1: ping, create (a JSON file in Cloud Hypervisor's schema: 2 vCPUs,
#   two memory zones on host nodes 0/1 with guest NUMA nodes, a raw disk, a
#   NIC, rng, a balloon), boot, pause, info, resume, info, counters,
#   resize --balloon 64M, info, power-button (the guest powers itself off;
#   the VMM exits).
# VM 2 (config directions): our VM 1 `vm.info` config is fed to upstream's
#   vm.create + vm.boot and upstream's to ours (nothing stripped but our
#   documented extensions: numa latency_ns/bandwidth_mbps, balloon
#   statistics/heterogeneous_memory); the guest must boot. If a VMM refuses
#   the other's config, the check fails and VM 2 uses its own config for
#   the rest: boot, info, shutdown, info, delete, info (fails: no VM),
#   shutdown-vmm (the VMM exits).
#
# Every call against our VMM must exit 0 (but info after delete, which
# must fail as upstream's does), and every call's exit status must equal
# the same call's against upstream. `info`: same top-level keys (a key
# only upstream has is recorded as a fact, a feature we lack; one only we
# have fails) and the same `state`. `counters`: for device ids both have,
# the same counter names (differences recorded as facts). Outputs are in
# $TB_OUT/<ours|upstream>-<1|2>/<call>.out.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
tb_need_upstream vmm remote
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"
trap 'tb_vmm_stop' EXIT

OURS_VMM=$TB_VMM
CHR=$TB_CH_REMOTE_UPSTREAM
BASE=$TB_OUT
CALLS=$BASE/calls.tsv
: >"$CALLS"
DISK=/tmp/tb-interop-disk.raw
BALLOON=64M
BALLOON_BYTES=$((64 * 1048576))
boot_budget=90

tb_fact_str upstream_vmm "$("$TB_CH_UPSTREAM" --version 2>&1 | head -n 1)"
tb_fact_str upstream_ch_remote "$("$CHR" --version 2>&1 | head -n 1)"

config() { # FLAVOR(ours|upstream) TAG
    if [ "$1" = ours ]; then
        t0=', "latency_ns": 80, "bandwidth_mbps": 20000'
        t1=', "latency_ns": 200, "bandwidth_mbps": 8000'
    else
        t0=""
        t1=""
    fi
    cat <<JSON
{
  "cpus": {"boot_vcpus": 2, "max_vcpus": 2},
  "memory": {"size": 0, "zones": [
    {"id": "fmem", "size": 536870912, "host_numa_node": 0},
    {"id": "smem", "size": 536870912, "host_numa_node": 1}]},
  "numa": [
    {"guest_numa_id": 0, "cpus": [0, 1], "distances": [{"destination": 1, "distance": 25}],
     "memory_zones": ["fmem"]$t0},
    {"guest_numa_id": 1, "distances": [{"destination": 0, "distance": 25}],
     "memory_zones": ["smem"]$t1}],
  "payload": {"kernel": "$TB_L2_KERNEL", "initramfs": "$TB_L2_INITRD",
              "cmdline": "console=ttyS0 reboot=k panic=-1 tb.run=ch-interop tb.vm=$2"},
  "disks": [{"path": "$DISK"}],
  "net": [{"ip": "192.168.10.10", "mask": "255.255.255.0", "mac": "12:34:56:78:90:01"}],
  "rng": {"src": "/dev/urandom"},
  "balloon": {"size": 0},
  "serial": {"mode": "Tty"},
  "console": {"mode": "Off"}
}
JSON
}

# call NAME ARGS...: upstream's ch-remote on the current VM's socket; output
# in $TB_OUT/NAME.out (stdout) and NAME.err; "label vm name rc" in $CALLS.
call() {
    _n=$1
    shift
    _rc=0
    "$CHR" --api-socket "$SOCK" "$@" >"$TB_OUT/$_n.out" 2>"$TB_OUT/$_n.err" || _rc=$?
    printf '%s\t%s\t%s\t%s\n' "$LABEL" "$VMN" "$_n" "$_rc" >>"$CALLS"
    tb_log "$LABEL vm$VMN: ch-remote $* -> rc $_rc $(head -c 200 "$TB_OUT/$_n.err" | tr '\n' ' ')"
    return "$_rc"
}
# Readiness only (the recorded ping is a call): upstream's ch-remote, or
# ours when upstream's cannot read our answers.
socket_up() {
    "$CHR" --api-socket "$SOCK" ping >/dev/null 2>&1 ||
        { [ -x "$TB_CH_REMOTE" ] && "$TB_CH_REMOTE" --api-socket "$SOCK" ping >/dev/null 2>&1; }
}
ticks() { tr -d '\r' <"$TB_VMM_SERIAL" | sed -n 's/^@@TB-TICK \([0-9]*\)$/\1/p' | tail -n 1; }
tick_after() { _t=$(ticks); [ -n "$_t" ] && [ "$_t" -gt "$1" ]; }
actual_size() { "$CHR" --api-socket "$SOCK" info >"$TB_OUT/.info" 2>/dev/null && tb_json_value "$TB_OUT/.info" memory_actual_size; }
balloon_applied() { _a=$(actual_size) && [ -n "$_a" ] && [ "$_a" -le $((FULL - BALLOON_BYTES)) ]; }

start() { # LABEL VMN
    LABEL=$1
    VMN=$2
    TB_OUT=$BASE/$LABEL-$VMN
    mkdir -p "$TB_OUT"
    SOCK=$TB_OUT/api.sock
    rm -f "$SOCK"
    if [ "$LABEL" = ours ]; then TB_VMM=$OURS_VMM; else TB_VMM=$TB_CH_UPSTREAM; fi
    dd if=/dev/zero of="$DISK" bs=1M count=8 2>/dev/null
    if [ "$LABEL" = ours ]; then
        # Under Landlock from start (tb_vmm_start): the files VMs will use.
        tb_vmm_start --api-socket "path=$SOCK" --landlock-rules "path=$TB_L2_KERNEL,access=r" \
            "path=$TB_L2_INITRD,access=r" "path=$DISK,access=rw"
    else
        tb_vmm_start --api-socket "path=$SOCK"
    fi
    if tb_wait_until 20 socket_up; then return 0; fi
    tb_fail "$LABEL-$VMN-api-socket" "no answer on $SOCK within 20 s: $(tail -n 3 "$TB_VMM_STDERR" | tr '\n' '|')"
    tb_vmm_stop
    return 1
}

finish_vm() { # wait for the VMM's exit and record its status
    tb_vmm_wait_exit "${1:-60}"
    printf '%s\t%s\t%s\t%s\n' "$LABEL" "$VMN" vmm-exit "$TB_VMM_RC" >>"$CALLS"
    tb_log "$LABEL vm$VMN: VMM exit status $TB_VMM_RC"
    VIRTIO=$(tr -d '\r' <"$TB_VMM_SERIAL" | sed -n 's/.*@@TB-INTEROP VIRTIO //p' | tail -n 1)
    [ -z "$VIRTIO" ] || tb_fact_str "${LABEL}_${VMN}_guest_virtio_devices" "$VIRTIO"
    TB_OUT=$BASE
}

guest_up() { # wait for the guest's tick loop (its checks ran before it)
    if tb_vmm_wait_line '@@TB-POWERBTN LISTENING' "$boot_budget" && tb_wait_until 30 tick_after 0; then
        tb_pass "$LABEL-$VMN-guest-up" "$1 ($(($(tb_now_ms) - TB_VMM_START_MS)) ms after VMM start)"
        tb_check_eq "$LABEL-$VMN-guest-checks" PASS "$(tb_l2_json | sed -n 's/.*"result":"\([A-Z]*\)".*/\1/p')"
        return 0
    fi
    tb_vmm_diag "$TB_OUT/vmm-diag.txt"
    tb_fail "$LABEL-$VMN-guest-up" "$1: the guest did not reach its tick loop; serial tail: $(tail -n 5 "$TB_VMM_SERIAL" | tr -d '\r' | tr '\n' '|')"
    return 1
}

# ---------------------------------------------------------------- VM 1 --
vm1() { # LABEL
    start "$1" 1 || return 0
    config "$1" "${1}1" >"$TB_OUT/vm.json"
    call ping ping
    call create create "$TB_OUT/vm.json"
    call info-created info
    call boot boot
    if ! guest_up "VM 1"; then
        tb_vmm_stop
        TB_OUT=$BASE
        return 0
    fi
    call pause pause
    call info-paused info
    t=$(ticks)
    call resume resume
    if tb_wait_until 30 tick_after "$t"; then
        tb_pass "$LABEL-1-progress-after-resume"
    else
        tb_fail "$LABEL-1-progress-after-resume" "no tick after $t within 30 s"
    fi
    call info-running info
    call counters counters
    FULL=$(tb_json_value "$TB_OUT/info-running.out" memory_actual_size)
    case $FULL in '' | *[!0-9]*) FULL=$((1024 * 1048576)) ;; esac
    t0=$(tb_now_ms)
    if call resize-balloon resize --balloon "$BALLOON"; then
        if tb_wait_until 60 balloon_applied; then
            tb_fact "${LABEL}_balloon_${BALLOON}_applied_ms" "$(($(tb_now_ms) - t0))"
            tb_pass "$LABEL-1-balloon-applied" "memory_actual_size $FULL -> $(actual_size)"
        else
            tb_fail "$LABEL-1-balloon-applied" "memory_actual_size still $(actual_size) (was $FULL) 60 s after resize --balloon $BALLOON"
        fi
    fi
    call info-ballooned info
    call power-button power-button
    if tb_vmm_wait_line '@@TB-POWERBTN PRESSED' 30; then
        tb_pass "$LABEL-1-guest-saw-power-button"
    else
        tb_fail "$LABEL-1-guest-saw-power-button" "no KEY_POWER in the guest within 30 s"
    fi
    finish_vm 60
}

# ---------------------------------------------------------------- VM 2 --
vm2() { # LABEL CROSS-CONFIG-FILE FROM
    start "$1" 2 || return 0
    cross=$2
    from=$3
    call ping ping
    own=0
    if [ ! -s "$cross" ]; then
        tb_fail "$from-config-boots-under-$LABEL" "no $from vm.info config to feed (VM 1 under $from did not get that far)"
        own=1
    elif ! call create-cross create "$cross"; then
        tb_fail "$from-config-boots-under-$LABEL" "$LABEL's vm.create refused $from's vm.info config: $(head -c 600 "$TB_OUT/create-cross.err" | tr '\n' ' ')"
        own=1
    fi
    if [ "$own" = 1 ]; then
        config "$LABEL" "${LABEL}2" >"$TB_OUT/vm.json"
        call create create "$TB_OUT/vm.json"
    fi
    call boot boot
    if guest_up "VM 2 ($([ "$own" = 1 ] && echo "own config" || echo "$from's config"))"; then
        [ "$own" = 1 ] || tb_pass "$from-config-boots-under-$LABEL" "the guest booted and ran its checks"
        call info-running info
        call shutdown shutdown
        call info-after-shutdown info
        call delete delete
        call info-after-delete info
        call shutdown-vmm shutdown-vmm
        finish_vm 30
    else
        [ "$own" = 1 ] || tb_fail "$from-config-boots-under-$LABEL" "$LABEL accepted $from's config but the guest did not boot"
        tb_vmm_stop
        TB_OUT=$BASE
    fi
}

vm1 ours
vm1 upstream

# The config directions: each side's VM 1 config, fed to the other.
if tb_json get "$BASE/ours-1/info-running.out" config >"$BASE/ours-config.json" 2>/dev/null; then
    tb_json drop "$BASE/ours-config.json" latency_ns,bandwidth_mbps,statistics,heterogeneous_memory >"$BASE/ours-config-for-upstream.json"
else
    : >"$BASE/ours-config-for-upstream.json"
fi
tb_json get "$BASE/upstream-1/info-running.out" config >"$BASE/upstream-config.json" 2>/dev/null || : >"$BASE/upstream-config.json"
vm2 ours "$BASE/upstream-config.json" upstream
vm2 upstream "$BASE/ours-config-for-upstream.json" ours

# ---------------------------------------------------------- comparisons --
rc_of() { awk -F '\t' -v l="$1" -v v="$2" -v n="$3" '$1 == l && $2 == v && $3 == n { r = $4 } END { print r }' "$CALLS"; }
for key in $(awk -F '\t' '{ print $2 ":" $3 }' "$CALLS" | awk '!seen[$0]++'); do
    v=${key%%:*}
    n=${key#*:}
    o=$(rc_of ours "$v" "$n")
    u=$(rc_of upstream "$v" "$n")
    case $v:$n in
    *:create-cross) continue ;; # judged by the config-direction checks
    2:create) [ -n "$o" ] && [ -n "$u" ] || continue ;; # the fallback after a refused cross config
    esac
    if [ -z "$o" ] || [ -z "$u" ]; then
        tb_fail "vm$v-$n-both-ran" "ours rc '${o:-not run}', upstream rc '${u:-not run}'"
        continue
    fi
    want=0
    [ "$n" = info-after-delete ] && want=1
    if [ "$want" = 0 ]; then
        tb_check_eq "vm$v-$n-ours-exit-0" 0 "$o"
    elif [ "$o" = 0 ]; then
        tb_fail "vm$v-$n-ours-fails" "info after delete succeeded against our VMM"
    fi
    tb_check_eq "vm$v-$n-exit-status-as-upstream" "$u" "$o"
done

# Set operations on files of lines (busybox has no comm).
only_in() { awk 'NR == FNR { b[$0] = 1; next } !($0 in b)' "$2" "$1"; } # lines of $1 not in $2
in_both() { awk 'NR == FNR { b[$0] = 1; next } ($0 in b)' "$2" "$1"; }
diffs=""
note() { diffs="$diffs; $*"; tb_log "difference: $*"; }
for f in "$BASE"/upstream-*/info-*.out; do
    [ -s "$f" ] || continue
    d=${f%/*}
    v=${d##*-}
    c=${f##*/}
    c=${c%.out}
    o=$BASE/ours-$v/$c.out
    [ "$c" != info-after-delete ] || continue
    if [ ! -s "$o" ]; then
        note "vm$v $c: no output from ours"
        continue
    fi
    tb_check_eq "vm$v-$c-state-as-upstream" "$(tb_json_value "$f" state)" "$(tb_json_value "$o" state)"
    tb_json_keys "$f" >"$BASE/.ku"
    tb_json_keys "$o" >"$BASE/.ko"
    only_up=$(only_in "$BASE/.ku" "$BASE/.ko" | tr '\n' ' ')
    only_ours=$(only_in "$BASE/.ko" "$BASE/.ku" | tr '\n' ' ')
    [ -z "$only_up" ] || note "vm$v $c: top-level keys only upstream has: $only_up"
    if [ -n "$only_ours" ]; then
        tb_fail "vm$v-$c-top-level-keys" "keys only ours has: $only_ours"
    else
        tb_pass "vm$v-$c-top-level-keys" "$(tr '\n' ' ' <"$BASE/.ko")"
    fi
done
if [ -s "$BASE/ours-1/ping.out" ] && [ -s "$BASE/upstream-1/ping.out" ]; then
    tb_json_keys "$BASE/upstream-1/ping.out" >"$BASE/.ku"
    tb_json_keys "$BASE/ours-1/ping.out" >"$BASE/.ko"
    cmp -s "$BASE/.ku" "$BASE/.ko" || note "ping keys: upstream $(tr '\n' ' ' <"$BASE/.ku")/ ours $(tr '\n' ' ' <"$BASE/.ko")"
fi
cu=$BASE/upstream-1/counters.out
co=$BASE/ours-1/counters.out
if [ -s "$cu" ] && [ -s "$co" ]; then
    tb_json_keys "$cu" >"$BASE/.du"
    tb_json_keys "$co" >"$BASE/.do"
    tb_fact_str counters_devices_upstream "$(tr '\n' ' ' <"$BASE/.du")"
    tb_fact_str counters_devices_ours "$(tr '\n' ' ' <"$BASE/.do")"
    [ -z "$(only_in "$BASE/.du" "$BASE/.do")" ] || note "counters: devices only upstream has: $(only_in "$BASE/.du" "$BASE/.do" | tr '\n' ' ')"
    [ -z "$(only_in "$BASE/.do" "$BASE/.du")" ] || note "counters: devices only ours has: $(only_in "$BASE/.do" "$BASE/.du" | tr '\n' ' ')"
    shared=0
    for dev in $(in_both "$BASE/.du" "$BASE/.do"); do
        shared=$((shared + 1))
        tb_json_keys "$cu" "$dev" >"$BASE/.nu"
        tb_json_keys "$co" "$dev" >"$BASE/.no"
        if cmp -s "$BASE/.nu" "$BASE/.no"; then
            tb_pass "counters-$dev-names-as-upstream" "$(tr '\n' ' ' <"$BASE/.no")"
        else
            note "counters $dev: only upstream: $(only_in "$BASE/.nu" "$BASE/.no" | tr '\n' ' ')/ only ours: $(only_in "$BASE/.no" "$BASE/.nu" | tr '\n' ' ')"
        fi
    done
    tb_check_ge counters-shared-devices "$shared" 1
fi
tb_fact_str differences "${diffs#; }"
rm -f "$BASE"/.k? "$BASE"/.d? "$BASE"/.n?
TB_OUT=$BASE
tb_finish

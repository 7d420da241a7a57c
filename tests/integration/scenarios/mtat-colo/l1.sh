# shellcheck shell=sh
# mtat-colo: the host FMem policy daemon (tier-policy, docs/policy.md) in
# L1 beside three L2 VMs under our VMM, with an FMem budget below their sum.
#
#   lc   memcached (Debian's) on a TAP; tb-kvload in L1 drives it and
#        publishes the p99 of every 5 s window (one interval) to the file
#        the daemon reads; a window over the SLO that began after the last
#        plan was applied brings the next decision forward
#   be1, be2  gups-hotset under tiering.ko + tiering-agent, which send the
#        per-tier access counts (tags 0x800d/0x800e) to the host
#
# Each VM: FMem zone 256 MiB (host node 0) + SMem zone 256 MiB (host node
# 1), a double balloon. Budget 512 MiB of the 768 MiB of FMem tiers, unit
# 32 MiB, p_max 64 MiB, decisions every 5 s. The SLO is calibrated here
# (between the p99 of the low and of the high load), so that the low load
# meets it and the high load does not: under TCG FMem and SMem run at one
# speed, so FMem cannot lower memcached's latency here; what this checks
# is the mechanics (slices, budget, signals, log, the reaction to a load
# step), not the benefit, which only the simulator shows (bench.sh mtat).
#
# Checks: every slice in the decision log moves at most p_max each way and
# LC moves come first; Σ FMem held (tier - min(target, actual)) <= budget
# at every instant between two polls of the three VMMs (~1.7 s apart;
# check-budget.awk says why a single poll is not an instant); after the
# load step the LC share grows within two decisions; the BE VMs'
# tiering_fmem_accesses /
# tiering_smem_accesses reach vm.balloon-stats and the daemon's inputs;
# each completed decision's targets are what the VMMs report.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

TP=$(command -v tier-policy || true)
[ -x "$TB_VMM" ] || tb_skip "no VMM binary at $TB_VMM"
[ -x "$TB_CH_REMOTE" ] || tb_skip "no ch-remote binary at $TB_CH_REMOTE"
[ -n "$TP" ] || tb_skip "no tier-policy binary (cargo build of the policy crate failed or was skipped)"
[ "$(tb_node_count)" -ge 2 ] || tb_skip "the host has fewer than two NUMA nodes"

MIB=1048576
TIER=$((256 * MIB))
UNIT=$((32 * MIB))
PMAX=$((64 * MIB))
BUDGET=$((512 * MIB))
INTERVAL=5
VMS="lc be1 be2"
SOCKS=$TB_OUT/vmm
STATE=$TB_OUT/tp-state
LC_ADDR=192.168.20.2
mkdir -p "$SOCKS" "$STATE"
# the daemon's /metrics listens on loopback, which L1's init leaves down
ip link set lo up 2>/dev/null

PIDS=""
POLL_PID=""
LOAD_PID=""
TP_PID=""
cleanup() {
    [ -z "$POLL_PID" ] || kill "$POLL_PID" 2>/dev/null
    [ -z "$LOAD_PID" ] || kill "$LOAD_PID" 2>/dev/null
    [ -z "$TP_PID" ] || kill "$TP_PID" 2>/dev/null
    for p in $PIDS; do kill "$p" 2>/dev/null; done
}
trap cleanup EXIT

sock() { echo "$SOCKS/$1.sock"; }
chr_vm() {
    _v=$1
    shift
    "$TB_CH_REMOTE" --api-socket "$(sock "$_v")" "$@"
}
pid_of() { eval "echo \$PID_$1"; }

# start_vm NAME FD FMEM_BALLOON CMDLINE-EXTRA [VMM ARGS...]
start_vm() {
    _n=$1 _fd=$2 _bal=$3 _extra=$4
    shift 4
    rm -f "$TB_OUT/$_n.stdin" "$(sock "$_n")"
    mkfifo "$TB_OUT/$_n.stdin"
    eval "exec $_fd<>\"\$TB_OUT/\$_n.stdin\""
    # Under Landlock as every scenario's VMM (the files come from --kernel).
    set -- --landlock --kernel "$TB_L2_KERNEL" --initramfs "$TB_L2_INITRD" \
        --cmdline "console=ttyS0 reboot=k panic=-1 tb.run=mtat-colo tb.colo_hold_s=$((${TB_TIMEOUT:-600} - 30)) $_extra" \
        --cpus boot=1 --memory size=0 \
        --memory-zone id=fmem,size=256M,host_numa_node=0 id=smem,size=256M,host_numa_node=1 \
        --numa 'guest_numa_id=0,cpus=[0],distances=[1@25],memory_zones=fmem,latency_ns=80,bandwidth_mbps=20000' \
        'guest_numa_id=1,distances=[0@25],memory_zones=smem,latency_ns=200,bandwidth_mbps=8000' \
        --balloon "size=[$_bal,0],statistics=on,heterogeneous_memory=on" \
        --api-socket "path=$(sock "$_n")" --serial tty --console off "$@"
    echo "$TB_VMM $*" >"$TB_OUT/$_n.cmdline"
    "$TB_VMM" "$@" <"$TB_OUT/$_n.stdin" >"$TB_OUT/$_n.serial" 2>"$TB_OUT/vmm-$_n.stderr" &
    eval "PID_$_n=\$!"
    PIDS="$PIDS $!"
    tb_log "$_n: VMM pid $!"
}
send_vm() { # NAME TEXT
    case $1 in
    lc) printf '%s\n' "$2" >&5 ;;
    be1) printf '%s\n' "$2" >&6 ;;
    be2) printf '%s\n' "$2" >&7 ;;
    esac
}
serial_has() { _tb_has_line "$TB_OUT/$1.serial" "$2"; }
all_ready() {
    for v in $VMS; do serial_has "$v" "@@TB-L2 READY mtat-colo" || return 1; done
}
any_dead() {
    for v in $VMS; do tb_pid_alive "$(pid_of "$v")" || return 0; done
    return 1
}
# Each VM boots once: a guest kernel panic or a triple fault reboots it
# (reboot=k panic=-1) and its scenario starts over, which here would only
# show as a missing handshake long after. crashed names the first VM with
# either in its console log; crash_fail reports it with its evidence
# (lib/l1.sh: l2-no-crash, l2-crash.txt) and ends the run.
crashed() {
    for v in $VMS; do
        TB_L2_CRASH=$(TB_VMM_SERIAL=$TB_OUT/$v.serial TB_L2_SINGLE_BOOT=1 tb_l2_crash)
        if [ -n "$TB_L2_CRASH" ]; then
            CRASHED_VM=$v
            return 0
        fi
    done
    return 1
}
crash_fail() {
    tb_log "$CRASHED_VM: guest crash in $CRASHED_VM.serial"
    # shellcheck disable=SC2034 # read by tb_l2_crash_report
    TB_VMM_SERIAL=$TB_OUT/$CRASHED_VM.serial TB_VMM_PID=$(pid_of "$CRASHED_VM")
    tb_l2_crash_report
    tb_finish
}
# The boot wait polls 10 times a second; reading three whole console logs
# once a second is soon enough (as lib/l1.sh's own crash scan).
crashed_now_and_then() {
    _now=$(tb_now_ms)
    [ "$_now" -ge "${CRASH_SCAN_MS:-0}" ] || return 1
    CRASH_SCAN_MS=$((_now + 1000))
    crashed
}
ready_or_dead() { all_ready || any_dead || crashed_now_and_then; }

# "<fmem target> <fmem actual> <fmem accesses> <smem accesses>" of a VM
# (empty fields as -1), from one GET vm.balloon-stats.
bstats() {
    _j=$(chr_vm "$1" balloon-stats 2>/dev/null | tr -d ' \n')
    [ -n "$_j" ] || { echo "-1 -1 -1 -1"; return; }
    _f=$(printf '%s\n' "$_j" | tr '}' '\n' | grep '"tier":"fmem"')
    _t=$(printf '%s\n' "$_f" | sed -n 's/.*[{,]"target":\([0-9]*\).*/\1/p')
    _a=$(printf '%s\n' "$_f" | sed -n 's/.*[{,]"actual":\([0-9]*\).*/\1/p')
    _fa=$(printf '%s\n' "$_j" | sed -n 's/.*"tiering_fmem_accesses":\([0-9]*\).*/\1/p')
    _sa=$(printf '%s\n' "$_j" | sed -n 's/.*"tiering_smem_accesses":\([0-9]*\).*/\1/p')
    echo "${_t:--1} ${_a:--1} ${_fa:--1} ${_sa:--1}"
}
# Every balloon at its target, or stopped at most BALLOON_SLACK short of
# it: a guest whose FMem holds little but its kernel and services may stop
# inflating early, when its FMem node has no free page above the watermark
# left (seen: 45 and 537 pages of the LC VM's 160 MiB), and the daemon
# treats such a stop the same way.
BALLOON_SLACK=$((4 * 1048576))
balloons_at_target() {
    for v in $VMS; do
        set -- $(bstats "$v")
        [ "$1" -ge 0 ] && [ "$2" -le "$1" ] && [ $(($1 - $2)) -le "$BALLOON_SLACK" ] || return 1
    done
}

# ---- boot the three VMs -------------------------------------------------
start_vm lc 5 160M "tb.colo_role=lc tb.colo_addr=$LC_ADDR" \
    --net "tap=tbcolo0,ip=192.168.20.1,mask=255.255.255.0"
start_vm be1 6 96M "tb.colo_role=be"
start_vm be2 7 96M "tb.colo_role=be"

tb_wait_until 240 ready_or_dead
! crashed || crash_fail
if ! all_ready; then
    for v in $VMS; do
        serial_has "$v" "@@TB-L2 READY mtat-colo" || tb_fail "$v-reached-handshake" \
            "$(tb_pid_alive "$(pid_of "$v")" && echo "timed out" || echo "VMM exited"); serial tail: $(tail -n 5 "$TB_OUT/$v.serial" | tr -d '\r' | tr '\n' '|')"
    done
    tb_finish
fi
tb_pass "all-vms-ready" "$(($(tb_now_ms) - TB_BEGIN_MS)) ms after the first VMM start"
# The BE VMs' threads run at nice 10 and the daemon and the poller at 5,
# as a host would favour its LC VMs' CPUs: with three busy vCPUs on L1's
# two CPUs, memcached's latency would otherwise be the scheduler's time
# slice, whatever its load. (busybox has renice but no nice.)
be_nice() {
    for v in be1 be2; do
        for t in /proc/"$(pid_of "$v")"/task/*; do renice -n 10 -p "${t##*/}" >/dev/null 2>&1; done
    done
}
be_nice
if tb_wait_until 60 balloons_at_target; then
    tb_pass "initial-balloons-reached"
else
    tb_fail "initial-balloons-reached" "lc: $(bstats lc), be1: $(bstats be1), be2: $(bstats be2)"
fi

# ---- poll the VMMs: "wall_s ms" then per VM "target actual facc sacc" ----
POLL=$TB_OUT/polls.txt
: >"$POLL"
(
    renice -n 5 -p "$(cut -d ' ' -f 4 /proc/self/stat)" >/dev/null 2>&1
    while :; do
        be_nice # threads a VMM starts later
        row="$(date +%s) $(tb_now_ms)"
        for v in $VMS; do row="$row $(bstats "$v")"; done
        echo "$row" >>"$POLL"
        sleep 1
    done
) &
POLL_PID=$!

# ---- load generator and SLO calibration --------------------------------
CTL=$TB_OUT/kvload.ctl
P99=$TB_OUT/lc.p99
KVLOG=$TB_OUT/kvload.log
LOW="1 40"
HIGH="64 0"
WINDOW_S=$INTERVAL
echo "$LOW" >"$CTL"
tb-kvload -a "$LC_ADDR" -c "$CTL" -o "$P99" -l "$KVLOG" -w $((WINDOW_S * 1000)) 2>"$TB_OUT/kvload.stderr" &
LOAD_PID=$!
windows() {
    _w=0
    [ ! -f "$KVLOG" ] || _w=$(wc -l <"$KVLOG")
    echo "${_w:-0}"
}
windows_at_least() { [ "$(windows)" -ge "$1" ]; }
p99s_since() { # LINE : p99 values of the windows after line LINE
    tail -n +$(($1 + 1)) "$KVLOG" | sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# windows of one decision interval: 4 low (the first one connects; the
# low load's p99 is the median of the other three, as one window can
# catch a hiccup of the emulated host: 101 ms against 11 ms once),
# 3 high (the first one is the transition), 2 low again
if ! tb_wait_until $((5 * WINDOW_S + 20)) windows_at_least 4; then
    tb_fail "kvload-runs" "$(cat "$TB_OUT/kvload.stderr")"
    tb_finish
fi
lo=$(p99s_since 1 | median)
n0=$(windows)
echo "$HIGH" >"$CTL"
tb_wait_until $((4 * WINDOW_S + 20)) windows_at_least $((n0 + 3))
hi=$(p99s_since $((n0 + 1)) | sort -n | head -n 1)
echo "$LOW" >"$CTL"
n0=$(windows)
tb_wait_until $((3 * WINDOW_S + 20)) windows_at_least $((n0 + 2))
# SLO: half-way between the low load's median and the high load's best
# window; needs a clear gap between the two loads. (busybox awk has no
# sqrt, or this would be the geometric mean.)
slo=$(awk -v lo="$lo" -v hi="$hi" 'BEGIN { if (hi > 2 * lo && lo > 0) printf "%.3f", (lo + hi) / 2; else print "" }')
tb_fact lc_p99_low_ms "${lo:-null}"
tb_fact lc_p99_high_ms "${hi:-null}"
if [ -n "$slo" ]; then
    tb_pass "slo-calibrated" "low load p99 (median) $lo ms, high load p99 >= $hi ms: SLO $slo ms"
else
    slo=$(awk -v lo="$lo" 'BEGIN { printf "%.3f", (lo > 0 ? lo : 1) * 2 }')
    tb_fail "slo-calibrated" "high load p99 $hi ms is not 2x the low load's $lo ms: the load step cannot be told apart (SLO set to $slo ms)"
fi
tb_fact lc_slo_ms "$slo"

# ---- the daemon ---------------------------------------------------------
CONF=$TB_OUT/tier-policy.toml
cat >"$CONF" <<EOF
[host]
fmem_budget = $BUDGET
unit = $UNIT
interval_s = $INTERVAL
p_max = $PMAX
move_rate = $PMAX
policy = "mtat"
socket_dir = "$SOCKS"
state_dir = "$STATE"
metrics_listen = "127.0.0.1:9464"
resize_timeout_s = 10
# a guest whose FMem is full of its workload's pages stops short of a
# shrink: seen after 4 s without progress, it is set back to the unit it
# stopped in and spared for three decisions (docs/policy.md)
stall_s = 4

[[vm]]
name = "lc"
class = "lc"
slo_ms = $slo
latency_file = "$P99"
min = "64M"

[[vm]]
name = "be1"
class = "be"
min = "32M"

[[vm]]
name = "be2"
class = "be"
min = "32M"
EOF
LOG=$STATE/decisions.jsonl
decisions() {
    _d=$(grep -c '"event":"decision"' "$LOG" 2>/dev/null)
    echo "${_d:-0}"
}
decisions_at_least() { [ "$(decisions)" -ge "$1" ]; }
# shellcheck disable=SC2016 # $$ and $0 belong to the inner sh
RUST_LOG=info sh -c 'renice -n 5 -p $$ >/dev/null 2>&1; exec "$0" "$@"' "$TP" run --config "$CONF" \
    >"$TB_OUT/tier-policy.out" 2>"$TB_OUT/tier-policy.stderr" &
TP_PID=$!
daemon_dead() { ! tb_pid_alive "$TP_PID"; }
decided_or_dead() { decisions_at_least "$1" || daemon_dead; }
# A decision lasts up to its slices' waits (10 s each when a guest is slow
# to give FMem back), not just the 5 s interval.
tb_wait_until 150 decided_or_dead 5
if daemon_dead || ! decisions_at_least 5; then
    tb_fail "daemon-decides" "$(decisions) decisions in 150 s; stderr: $(tail -n 5 "$TB_OUT/tier-policy.stderr" | tr '\n' '|')"
    tb_finish
fi

# the operator interfaces answer
if wget -q -O "$TB_OUT/metrics.txt" http://127.0.0.1:9464/metrics && grep -q '^tier_policy_budget_bytes' "$TB_OUT/metrics.txt"; then
    tb_pass "metrics-endpoint"
else
    tb_fail "metrics-endpoint" "no tier_policy_budget_bytes from /metrics"
fi
tb_check "status-command" sh -c "'$TP' status --config '$CONF' >'$TB_OUT/status.out' 2>&1"

# ---- the load step ------------------------------------------------------
d0=$(decisions)
step_s=$(date +%s)
echo "$HIGH" >"$CTL"
tb_log "load step at $step_s (after decision $d0)"
tb_wait_until 150 decided_or_dead $((d0 + 4))
decisions_at_least $((d0 + 4)) ||
    tb_fail "daemon-decides-after-step" "$(decisions) decisions"
echo stop >"$CTL"
wait "$LOAD_PID" 2>/dev/null
LOAD_PID=""

kill -TERM "$TP_PID"
tb_wait_until 40 sh -c "! kill -0 $TP_PID 2>/dev/null"
wait "$TP_PID"
tp_rc=$?
TP_PID=""
tb_check_eq "daemon-exit-0-on-sigterm" 0 "$tp_rc"
sleep 1
kill "$POLL_PID" 2>/dev/null
wait "$POLL_PID" 2>/dev/null
POLL_PID=""
final="$(bstats lc) $(bstats be1) $(bstats be2)"
tb_fact_str vmm_final "$final"

# ---- let the guests finish ----------------------------------------------
! crashed || crash_fail
for v in $VMS; do send_vm "$v" tb-ack; done
all_gone() { for v in $VMS; do ! tb_pid_alive "$(pid_of "$v")" || return 1; done; }
# A VMM still running: where its threads wait (comm:state:wchan), in the
# failure's message (CI shows only the log), and its full diagnostics.
vmm_threads() { # PID
    for t in /proc/"$1"/task/*; do
        printf ' %s:%s:%s' "$(cat "$t/comm" 2>/dev/null)" \
            "$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -c1)" "$(cat "$t/wchan" 2>/dev/null)"
    done
}
if ! tb_wait_until 90 all_gone; then
    stuck=""
    for v in $VMS; do
        p=$(pid_of "$v")
        tb_pid_alive "$p" || continue
        stuck="$stuck $v [$(vmm_threads "$p") ]"
        TB_VMM_PID=$p TB_VMM_SERIAL=$TB_OUT/$v.serial tb_vmm_diag "$TB_OUT/vmm-diag-$v.txt"
    done
    tb_fail "vmms-exit" "not all VMMs exited within 90 s of tb-ack:$stuck"
    ! crashed || crash_fail
fi
for v in $VMS; do
    p=$(pid_of "$v")
    if tb_pid_alive "$p"; then kill -KILL "$p"; fi
    wait "$p"
    rc=$?
    tb_check_eq "$v-vmm-exit-code-0" 0 "$rc"
    l2=$(tb_l2_json "$TB_OUT/$v.serial")
    case $l2 in
    *'"result":"PASS"'*) tb_pass "$v-l2-checks-passed" ;;
    '') tb_fail "$v-l2-checks-passed" "no L2 JSON line in $v.serial; it ends: $(tail -n 6 "$TB_OUT/$v.serial" | tr -d '\r' | cut -c 1-120 | tr '\n' '|')" ;;
    *) tb_fail "$v-l2-checks-passed" "$l2" ;;
    esac
done
PIDS=""

# ---- checks ----------------------------------------------------------------
tb_fact decisions "$(decisions)"
tb_fact polls "$(wc -l <"$POLL")"

# Σ FMem held <= budget at every instant between two polls (check-budget.awk:
# a row reads the VMMs one after another, so it bounds the sum at an
# instant between two rows from below; a row's own sum is only a fact)
awk -v tier="$TIER" -v budget="$BUDGET" -f "$TB_SCENARIO_DIR/check-budget.awk" \
    "$POLL" >"$TB_OUT/budget-check.txt"
read -r n stable bad max naive first <"$TB_OUT/budget-check.txt"
tb_fact budget_pairs "$n"
tb_fact budget_pairs_at_rest "$stable"
tb_fact max_fmem_held_bytes "$max"
tb_fact max_fmem_row_sum_bytes "$naive"
if [ "$n" -ge 10 ] && [ "$bad" -eq 0 ]; then
    tb_pass "fmem-sum-within-budget" "$n poll pairs ($stable with targets unchanged), max $((max / MIB)) MiB of $((BUDGET / MIB)) MiB"
else
    tb_fail "fmem-sum-within-budget" "$bad of $n poll pairs over budget (first: $first)"
fi

# the decision log: slices, LC first, targets reached, the step
awk -f "$TB_SCENARIO_DIR/check-log.awk" -v pmax="$((PMAX / UNIT))" -v budget="$BUDGET" \
    -v step_s="$step_s" -v slo="$slo" "$LOG" >"$TB_OUT/log-check.txt"
cat "$TB_OUT/log-check.txt"
for k in slices-within-p-max lc-moves-first committed-within-budget lc-follows-step; do
    line=$(grep "^$k " "$TB_OUT/log-check.txt")
    case $line in
    "$k ok"*) tb_pass "$k" "${line#"$k ok"}" ;;
    *) tb_fail "$k" "${line:-missing from check-log output}" ;;
    esac
done
slices=$(sed -n 's/^slices \([0-9]*\)$/\1/p' "$TB_OUT/log-check.txt")
tb_fact slices "${slices:-0}"
# shrinks that stalled in a guest and were settled at the unit it reached
tb_fact settled_stalls "$(grep -o '"settle":true' "$LOG" | wc -l)"
# decisions brought forward by a p99 window over the SLO (docs/policy.md)
tb_fact early_decisions "$(grep -o '"early":"lc"' "$LOG" | wc -l)"
tb_check_ge "daemon-moved-fmem" "${slices:-0}" 1

# What each VMM reported at rest (FMem balloon actual = target), in
# order, must be a subsequence of that VM's shares in the log (its start
# share, then after every slice): the VMMs never held an FMem share the
# log does not have. Per VM, because one poll reads the three VMMs one
# after another (a slice may fall between two of the reads).
sed -n 's/^targets //p' "$TB_OUT/log-check.txt" >"$TB_OUT/targets.txt"
tb_fact completed_decisions "$(wc -l <"$TB_OUT/targets.txt")"
for v in $VMS; do
    case $v in lc) c=3 ;; be1) c=7 ;; be2) c=11 ;; esac
    logseq=$(sed -n "s/^seq $v //p" "$TB_OUT/log-check.txt")
    out=$(awk -v c="$c" -v tier="$TIER" -v unit="$UNIT" -v logseq="$logseq" '
        BEGIN { n = split(logseq, L, " "); j = 1 }
        $c >= 0 && $c == $(c + 1) {
            if ((tier - $c) % unit) { bad = bad " " $c "B"; next }
            u = (tier - $c) / unit
            if (u == prev) next
            prev = u
            seen = seen " " u
            while (j <= n && L[j] != u) j++
            if (j > n) { bad = bad " " u; j = n + 1 }
        }
        END { printf "%s|%s\n", seen, bad }' "$POLL")
    seen=${out%|*}
    bad=${out#*|}
    if [ -n "$logseq" ] && [ -z "$bad" ]; then
        tb_pass "$v-vmm-matches-log" "VMM at rest:$seen; log: $logseq"
    else
        tb_fail "$v-vmm-matches-log" "VMM at rest:$seen; log: ${logseq:-none}; not in order in the log:$bad"
    fi
done
# after the daemon stopped, each VMM's FMem balloon target is the share
# the log left it with
# shellcheck disable=SC2086 # 12 numbers
set -- $final
want=""
for v in $VMS; do
    want="$want $(sed -n "s/^seq $v //p" "$TB_OUT/log-check.txt" | awk '{ print $NF }')"
done
tb_check_eq "final-state-is-the-log's" "$want" " $(((TIER - $1) / UNIT)) $(((TIER - $5) / UNIT)) $(((TIER - $9) / UNIT))"

# the per-tier access tags on the host API, and in the daemon's inputs
for v in lc be1 be2; do
    case $v in lc) c=5 ;; be1) c=9 ;; be2) c=13 ;; esac
    best=$(awk -v c="$c" '{ s = $c + $(c + 1); if ($c >= 0 && $(c + 1) >= 0 && s > m) m = s } END { print m + 0 }' "$POLL")
    tb_fact "${v}_tier_accesses" "$best"
    # memcached at low load may never be sampled young (see l2.sh)
    [ "$v" = lc ] || tb_check_ge "$v-access-tags-on-host-api" "$best" 1
done
rates=$(grep -o '"access_rate":[0-9.e+-]*,"fmem_access_ratio":[0-9.e+-]*' "$LOG" | wc -l)
tb_fact daemon_inputs_with_access_rate "$rates"
tb_check_ge "daemon-used-guest-access-counts" "$rates" 1

echo "--- tier-policy stderr (tail) ---"
tb_show_tail "$TB_OUT/tier-policy.stderr" 15 'TP| '
echo "--- kvload (tail) ---"
tb_show_tail "$KVLOG" 8 'KV| '
for v in $VMS; do
    echo "--- $v serial (tail) ---"
    tb_show_tail "$TB_OUT/$v.serial" 12 "$v| "
done
tb_finish

# shellcheck shell=bash
# Running scenarios for scripts/testbed.sh (sourced): nested (QEMU TCG L1),
# direct (on this host), l2-in-qemu (guest half only), and the summary.
#
# Results per scenario: TB_RESULT[s] = PASS | FAIL | SKIP | TIMEOUT |
# L1-FAIL (interrupted by an L1-level failure) | NOT-RUN, TB_RC[s],
# TB_MS[s] (duration), TB_NOTE[s], TB_JSON[s] (last JSON line of its output).

declare -gA TB_RESULT=() TB_RC=() TB_MS=() TB_NOTE=() TB_JSON=()
TB_L1_FAILS=()
TB_L1_BOOTS=0

TB_L1_BOOT_TIMEOUT=${TB_L1_BOOT_TIMEOUT:-180} # L1 reaches its /init
TB_HANG_GRACE=${TB_HANG_GRACE:-60}            # L1 init enforces timeouts; beyond this L1 is hung
TB_L1_SILENCE=${TB_L1_SILENCE:-120}           # no L1 heartbeat (every 15 s) for this long: L1 is frozen

# TCG threading: "multi" runs each emulated CPU on its own host thread;
# "single" runs them round-robin on one, which rules out the cross-CPU
# code-modification races described in docs/testbed.md, at a speed cost.
TB_TCG_THREAD=${TB_TCG_THREAD:-multi}
[[ $TB_TCG_THREAD == multi || $TB_TCG_THREAD == single ]] ||
    tb_die "$TB_EXIT_USAGE" "TB_TCG_THREAD must be multi or single"

# Transparent huge pages in the emulated L1 host: "never" by default. With
# nested paging on (below), releasing 4 KiB pieces of THP-backed guest RAM
# under a running L2 crashed it at the balloon scenario's 1:1 -> 1:4 step
# in every run; THP off made that rarer but did not end it (NPT off did).
# TB_L1_THP=always brings THP back.
TB_L1_THP=${TB_L1_THP:-never}

# The emulated L1 CPU model (QEMU -cpu): EPYC offers SVM.
TB_L1_CPU=${TB_L1_CPU:-EPYC}
# Nested paging (NPT) in that CPU: off by default, so L1's KVM runs the L2
# with shadow paging. With NPT, QEMU TCG's nested-paging emulation let L2s
# crash (and corrupt the L1 kernel) whenever L1 took memory away from a
# running L2, e.g. balloon inflation (docs/testbed.md, "Nested paging in
# L1"). Scenarios with an `l1-npt` file need NPT (vmmload-kvm-npt: its
# accessed-bit re-arm by TLB flush needs hardware-set A bits) and get L1
# boots of their own with it. TB_L1_NPT=on|off forces one mode for every scenario.
TB_L1_NPT=${TB_L1_NPT:-auto}
[[ $TB_L1_NPT == auto || $TB_L1_NPT == on || $TB_L1_NPT == off ]] ||
    tb_die "$TB_EXIT_USAGE" "TB_L1_NPT must be auto, on or off"
TB_L1_CPU_ARG=$TB_L1_CPU
[[ $TB_L1_THP == never || $TB_L1_THP == always || $TB_L1_THP == madvise ]] ||
    tb_die "$TB_EXIT_USAGE" "TB_L1_THP must be never, madvise or always"

# L1 QEMU machine: node 0 = 2 CPUs + 4 GiB, node 1 = memory-only 3 GiB (room
# for a 1280 MiB SMem zone bound to it plus the L1 kernel's own use),
# HMAT makes node 1 the slower tier (latency ns, bandwidth bytes/s).
# shellcheck disable=SC2054 # commas belong to QEMU option values
TB_L1_QEMU_ARGS=(
    -accel "tcg,thread=$TB_TCG_THREAD" -M pc,hmat=on -smp 2 -m 7G
    -object memory-backend-ram,id=m0,size=4G
    -object memory-backend-ram,id=m1,size=3G
    -numa node,nodeid=0,cpus=0-1,memdev=m0,initiator=0
    -numa node,nodeid=1,memdev=m1,initiator=0
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20G
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5G
    -nodefaults -display none -monitor none -no-reboot
)

# L2 under QEMU (--l2-in-qemu): resembles numa-boot's VMM configuration.
# shellcheck disable=SC2054
TB_L2_QEMU_ARGS=(
    -accel "tcg,thread=$TB_TCG_THREAD" -M pc,hmat=on -cpu EPYC -smp 2 -m 1536M
    -object memory-backend-ram,id=m0,size=512M
    -object memory-backend-ram,id=m1,size=1G
    -numa node,nodeid=0,cpus=0-1,memdev=m0,initiator=0
    -numa node,nodeid=1,memdev=m1,initiator=0
    -numa dist,src=0,dst=1,val=25
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=80
    -numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20000M
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=200
    -numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=8000M
    -nodefaults -display none -monitor none -no-reboot
)

# --- host detection ----------------------------------------------------
tb_host_has_hw_virt() {
    grep -qwE 'vmx|svm' /proc/cpuinfo || return 1
    [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]] || return 1
    [[ -c /dev/kvm ]]
}

tb_host_virt_desc() {
    local flag mods="" m
    flag=$(grep -owE 'vmx|svm' /proc/cpuinfo | head -n 1 || true)
    for m in kvm_intel kvm_amd kvm_pvm; do if [[ -d /sys/module/$m ]]; then mods+=" $m"; fi; done
    printf 'cpu flag: %s; kvm modules:%s' "${flag:-none}" "${mods:- none}"
}

# --- cargo -------------------------------------------------------------
# Static release build of our binaries. RUSTFLAGS=+crt-static without
# --target also applies to proc-macro crates and fails ("cannot produce
# proc-macro ... does not support these crate types"), so the target triple
# is given explicitly: binaries land in target/$TB_TARGET_TRIPLE/release.
tb_cargo_build() {
    local log=$1 t0
    if ! command -v cargo >/dev/null 2>&1; then
        tb_warn "cargo not found: using existing binaries"
        BUILD_NOTE="cargo not found"
        return 1
    fi
    t0=$(tb_host_ms)
    tb_msg "cargo build --release --bins --target $TB_TARGET_TRIPLE (crt-static), log: $log"
    if (cd "$TB_ROOT" && RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
        timeout "${TB_CARGO_TIMEOUT:-2400}" cargo build --release --bins --target "$TB_TARGET_TRIPLE") >"$log" 2>&1; then
        tb_msg "cargo build ok ($(tb_fmt_secs $(($(tb_host_ms) - t0))) s)"
        TB_STATIC_BUILT=1 # tb_find_binaries takes these, not target/release
        return 0
    fi
    tb_warn "cargo build FAILED; continuing with whatever binaries exist. Last lines:"
    tail -n 15 "$log" | sed 's/^/    /' >&2
    BUILD_NOTE="cargo build failed (see $log); existing binaries were used"
    return 1
}

# --- console monitor ---------------------------------------------------
# tb_monitor CONSOLE PID LINE-FN TICK-FN: feed complete console lines to
# LINE-FN until PID exits; call TICK-FN at least once a second (it may
# decide to kill PID). Bounded by the caller's TICK-FN.
tb_monitor() {
    local console=$1 pid=$2 line_fn=$3 tick_fn=$4 fd line="" buf="" st
    exec {fd}< <(exec tail -n +1 -s 0.2 -F --pid="$pid" "$console" 2>/dev/null)
    while :; do
        line=""
        if IFS= read -r -t 1 -u "$fd" line; then
            "$line_fn" "$buf$line"
            buf=""
        else
            st=$?
            if ((st > 128)); then
                buf+=$line
            else
                [[ -n $buf$line ]] && "$line_fn" "$buf$line"
                break
            fi
        fi
        "$tick_fn"
    done
    exec {fd}<&-
}

# tb_kill_tree PID: TERM, then KILL after 5 s (bounded).
tb_kill_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

tb_last_json() { # FILE
    grep -a '^{.*"scenario"' "$1" 2>/dev/null | tail -n 1 || true
}

# The checks a scenario reported false, each failure's reason (CI shows
# only an excerpt of the output: the reasons come first, short), and the
# tail of its log.
tb_failed_checks() { # SCENARIO
    local log=$RUN_DIR/$1/output.log bad
    bad=$(grep -o '"[A-Za-z0-9_.-]*":false' <<<"${TB_JSON[$1]:-}" | tr '\n' ' ' || true)
    [[ -n $bad ]] && printf '    false checks: %s\n' "$bad"
    [[ -f $log ]] || return 0
    grep -a 'FAIL: ' "$log" | head -n 6 | cut -c 1-400 | sed 's/^/    ! /'
    grep -av '^{' "$log" | tail -n 4 | sed 's/^/    | /'
    # a hung L2: where its VM exits came from (tb_vmm_diag, lib/l1.sh)
    local diag
    for diag in "$RUN_DIR/$1"/vmm-diag*.txt; do
        [[ -f $diag ]] || continue
        awk -v f="${diag##*/}" '/^## kvm_exit/ { on = 1; next } on && /^#/ { exit }
            on && n < 4 { sub(/^ +/, ""); out = out (n++ ? "; " : "") $0 }
            END { if (n) printf "    @ L2 exits (%s): %s\n", f, substr(out, 1, 400) }' "$diag"
    done
    return 0
}

tb_result_of_rc() { # rc -> result word
    case $1 in
    0) echo PASS ;;
    77) echo SKIP ;;
    124) echo TIMEOUT ;;
    *) echo FAIL ;;
    esac
}

# --- nested ------------------------------------------------------------
_l1_line() {
    local l=${1//$'\r'/} now name rc ms
    now=$(tb_host_ms)
    case $l in
    *"@@TB HEARTBEAT"*)
        L1_BEAT=$now
        return
        ;;
    *"@@TB L1-READY"*)
        L1_READY=1
        L1_BEAT=$now
        tb_msg "L1 is up after $(tb_fmt_secs $((now - L1_T0))) s: ${l#*@@TB L1-READY }"
        ;;
    *"@@TB BEGIN "*)
        name=${l#*@@TB BEGIN }
        name=${name%% *}
        L1_CUR=$name
        L1_CUR_T0=$now
        L1_CUR_DEADLINE=$((now + (${TB_TIMEOUTS[$name]} + TB_HANG_GRACE) * 1000))
        mkdir -p "$RUN_DIR/$name"
        # keep the partial output of a boot that failed at L1 level
        if [[ -s $RUN_DIR/$name/output.log ]]; then
            mv -f "$RUN_DIR/$name/output.log" "$RUN_DIR/$name/output.boot$((TB_L1_BOOTS - 1)).log"
        fi
        : >"$RUN_DIR/$name/output.log"
        printf '==== %s: begin (L1 boot %d) ====\n' "$name" "$TB_L1_BOOTS"
        return
        ;;
    *"@@TB END "*)
        [[ $l =~ @@TB\ END\ ([^ ]+)\ rc=([0-9]+)\ ms=([0-9]+) ]] || return 0
        name=${BASH_REMATCH[1]}
        rc=${BASH_REMATCH[2]}
        ms=${BASH_REMATCH[3]}
        TB_RC[$name]=$rc
        TB_MS[$name]=$ms
        TB_RESULT[$name]=$(tb_result_of_rc "$rc")
        TB_JSON[$name]=$(tb_last_json "$RUN_DIR/$name/output.log")
        if [[ $rc == 124 ]]; then TB_NOTE[$name]="killed by the L1 init after ${TB_TIMEOUTS[$name]} s"; fi
        printf '==== %s: %s (rc=%s, %s s) ====\n' "$name" "${TB_RESULT[$name]}" "$rc" "$(tb_fmt_secs "$ms")"
        L1_CUR=""
        return
        ;;
    *"@@TB L1-DONE"*)
        L1_DONE=1
        L1_EXIT_DEADLINE=$((now + 30000))
        ;;
    esac
    if [[ $l =~ ^\[\ *[0-9]+\.[0-9]+\]\ Kernel\ panic ]] || [[ $l == "Kernel panic"* ]]; then
        L1_PANIC=$l
        L1_EXIT_DEADLINE=$((now + 15000))
    fi
    if [[ -n $L1_CUR ]]; then
        printf '%s\n' "$l" >>"$RUN_DIR/$L1_CUR/output.log"
        printf '%s\n' "$l"
    elif ((!QUIET)); then
        printf 'L1| %s\n' "$l"
    fi
}

_l1_tick() {
    local now
    now=$(tb_host_ms)
    [[ -n $L1_KILLED ]] && return 0
    if ((now > TB_OVERALL_DEADLINE)); then
        L1_REASON="overall timeout (${OVERALL} s) reached"
    elif ((!L1_READY && now > L1_T0 + TB_L1_BOOT_TIMEOUT * 1000)); then
        L1_REASON="L1 did not reach its init within ${TB_L1_BOOT_TIMEOUT} s"
    elif ((L1_READY)) && [[ -z $L1_DONE ]] && ((now > L1_BEAT + TB_L1_SILENCE * 1000)); then
        L1_REASON="L1 hung: no heartbeat for ${TB_L1_SILENCE} s${L1_CUR:+ (in scenario $L1_CUR)}"
    elif [[ -n $L1_CUR ]] && ((now > L1_CUR_DEADLINE)); then
        L1_REASON="L1 hung: scenario $L1_CUR gave no END ${TB_HANG_GRACE} s after its ${TB_TIMEOUTS[$L1_CUR]} s timeout"
    elif ((L1_EXIT_DEADLINE && now > L1_EXIT_DEADLINE)); then
        if [[ -n $L1_DONE ]]; then tb_warn "L1 finished but QEMU did not exit within 30 s: killing it"; fi
        L1_KILLED=1
        tb_kill_pid "$L1_QPID" &
        return 0
    else
        return 0
    fi
    if [[ $L1_REASON == "L1 hung"* ]]; then
        # Where the vCPUs are (L1 kernel, L2 guest mode, halted) before the
        # kill: the only evidence a frozen L1 leaves.
        local state=$RUN_DIR/l1-hang-cpus-$L1_ATTEMPT.txt cpus
        if cpus=$(timeout 20 "$TB_ROOT/scripts/lib/qmp-cpu-state.py" "$L1_QMP" "$state"); then
            L1_REASON+=" (vCPU state: $(basename "$state"): $cpus)"
        fi
    fi
    tb_warn "$L1_REASON: killing QEMU"
    L1_KILLED=1
    tb_kill_pid "$L1_QPID" &
}

# _l1_kernel_report CONSOLE: the L1 kernel's first stall, lockup or crash
# report and the first functions of its trace, on one line (CI shows only
# the summary of a run: this is the evidence of a frozen L1 that it keeps).
_l1_kernel_report() {
    awk '
        !found && /rcu: INFO|rcu_.*detected stall|soft lockup|hard LOCKUP|BUG:|Oops|general protection|blocked for more than/ {
            found = 1; sub(/^\[ *[0-9.]+\] /, ""); out = $0; next
        }
        found && /RIP: |^\[ *[0-9.]+\]  [a-z_0-9.]+\+0x/ && n < 5 {
            sub(/^\[ *[0-9.]+\] +/, ""); out = out " | " $0; n++
        }
        END { print substr(out, 1, 600) }
    ' "$1" 2>/dev/null | tr -d '\r'
}

# tb_boot_l1 ATTEMPT SCENARIO... : one L1 boot. Returns 0 when L1 ran to
# its end, 1 on an L1-level failure (recorded in TB_L1_FAILS).
tb_boot_l1() {
    local attempt=$1 s spec="" append qrc=0 why qtail
    shift
    local console=$RUN_DIR/l1-console-$attempt.log
    local outtar=$RUN_DIR/l1-out-$attempt.tar
    local qlog=$RUN_DIR/qemu-l1-$attempt.log
    # CPU resets with their register state: an L1 that dies with no
    # message (QEMU exits rc=0 under -no-reboot) triple-faulted if QEMU
    # logged "Triple fault" here.
    local rlog=$RUN_DIR/qemu-l1-$attempt-resets.log
    for s; do spec+="${spec:+,}$s:${TB_TIMEOUTS[$s]}"; done
    append="console=ttyS0 loglevel=4 panic=-1 transparent_hugepage=$TB_L1_THP tb.mode=nested tb.scenarios=$spec"
    case ${TB_VMM_OVERRIDE:-} in
    '') ;;
    qemu) append+=" tb.vmm=/tb/bin/qemu-as-ch" ;;
    *) append+=" tb.vmm=/tb/bin/vmm-override" ;;
    esac
    append+=${L1_APPEND:+ $L1_APPEND}
    : >"$console"
    : >"$outtar"
    TB_L1_BOOTS=$((TB_L1_BOOTS + 1))
    L1_READY=0 L1_DONE="" L1_PANIC="" L1_REASON="" L1_CUR="" L1_KILLED="" L1_EXIT_DEADLINE=0 L1_BEAT=0
    L1_T0=$(tb_host_ms)
    L1_ATTEMPT=$attempt
    L1_QMP=$RUN_DIR/qmp-l1-$attempt.sock
    rm -f "$L1_QMP"
    tb_msg "booting L1 (attempt $attempt) for: $* -- console: $console"
    qemu-system-x86_64 "${TB_L1_QEMU_ARGS[@]}" -cpu "$TB_L1_CPU_ARG" \
        -serial "file:$console" -serial "file:$outtar" \
        -kernel "/boot/vmlinuz-$TB_KVER" -initrd "$TB_L1_INITRD" \
        -append "$append" -d cpu_reset -D "$rlog" \
        -qmp "unix:$L1_QMP,server=on,wait=off" </dev/null >"$qlog" 2>&1 &
    L1_QPID=$!
    tb_monitor "$console" "$L1_QPID" _l1_line _l1_tick
    wait "$L1_QPID" || qrc=$?
    wait 2>/dev/null || true # the killer, if any
    tar -xif "$outtar" -C "$RUN_DIR" 2>/dev/null || true
    tb_msg "L1 boot $attempt ended after $(tb_fmt_secs $(($(tb_host_ms) - L1_T0))) s (QEMU rc=$qrc)"
    if [[ ! -s $console && $qrc != 0 && -z $L1_KILLED ]]; then
        sed 's/^/    /' "$qlog" >&2
        tb_die "$TB_EXIT_SETUP" "QEMU failed to start (rc=$qrc), see $qlog"
    fi
    [[ -n $L1_DONE ]] && return 0
    if [[ -n $L1_REASON ]]; then
        why=$L1_REASON
    elif [[ -n $L1_PANIC ]]; then
        why="L1 kernel panic: $L1_PANIC"
    elif grep -q 'Triple fault' "$rlog" 2>/dev/null; then
        why="L1 triple fault (QEMU exited rc=$qrc; CPU state before the reset in $(basename "$rlog"))"
    else
        why="QEMU exited (rc=$qrc) before L1 finished"
    fi
    qtail=$(grep -v -i 'warning' "$qlog" 2>/dev/null | tail -n 2 | tr '\n' ' ' || true)
    if [[ -n ${qtail// /} ]]; then why+=" [qemu: $qtail]"; fi
    local krep
    krep=$(_l1_kernel_report "$console")
    if [[ -n $krep ]]; then why+=" [L1 kernel: $krep]"; fi
    TB_L1_FAILS+=("boot $attempt: $why")
    for s; do
        [[ -n ${TB_RESULT[$s]:-} ]] && continue
        if [[ $s == "$L1_CUR" ]]; then
            TB_RESULT[$s]=L1-FAIL
            TB_NOTE[$s]="interrupted: $why"
            TB_MS[$s]=$(($(tb_host_ms) - L1_CUR_T0))
        else
            TB_RESULT[$s]=NOT-RUN
            TB_NOTE[$s]="not run: $why"
        fi
    done
    printf '\n!!!! L1-LEVEL FAILURE (boot %d): %s\n!!!! This is the testbed (emulated L1 host), not a scenario verdict. Console: %s\n\n' \
        "$attempt" "$why" "$console"
    return 1
}

# Crashes are evidence, never retried away. A scenario that FAILed with
# the L2 guest triple-faulting, its kernel panicking (l2-no-crash) or
# hanging (l2-no-hang), or the VMM crashing (a panic, a fatal signal, a
# seccomp denial) is a crash: its output is kept in
# <run>/<scenario>.boot<N> (serial log, VMM stderr with the registers,
# the scenario's own log up to the failing step), the summary lists it
# with a CRASH line, and it is run once more in another L1 boot, because
# nested SVM under QEMU TCG has shown intermittent L2 crashes with no VMM
# involvement (docs/testbed.md). A scenario that crashes twice in one run
# fails the run, whatever its last attempt did. TB_GUEST_CRASH_RETRIES
# (default 1) bounds the re-runs per scenario. L1-level failures (the
# emulated host itself) are retried up to TB_L1_RETRIES times (default 2).
TB_GUEST_CRASH_RETRIES=${TB_GUEST_CRASH_RETRIES:-1}
TB_L1_RETRIES=${TB_L1_RETRIES:-2}
TB_GUEST_CRASHES=()
declare -gA TB_CRASH_COUNT=() TB_RUN_COUNT=() TB_CRASH_WHERE=()
# What a VMM crash leaves in its stderr (the guest's triple fault is
# reported by the VMM as "guest triple fault").
TB_VMM_CRASH_RE='panicked at|seccomp: a .* thread made a forbidden syscall|Segmentation fault|SIGSEGV|SIGBUS|SIGABRT|core dumped'
tb_crash_kind() { # SCENARIO: prints the kind of crash its output shows, if any
    local d=$RUN_DIR/$1
    if grep -qs 'guest triple fault' "$d"/*.stderr "$d/output.log"; then
        echo "guest triple fault"
    elif grep -qsE "$TB_VMM_CRASH_RE" "$d"/*.stderr; then
        echo "VMM crash: $(grep -hsE "$TB_VMM_CRASH_RE" "$d"/*.stderr | head -n 1 | cut -c1-160)"
    elif grep -qs '^FAIL: l2-no-crash - ' "$d/output.log"; then
        # the guest kernel panicked or rebooted (tb_l2_crash, lib/l1.sh)
        echo "guest kernel $(grep -hs '^FAIL: l2-no-crash - ' "$d/output.log" | head -n 1 | cut -c21-180)"
    elif grep -qs '^FAIL: l2-no-hang - ' "$d/output.log"; then
        # the guest stopped answering (tb_l2_hang, lib/l1.sh)
        echo "guest hang: $(grep -hs '^FAIL: l2-no-hang - ' "$d/output.log" | head -n 1 | cut -c20-220)"
    fi
}
tb_find_guest_crashes() { # ATTEMPT SCENARIO...: sets TB_CRASHED
    local attempt=$1 s kind
    shift
    TB_CRASHED=()
    for s; do
        [[ -n ${TB_RESULT[$s]:-} && ${TB_RESULT[$s]} != L1-FAIL && ${TB_RESULT[$s]} != NOT-RUN ]] || continue
        TB_RUN_COUNT[$s]=$((${TB_RUN_COUNT[$s]:-0} + 1))
        [[ ${TB_RESULT[$s]} == FAIL ]] || continue
        kind=$(tb_crash_kind "$s")
        [[ -n $kind ]] || continue
        TB_CRASH_COUNT[$s]=$((${TB_CRASH_COUNT[$s]:-0} + 1))
        TB_CRASH_WHERE[$s]+="${TB_CRASH_WHERE[$s]:+; }boot $attempt: $kind, evidence in $s.boot$attempt"
        TB_CRASHED+=("$s")
        TB_GUEST_CRASHES+=("boot $attempt: $s ($kind)")
    done
}

# tb_run_nested SCENARIO...: the scenarios in L1 boots without nested
# paging, then those with an l1-npt file in L1 boots with it.
tb_run_nested() {
    local s on=() off=()
    for s; do
        case $TB_L1_NPT in
        on) on+=("$s") ;;
        off) off+=("$s") ;;
        *) if [[ -f $TB_ITEST/scenarios/$s/l1-npt ]]; then on+=("$s"); else off+=("$s"); fi ;;
        esac
    done
    if ((${#off[@]})); then
        TB_L1_CPU_ARG="$TB_L1_CPU,npt=off"
        tb_run_nested_boots "${off[@]}"
    fi
    if ((${#on[@]})); then
        TB_L1_CPU_ARG=$TB_L1_CPU
        tb_msg "L1 with nested paging (NPT) for: ${on[*]}"
        tb_run_nested_boots "${on[@]}"
    fi
}

tb_run_nested_boots() {
    local attempt=$((TB_L1_BOOTS + 1)) s next=() retry=() skipped=() l1_retried=0 l1_ok
    local todo=("$@")
    while :; do
        l1_ok=1
        tb_boot_l1 "$attempt" "${todo[@]}" || l1_ok=0
        next=()
        skipped=()
        for s in "${todo[@]}"; do
            if ((!l1_ok)); then
                case ${TB_RESULT[$s]:-} in L1-FAIL | NOT-RUN | '') next+=("$s") ;; esac
            elif [[ -z ${TB_RESULT[$s]:-} ]]; then
                skipped+=("$s") # L1 stopped after a guest crash (l1-init.sh)
            fi
        done
        tb_find_guest_crashes "$attempt" "${todo[@]}"
        retry=()
        (($(tb_host_ms) < TB_OVERALL_DEADLINE - 120000)) && ((RETRY)) || break
        if ((${#skipped[@]})); then
            tb_warn "L1 boot $attempt stopped after a guest crash; running in a fresh L1: ${skipped[*]}"
            for s in "${skipped[@]}"; do
                TB_NOTE[$s]="run in boot $((attempt + 1)): boot $attempt stopped after another scenario's guest crash"
            done
            retry+=("${skipped[@]}")
        fi
        if ((${#next[@]} && l1_retried < TB_L1_RETRIES)); then
            l1_retried=$((l1_retried + 1))
            # The scenario L1 died in goes last: if it brings the next L1
            # down too, the others have had their run.
            local waiting=() interrupted=()
            for s in "${next[@]}"; do
                if [[ ${TB_RESULT[$s]:-} == L1-FAIL ]]; then interrupted+=("$s"); else waiting+=("$s"); fi
            done
            next=("${waiting[@]}" "${interrupted[@]}")
            tb_warn "L1-level failure: re-booting L1 (boot $((attempt + 1))) for: ${next[*]}"
            for s in "${next[@]}"; do
                TB_NOTE[$s]="retried after L1-level failure in boot $attempt"
                unset "TB_RESULT[$s]"
            done
            retry+=("${next[@]}")
        fi
        for s in "${TB_CRASHED[@]}"; do
            # The evidence stays, whether or not the scenario runs again.
            rm -rf "$RUN_DIR/$s.boot$attempt"
            mv "$RUN_DIR/$s" "$RUN_DIR/$s.boot$attempt"
            if ((TB_CRASH_COUNT[$s] <= TB_GUEST_CRASH_RETRIES)); then
                tb_warn "$s crashed in boot $attempt (${TB_CRASH_WHERE[$s]##*; }); running it once more in L1 boot $((attempt + 1)) -- a second crash fails the run"
                TB_NOTE[$s]="crashed in boot $attempt, evidence in $s.boot$attempt; re-run"
                unset "TB_RESULT[$s]"
                retry+=("$s")
            else
                TB_NOTE[$s]="crashed ${TB_CRASH_COUNT[$s]} times: ${TB_CRASH_WHERE[$s]}"
            fi
        done
        ((${#retry[@]})) || break
        attempt=$((attempt + 1))
        todo=("${retry[@]}")
    done
}

# --- direct ------------------------------------------------------------
tb_run_direct() {
    local s out script pid killer rc t0 tailpid bin
    local dbin=$RUN_DIR/bin vmm
    mkdir -p "$dbin"
    case ${TB_VMM_OVERRIDE:-} in
    '') vmm=${TB_BINS[cloud-hypervisor]:-$TB_ROOT/target/release/cloud-hypervisor} ;;
    qemu) vmm=$TB_ITEST/guest/qemu-as-ch.sh ;;
    *) vmm=$TB_VMM_OVERRIDE ;;
    esac
    for bin in "${TB_TOOLS[@]}"; do ln -sf "$bin" "$dbin/$(basename "${bin%-*}")"; done
    tb_find_upstream
    for s; do
        out=$RUN_DIR/$s
        script=$TB_ITEST/scenarios/$s/l1.sh
        mkdir -p "$out"
        rm -f "$out/.timeout"
        printf '==== %s: begin (direct) ====\n' "$s"
        t0=$(tb_host_ms)
        # setsid: the scenario and everything it starts form one process
        # group that is killed on timeout.
        # shellcheck disable=SC2016 # $1/$2 belong to the inner sh
        env TB_MODE=direct TB_SCENARIO="$s" TB_SCENARIO_DIR="$TB_ITEST/scenarios/$s" \
            TB_LIB="$TB_ITEST/lib" TB_OUT="$out" TB_BIN="$dbin" TB_TIMEOUT="${TB_TIMEOUTS[$s]}" \
            TB_VMM="$vmm" \
            TB_CH_REMOTE="${TB_BINS[ch-remote]:-$TB_ROOT/target/release/ch-remote}" \
            TB_VMMLOAD="${TB_BINS[vmmload]:-$TB_ROOT/target/release/vmmload}" \
            TB_CH_UPSTREAM="${TB_UPSTREAM_BINS[/usr/local/bin/ch-upstream]:-}" \
            TB_CH_REMOTE_UPSTREAM="${TB_UPSTREAM_BINS[/usr/local/bin/ch-remote-upstream]:-}" \
            TB_L2_KERNEL="${TB_L2K_KERNEL[$s]:-/boot/vmlinuz-$TB_KVER}" \
            TB_L2_INITRD="${TB_L2K_INITRD[$s]:-$TB_L2_INITRD_HOST}" \
            TB_ROOT="$TB_ROOT" PATH="$dbin:$PATH" \
            setsid sh -c 'cd "$1" && exec sh "$2"' tb-scenario "$out" "$script" </dev/null >"$out/output.log" 2>&1 &
        pid=$!
        tail -n +1 -s 0.2 -f --pid="$pid" "$out/output.log" &
        tailpid=$!
        setsid bash -c "sleep ${TB_TIMEOUTS[$s]}; touch '$out/.timeout'; kill -TERM -$pid; sleep 5; kill -KILL -$pid" \
            >/dev/null 2>&1 &
        killer=$!
        rc=0
        wait "$pid" || rc=$?
        kill -KILL -- "-$killer" 2>/dev/null || true
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$tailpid" 2>/dev/null || true
        wait "$killer" 2>/dev/null || true
        if [[ -f $out/.timeout ]]; then
            rc=124
            TB_NOTE[$s]="killed after ${TB_TIMEOUTS[$s]} s"
        fi
        TB_RC[$s]=$rc
        TB_MS[$s]=$(($(tb_host_ms) - t0))
        TB_RESULT[$s]=$(tb_result_of_rc "$rc")
        TB_JSON[$s]=$(tb_last_json "$out/output.log")
        printf '==== %s: %s (rc=%s, %s s) ====\n' "$s" "${TB_RESULT[$s]}" "$rc" "$(tb_fmt_secs "${TB_MS[$s]}")"
        if (($(tb_host_ms) > TB_OVERALL_DEADLINE)); then
            tb_warn "overall timeout reached"
            break
        fi
    done
}

# --- l2-in-qemu --------------------------------------------------------
_l2_line() {
    local l=${1//$'\r'/} now
    now=$(tb_host_ms)
    printf '%s\n' "$l" >>"$RUN_DIR/$L2_NAME/output.log"
    printf '%s\n' "$l"
    case $l in
    *"@@TB-L2 INIT"*) tb_msg "L2 reached /init after $(tb_fmt_secs $((now - L2_T0))) s" ;;
    *"@@TB-L2 END $L2_NAME rc="*)
        L2_END_RC=${l##*rc=}
        L2_END_RC=${L2_END_RC%% *}
        L2_EXIT_DEADLINE=$((now + 20000))
        ;;
    esac
    if [[ $l =~ ^\[\ *[0-9]+\.[0-9]+\]\ Kernel\ panic ]]; then
        L2_PANIC=$l
        L2_EXIT_DEADLINE=$((now + 10000))
    fi
}

_l2_tick() {
    local now
    now=$(tb_host_ms)
    [[ -n $L2_KILLED ]] && return 0
    if ((now > TB_OVERALL_DEADLINE)); then
        L2_REASON="overall timeout (${OVERALL} s)"
    elif ((now > L2_DEADLINE)); then
        L2_REASON="timeout (${TB_TIMEOUTS[$L2_NAME]} s)"
    elif ((L2_EXIT_DEADLINE && now > L2_EXIT_DEADLINE)); then
        L2_KILLED=1
        tb_kill_pid "$L2_QPID" &
        return 0
    else
        return 0
    fi
    tb_warn "$L2_NAME: $L2_REASON: killing QEMU"
    L2_KILLED=1
    tb_kill_pid "$L2_QPID" &
}

tb_run_l2_in_qemu() {
    local s console qlog qrc
    for s; do
        L2_NAME=$s
        mkdir -p "$RUN_DIR/$s"
        : >"$RUN_DIR/$s/output.log"
        console=$RUN_DIR/$s/l2-console.log
        qlog=$RUN_DIR/$s/qemu.log
        : >"$console"
        L2_T0=$(tb_host_ms)
        L2_DEADLINE=$((L2_T0 + ${TB_TIMEOUTS[$s]} * 1000))
        L2_END_RC="" L2_PANIC="" L2_REASON="" L2_KILLED="" L2_EXIT_DEADLINE=0
        printf '==== %s: begin (L2 under QEMU TCG, no VMM) ====\n' "$s"
        qemu-system-x86_64 "${TB_L2_QEMU_ARGS[@]}" -serial "file:$console" \
            -kernel "${TB_L2K_KERNEL[$s]:-/boot/vmlinuz-$TB_KVER}" -initrd "${TB_L2K_INITRD[$s]:-$TB_L2_INITRD_HOST}" \
            -append "console=ttyS0 reboot=k panic=-1 tb.run=$s tb.standalone=1${L2_APPEND:+ $L2_APPEND}" \
            </dev/null >"$qlog" 2>&1 &
        L2_QPID=$!
        tb_monitor "$console" "$L2_QPID" _l2_line _l2_tick
        qrc=0
        wait "$L2_QPID" || qrc=$?
        wait 2>/dev/null || true
        if [[ ! -s $console && $qrc != 0 && -z $L2_KILLED ]]; then
            sed 's/^/    /' "$qlog" >&2
            tb_die "$TB_EXIT_SETUP" "QEMU failed to start (rc=$qrc), see $qlog"
        fi
        TB_MS[$s]=$(($(tb_host_ms) - L2_T0))
        if [[ -n $L2_END_RC ]]; then
            TB_RC[$s]=$L2_END_RC
            TB_RESULT[$s]=$(tb_result_of_rc "$L2_END_RC")
        else
            TB_RC[$s]=""
            TB_RESULT[$s]=FAIL
            if [[ -n $L2_REASON ]]; then TB_RESULT[$s]=TIMEOUT; fi
            TB_NOTE[$s]="${L2_REASON:-${L2_PANIC:+L2 kernel panic: $L2_PANIC}}"
            TB_NOTE[$s]=${TB_NOTE[$s]:-"QEMU exited (rc=$qrc) before the L2 scenario ended"}
        fi
        TB_JSON[$s]=$(tb_last_json "$RUN_DIR/$s/output.log")
        printf '==== %s: %s (%s s) ====\n' "$s" "${TB_RESULT[$s]}" "$(tb_fmt_secs "${TB_MS[$s]}")"
        (($(tb_host_ms) < TB_OVERALL_DEADLINE)) || break
    done
}

# --- summary -----------------------------------------------------------
tb_summary() {
    local s r code=$TB_EXIT_OK scen_fail=0 l1_fail=0 f crashed_twice=() failed=()
    printf '\n==== testbed summary (mode %s, run dir %s) ====\n' "$MODE" "$RUN_DIR"
    for s; do
        r=${TB_RESULT[$s]:-NOT-RUN}
        printf 'SUMMARY %-16s %-8s %6s s  rc=%-4s%s\n' "$s" "$r" "$(tb_fmt_secs "${TB_MS[$s]:-0}")" \
            "${TB_RC[$s]:--}" "${TB_NOTE[$s]:+  (${TB_NOTE[$s]})}"
        if [[ -n ${TB_JSON[$s]:-} ]]; then printf '        %s\n' "${TB_JSON[$s]}"; fi
        case $r in
        PASS) ;;
        L1-FAIL | NOT-RUN) l1_fail=1 failed+=("$s:$r") ;;
        *) scen_fail=1 failed+=("$s:$r") ;;
        esac
    done
    # Crash rate per scenario: crashes / runs that reached a verdict.
    for s; do
        ((${TB_CRASH_COUNT[$s]:-0})) || continue
        printf 'CRASH %-16s %d of %d runs crashed: %s\n' "$s" "${TB_CRASH_COUNT[$s]}" \
            "${TB_RUN_COUNT[$s]:-0}" "${TB_CRASH_WHERE[$s]}"
        if ((TB_CRASH_COUNT[$s] > 1)); then
            crashed_twice+=("$s")
            [[ ${TB_RESULT[$s]:-} == PASS ]] && scen_fail=1
        fi
    done
    if [[ $MODE == nested ]]; then
        printf 'L1 boots: %d' "$TB_L1_BOOTS"
        if ((${#TB_GUEST_CRASHES[@]})); then
            printf '; CRASHES (guest triple fault, kernel panic or hang, or VMM crash): %s' "${TB_GUEST_CRASHES[*]}"
        fi
        if ((${#TB_L1_FAILS[@]})); then
            printf '; L1-LEVEL FAILURES:\n'
            for f in "${TB_L1_FAILS[@]}"; do printf '  - %s\n' "$f"; done
        else
            printf '; no L1-level failure\n'
        fi
    fi
    if [[ -n ${BUILD_NOTE:-} ]]; then printf 'NOTE: %s\n' "$BUILD_NOTE"; fi
    # Last lines are what a truncated CI log keeps: name the failures there.
    if ((${#failed[@]})); then
        printf 'FAILED: %s\n' "${failed[*]}"
        for s in "${failed[@]}"; do
            s=${s%%:*}
            printf 'FAILED %s: %s\n' "$s" "${TB_NOTE[$s]:-see $RUN_DIR/$s/output.log}"
            tb_failed_checks "$s"
        done
    fi
    if ((scen_fail)); then
        code=$TB_EXIT_SCENARIO
        if ((${#crashed_twice[@]})); then
            printf 'RESULT: FAIL (crashed twice in this run: %s)\n' "${crashed_twice[*]}"
        else
            printf 'RESULT: FAIL (scenario failure)\n'
        fi
    elif ((l1_fail)); then
        code=$TB_EXIT_L1
        printf 'RESULT: L1-LEVEL FAILURE (testbed problem, no scenario verdict for some scenarios)\n'
    else
        printf 'RESULT: PASS\n'
    fi
    return "$code"
}

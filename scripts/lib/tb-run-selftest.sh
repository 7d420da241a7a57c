#!/usr/bin/env bash
# Self-test of the testbed harness's crash accounting (scripts/lib/tb-run.sh)
# without QEMU: L1 boots are replaced by a stub that replays a script of
# scenario outcomes. Checks that a guest triple fault, a guest kernel panic
# or hang, or a VMM crash is kept as evidence, re-run once, reported with a CRASH
# line and a crash rate, and fails the run when the same scenario crashes twice; and that
# after an L1-level failure the next boot runs the interrupted scenario last.
set -uo pipefail
ROOT=${TB_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
TB_ROOT=$ROOT
# shellcheck source=scripts/lib/tb-common.sh
source "$ROOT/scripts/lib/tb-common.sh"
# shellcheck source=scripts/lib/tb-run.sh
source "${TB_RUN_SH:-$ROOT/scripts/lib/tb-run.sh}"

pass=0
fail=0
check() { # NAME CONDITION...
    local name=$1
    shift
    if "$@"; then pass=$((pass + 1)); else
        fail=$((fail + 1))
        echo "FAIL: $name"
    fi
}

# OUTCOMES["boot:scenario"] = pass | triple | seccomp | fail
declare -A OUTCOMES
tb_boot_l1() { # the stub: one "L1 boot" replaying OUTCOMES
    local attempt=$1 s
    shift
    TB_L1_BOOTS=$((TB_L1_BOOTS + 1))
    echo "boot $attempt order: $*" >>"$RUN_DIR/boots.log"
    for s; do
        if [[ ${OUTCOMES[$attempt:$s]:-} == l1hang ]]; then
            # L1 froze in s: s interrupted, the rest of this boot not run
            TB_RESULT[$s]=L1-FAIL
            local rest=0 r
            for r; do
                ((rest)) && TB_RESULT[$r]=NOT-RUN
                [[ $r == "$s" ]] && rest=1
            done
            TB_L1_FAILS+=("boot $attempt: L1 hung")
            return 1
        fi
        mkdir -p "$RUN_DIR/$s"
        : >"$RUN_DIR/$s/vmm.stderr"
        case ${OUTCOMES[$attempt:$s]:-pass} in
        pass) TB_RESULT[$s]=PASS ;;
        fail) TB_RESULT[$s]=FAIL ;;
        triple)
            TB_RESULT[$s]=FAIL
            echo "cloud-hypervisor: guest triple fault on vcpu0" >"$RUN_DIR/$s/vmm.stderr"
            ;;
        panic)
            TB_RESULT[$s]=FAIL
            echo "FAIL: l2-no-crash - panic at serial.log line 982: Oops: int3: 0000 [#1] PREEMPT SMP NOPTI | RIP: 0010:do_user_addr_fault+0xcf/0x6a0 | Comm: exe (l2-crash.txt); VMM stopped" >"$RUN_DIR/$s/output.log"
            ;;
        hang)
            TB_RESULT[$s]=FAIL
            echo "FAIL: l2-no-hang - no console answer within 30 s after e-final stalled; L2 exits in 2 s: 812 reason hlt rip 0xffffffff81a0b2cf default_idle+0xf (vmm-diag-hang.txt); VMM stopped" >"$RUN_DIR/$s/output.log"
            ;;
        seccomp)
            TB_RESULT[$s]=FAIL
            echo "cloud-hypervisor: seccomp: a vcpu thread made a forbidden syscall 257 (run with --seccomp log to find every one)" >"$RUN_DIR/$s/vmm.stderr"
            ;;
        esac
        echo "boot $attempt" >"$RUN_DIR/$s/serial.log"
    done
    return 0
}

OUT_FILE=$(mktemp)
RUN_DIRS=()
cleanup() { rm -rf "$OUT_FILE" "${RUN_DIRS[@]}"; }
trap cleanup EXIT
run_case() { # runs the stubbed boots and the summary into OUT_FILE; sets rc and out
    RUN_DIR=$(mktemp -d)
    RUN_DIRS+=("$RUN_DIR")
    MODE=nested RETRY=1 QUIET=1 TB_OVERALL_DEADLINE=$(($(tb_host_ms) + 600000))
    TB_RESULT=() TB_RC=() TB_MS=() TB_NOTE=() TB_JSON=() TB_L1_FAILS=() TB_L1_BOOTS=0
    TB_GUEST_CRASHES=() TB_CRASH_COUNT=() TB_RUN_COUNT=() TB_CRASH_WHERE=()
    declare -gA TB_TIMEOUTS=([a]=60 [b]=60)
    tb_run_nested_boots a b >"$OUT_FILE" 2>&1
    tb_summary a b >>"$OUT_FILE" 2>&1
    rc=$?
    out=$(cat "$OUT_FILE")
}

# 1. a triple fault, then a pass: evidence kept, reported, run passes.
OUTCOMES=([1:a]=triple)
run_case
check "one crash then a pass exits 0" test "$rc" -eq 0
check "CRASH line with the rate" grep -q '^CRASH a  *1 of 2 runs crashed: boot 1: guest triple fault, evidence in a.boot1' <<<"$out"
check "evidence directory kept" test -f "$RUN_DIR/a.boot1/vmm.stderr"
check "the re-run passed" grep -q '^SUMMARY a  *PASS' <<<"$out"
check "b untouched" grep -q '^SUMMARY b  *PASS' <<<"$out"
check "no CRASH line for b" bash -c '! grep -q "^CRASH b" <<<"$1"' _ "$out"

# 2. the same scenario crashes twice (a VMM crash, then a triple fault).
OUTCOMES=([1:a]=seccomp [2:a]=triple)
run_case
check "two crashes fail the run" test "$rc" -eq "$TB_EXIT_SCENARIO"
check "RESULT names it" grep -q 'RESULT: FAIL (crashed twice in this run: a)' <<<"$out"
check "both crashes listed" grep -q '^CRASH a  *2 of 2 runs crashed: boot 1: VMM crash: .*seccomp.*; boot 2: guest triple fault' <<<"$out"
check "both evidence directories" test -d "$RUN_DIR/a.boot1" -a -d "$RUN_DIR/a.boot2"
check "no third boot" grep -q '^L1 boots: 2' <<<"$out"

# 3. a guest kernel panic (lib/l1.sh reports l2-no-crash), then a pass.
OUTCOMES=([1:b]=panic)
run_case
check "one panic then a pass exits 0" test "$rc" -eq 0
check "CRASH line names the panic" grep -q '^CRASH b  *1 of 2 runs crashed: boot 1: guest kernel panic at serial.log line 982: Oops: int3' <<<"$out"
check "panic evidence kept" test -f "$RUN_DIR/b.boot1/output.log"

# 3b. a guest that stopped answering (lib/l1.sh reports l2-no-hang), then a pass.
OUTCOMES=([1:a]=hang)
run_case
check "one hang then a pass exits 0" test "$rc" -eq 0
check "CRASH line names the hang" grep -q '^CRASH a  *1 of 2 runs crashed: boot 1: guest hang: no console answer within 30 s after e-final stalled; L2 exits' <<<"$out"
check "hang evidence kept" test -f "$RUN_DIR/a.boot1/output.log"

# 4. a plain failure is not a crash and is not re-run.
OUTCOMES=([1:b]=fail)
run_case
check "plain failure fails" test "$rc" -eq "$TB_EXIT_SCENARIO"
check "plain failure not re-run" grep -q '^L1 boots: 1' <<<"$out"
check "no CRASH line" bash -c '! grep -q "^CRASH" <<<"$1"' _ "$out"

# 5. L1 freezes in a: the next boot runs b first and a last.
OUTCOMES=([1:a]=l1hang)
run_case
check "L1 hang then passes exits 0" test "$rc" -eq 0
check "the interrupted scenario goes last" grep -q '^boot 2 order: b a$' "$RUN_DIR/boots.log"

echo "$pass passed, $fail failed"
((fail == 0))

#!/usr/bin/env bash
# Runs every test of the project: formatting and lints, Rust unit and
# integration tests, the guest classifier's user-space tests, vmmload's
# accuracy tests, the REST API contract test, and the end-to-end scenarios
# in the nested testbed (one L1 boot for all of them).
#
# Installs what is missing (Debian packages, the Rust components) first.
# Ends with "N passed, M failed" over the steps; exits non-zero if any failed.
#
# CI gives one run 90 minutes. TEST_BUDGET_S (default 4800 s) bounds this
# script: every step line carries the elapsed time, and the testbed, the
# last and longest step, gets what is left of the budget as its overall
# timeout, so an over-long or hung run ends with its own summary (which
# scenarios ran, which did not) instead of being cut off.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh

passed=0
failed=0
failed_steps=()
TEST_BUDGET_S=${TEST_BUDGET_S:-4800}
[[ $TEST_BUDGET_S =~ ^[0-9]+$ ]] || { echo "TEST_BUDGET_S wants seconds" >&2; exit 2; }
elapsed() { printf '+%dm%02ds' "$((SECONDS / 60))" "$((SECONDS % 60))"; }
step() {
    local name=$1
    shift
    printf '\n==== %s [%s] ====\n' "$name" "$(elapsed)"
    local start=$SECONDS
    # A step that hangs must not eat the budget of the others: a program
    # gets 15 minutes (the slowest takes about 3) or what is left of the
    # budget; shell functions (the testbed) bound themselves.
    local left=$((TEST_BUDGET_S - SECONDS)) cap=900
    ((cap <= left)) || cap=$left
    local run=(timeout -k 30 "$cap")
    declare -F "$1" >/dev/null && run=()
    if ((cap < 60)); then
        echo "no time left in the budget (TEST_BUDGET_S=$TEST_BUDGET_S): not run"
        false
    elif "${run[@]}" "$@"; then
        passed=$((passed + 1))
        printf '==== %s: PASS (%ds) [%s]\n' "$name" "$((SECONDS - start))" "$(elapsed)"
    else
        failed=$((failed + 1))
        failed_steps+=("$name")
        printf '==== %s: FAIL (%ds) [%s]\n' "$name" "$((SECONDS - start))" "$(elapsed)"
    fi
}

echo "test.sh: started $(date -u '+%F %T') UTC, budget ${TEST_BUDGET_S} s"
deps_install_all || { echo "dependency installation failed"; exit 1; }
printf 'dependencies ready [%s]\n' "$(elapsed)"

step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo test" cargo test --workspace --locked
# One static release build (the testbed's own, whose build step then finds
# nothing to do) also gives the policy check its binary: the host-target
# release build it used to make cost two minutes of the budget.
static_target=x86_64-unknown-linux-gnu
step "release build (static; the policy check and the testbed)" \
    env RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
    cargo build --release --locked --bins --target "$static_target"
step "tier-policy simulation (budget, slices, SLO, SA vs brute force, calibration)" \
    "target/$static_target/release/tier-policy" bench --model policy/models/lc-sac.safetensors --check

[[ -d guest/kmod/tiering/tests ]] && step "range classifier (user space)" make -s -C guest/kmod/tiering/tests
[[ -x scripts/test-vmmload.sh ]] && step "vmmload" ./scripts/test-vmmload.sh
[[ -x scripts/api-contract.sh ]] && step "REST API contract (against cloud-hypervisor)" env API_CONTRACT_TARGET=vmm ./scripts/api-contract.sh
step "MTP CPython extension (pip install, pytest, two-node migration)" ./guest/python/mtp/run-tests.sh
step "upstream ch-remote v53 against ours and upstream's VMM" ./scripts/test-ch-interop.sh
step "upstream v53 configs both ways (vm.info -> vm.create)" ./scripts/test-config-compat.sh
step "testbed harness: crashes are reported, not retried away" ./scripts/lib/tb-run-selftest.sh
# The testbed's CRASH lines (guest triple faults and kernel panics, VMM crashes; evidence
# kept even when a re-run passed) are repeated in the final summary.
mkdir -p build
testbed_log=build/test-testbed.log
testbed() {
    # What is left of the budget, less two minutes for the summary.
    local left=$((TEST_BUDGET_S - SECONDS - 120))
    ((left >= 300)) || { echo "testbed: only ${left} s of the budget left: not run"; return 1; }
    echo "testbed: overall timeout ${left} s (TEST_BUDGET_S=${TEST_BUDGET_S}, $(elapsed) used)"
    ./scripts/testbed.sh --overall-timeout "$left" "$@" 2>&1 | tee "$testbed_log"
}
step "testbed scenarios" testbed $(deps_testbed_scenarios)

printf '\n'
grep -a '^CRASH ' "$testbed_log" 2>/dev/null
((failed > 0)) && printf 'failed steps: %s\n' "${failed_steps[*]}"
printf '%d passed, %d failed [%s]\n' "$passed" "$failed" "$(elapsed)"
((failed == 0))

#!/usr/bin/env bash
# Runs every test of the project: formatting and lints, Rust unit and
# integration tests, the guest classifier's user-space tests, vmmload's
# accuracy tests, the REST API contract test, and the end-to-end scenarios
# in the nested testbed (one L1 boot for all of them).
#
# Installs what is missing (Debian packages, the Rust components) first.
# Ends with "N passed, M failed" over the steps; exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh

passed=0
failed=0
failed_steps=()
step() {
    local name=$1
    shift
    printf '\n==== %s ====\n' "$name"
    local start=$SECONDS
    if "$@"; then
        passed=$((passed + 1))
        printf '==== %s: PASS (%ds)\n' "$name" "$((SECONDS - start))"
    else
        failed=$((failed + 1))
        failed_steps+=("$name")
        printf '==== %s: FAIL (%ds)\n' "$name" "$((SECONDS - start))"
    fi
}

deps_install_all || { echo "dependency installation failed"; exit 1; }

step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo test" cargo test --workspace --locked
step "tier-policy simulation (budget, slices, SLO, SA vs brute force, calibration)" cargo run --release --locked -q -p tier-policy -- bench --model policy/models/lc-sac.safetensors --check

[[ -d guest/kmod/tiering/tests ]] && step "range classifier (user space)" make -s -C guest/kmod/tiering/tests
[[ -x scripts/test-vmmload.sh ]] && step "vmmload" ./scripts/test-vmmload.sh
[[ -x scripts/api-contract.sh ]] && step "REST API contract (against cloud-hypervisor)" env API_CONTRACT_TARGET=vmm ./scripts/api-contract.sh
step "MTP CPython extension (pip install, pytest, two-node migration)" ./guest/python/mtp/run-tests.sh
step "upstream ch-remote v53 against ours and upstream's VMM" ./scripts/test-ch-interop.sh
step "upstream v53 configs both ways (vm.info -> vm.create)" ./scripts/test-config-compat.sh
step "testbed harness: crashes are reported, not retried away" ./scripts/lib/tb-run-selftest.sh
# The testbed's CRASH lines (guest triple faults, VMM crashes; evidence
# kept even when a re-run passed) are repeated in the final summary.
mkdir -p build
testbed_log=build/test-testbed.log
testbed() { ./scripts/testbed.sh "$@" 2>&1 | tee "$testbed_log"; }
step "testbed scenarios" testbed $(deps_testbed_scenarios)

printf '\n'
grep -a '^CRASH ' "$testbed_log" 2>/dev/null
((failed > 0)) && printf 'failed steps: %s\n' "${failed_steps[*]}"
printf '%d passed, %d failed\n' "$passed" "$failed"
((failed == 0))

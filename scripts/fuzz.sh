#!/usr/bin/env bash
# Longer runs of the guest-facing parsers' property tests (the stable-Rust
# stand-in for cargo-fuzz, which needs a nightly toolchain these machines
# cannot install). `cargo test` runs the same targets with 64 cases each;
# this runs FUZZ_CASES (default 5000) per target in release mode:
#
#   block, net, console, rng   virtio chains of each device (descriptor
#                              tables, avail rings, request contents)
#   mmio                       the virtio-mmio transport's registers
#   pci                        a virtio-pci function's config space and
#                              BAR (common/notify/ISR/device config, MSI-X)
#   balloon                    inflate/deflate PFN lists and statistics
#   mem                        virtio-mem requests (plug/unplug/state)
#   http                       the REST API's request parser and router
#                              (properties, and as many mutated requests
#                              thrown at the real server)
#
# For each target it prints the cases run, the time, and what the inputs
# reached (sums of device counters, FUZZSTAT lines), then "N passed,
# M failed". A failing case is shrunk by proptest and printed; proptest
# also stores it under proptest-regressions/ so the next run tries it first.
#
# usage: scripts/fuzz.sh [TARGET...]     (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."

CASES=${FUZZ_CASES:-5000}
LOG_DIR=build/fuzz
mkdir -p "$LOG_DIR"

# target -> cargo test arguments
declare -A ARGS=(
    [block]="-p devices --lib fuzz_block_requests"
    [net]="-p devices --lib fuzz_net_queues"
    [console]="-p devices --lib fuzz_console_queues"
    [rng]="-p devices --lib fuzz_rng_requests"
    [mmio]="-p devices --test fuzz_mmio"
    [pci]="-p devices --lib fuzz_pci_guest_accesses"
    [balloon]="-p demeter_balloon --test fuzz_queues"
    [mem]="-p devices --lib fuzz_virtio_mem_requests"
    [http]="-p api --test fuzz_routing"
)
ORDER=(block net console rng mmio pci balloon mem http)

targets=("$@")
((${#targets[@]})) || targets=("${ORDER[@]}")
for t in "${targets[@]}"; do
    [[ -n ${ARGS[$t]:-} ]] || {
        echo "fuzz.sh: unknown target '$t' (known: ${ORDER[*]})" >&2
        exit 2
    }
done

echo "building the test binaries (release)..."
# shellcheck disable=SC2086 # ARGS values are word lists
cargo test --release --locked --no-run -p devices -p demeter_balloon -p api >"$LOG_DIR/build.log" 2>&1 || {
    tail -n 20 "$LOG_DIR/build.log"
    echo "0 passed, 1 failed"
    exit 1
}

passed=0
failed=0
for t in "${targets[@]}"; do
    log=$LOG_DIR/$t.log
    start=$SECONDS
    # shellcheck disable=SC2086
    if FUZZ_CASES=$CASES FUZZ_STATS=1 cargo test --release --locked ${ARGS[$t]} -- --nocapture >"$log" 2>&1; then
        verdict=PASS
        passed=$((passed + 1))
    else
        verdict=FAIL
        failed=$((failed + 1))
    fi
    cases=$CASES
    reached=$(grep -a '^FUZZSTAT' "$log" | awk '{for (i = 3; i <= NF; i++) { split($i, a, "="); s[a[1]] += a[2] } }
        END { for (k in s) printf "%s=%d ", k, s[k] }')
    printf '%-8s %s  cases=%s  %ds  %s\n' "$t" "$verdict" "$cases" "$((SECONDS - start))" "$reached"
    if [[ $verdict == FAIL ]]; then
        grep -a -E 'minimal failing input|panicked|Test failed' "$log" | head -n 5 | sed 's/^/    /'
        echo "    full log: $log"
    fi
done
echo "$passed passed, $failed failed"
((failed == 0))

#!/usr/bin/env bash
# End-to-end testbed for our VMM: boots an "L1" host under QEMU TCG (AMD
# CPU with SVM+NPT, two NUMA nodes with HMAT) where kvm_amd provides a real
# /dev/kvm, and runs scenario scripts there; or runs them directly on a host
# with hardware virtualization (--direct); or boots only the L2 guest half
# of a scenario under QEMU (--l2-in-qemu). See docs/testbed.md.
set -euo pipefail

TB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TB_BUILD=${TB_BUILD:-$TB_ROOT/build/testbed}
# shellcheck source=scripts/lib/tb-common.sh
. "$TB_ROOT/scripts/lib/tb-common.sh"
# shellcheck source=scripts/lib/tb-images.sh
. "$TB_ROOT/scripts/lib/tb-images.sh"
# shellcheck source=scripts/lib/tb-run.sh
. "$TB_ROOT/scripts/lib/tb-run.sh"

usage() {
    cat <<EOF
usage: scripts/testbed.sh [options] SCENARIO [SCENARIO...]
       scripts/testbed.sh --list
       scripts/testbed.sh --l2-in-qemu SCENARIO [SCENARIO...]

Runs tests/integration/scenarios/<name>/l1.sh inside a nested-virtualization
testbed (QEMU TCG "L1" host with kvm_amd, 2 NUMA nodes) -- all scenarios in
one L1 boot -- or directly on a host with VMX/SVM.

Modes (default: auto-detect; nested unless this host has vmx/svm and
kvm_intel/kvm_amd loaded):
  --nested              force the QEMU TCG L1 testbed
  --direct              run l1.sh scripts directly on this host
  --l2-in-qemu          boot the L2 kernel + initramfs under QEMU TCG (2 nodes:
                        2 CPUs + 512 MiB, memory-only 1 GiB, HMAT) and run
                        only the scenarios' l2.sh (no VMM involved)

Options:
  --list                list scenarios
  --all                 run every scenario (that has an l1.sh; l2.sh with
                        --l2-in-qemu) but the bench-* ones, in one L1 boot
  --timeout SECS        per-scenario timeout (default: scenario's 'timeout'
                        file, else 300)
  --overall-timeout S   bound for the whole run (default 300 + 2 x sum of
                        scenario timeouts)
  --no-build            do not run cargo build first
  --no-retry            do not re-boot L1 once after an L1-level failure
  --rebuild             ignore cached images
  --out DIR             run directory (default build/testbed/runs/<stamp>)
  --vmm qemu|PATH      nested/direct: use another VMM as TB_VMM: 'qemu' packs
                        QEMU/KVM behind a CH-style command line
                        (tests/integration/guest/qemu-as-ch.sh) to validate
                        scenarios before our VMM boots; PATH = any binary
  --l1-append ARGS      extra L1 kernel command-line arguments
  --l2-append ARGS      extra L2 kernel command-line arguments (--l2-in-qemu)
  -q, --quiet           do not stream consoles (summary and scenario output only)
  -h, --help            this help

Exit codes: 0 all passed; 1 a scenario failed or was skipped; 2 usage;
3 setup/build error; 4 L1-level failure (L1 panic, QEMU died, L1 timeout)
with no scenario failure.
EOF
}

list_scenarios() {
    local s d desc sides
    for s in $(tb_all_scenarios); do
        d=$TB_ITEST/scenarios/$s
        sides=""
        if [[ -f $d/l1.sh ]]; then sides+="l1"; fi
        if [[ -f $d/l2.sh ]]; then sides+="${sides:+,}l2"; fi
        desc=$(grep -h -m1 -E "^# $s(,| )[^:]*:|^# $s:" "$d/l1.sh" "$d/l2.sh" 2>/dev/null | head -n 1 | sed -e "s/^# ${s}[^:]*: *//" || true)
        printf '%-16s %-6s %s\n' "$s" "$sides" "$desc"
    done
}

MODE=auto
TIMEOUT=""
OVERALL=""
DO_BUILD=1
RETRY=1
TB_REBUILD=0
RUN_DIR=""
L1_APPEND=""
L2_APPEND=""
QUIET=0
TB_VMM_OVERRIDE=""
ALL=0
SCENARIOS=()

while (($#)); do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --list) list_scenarios; exit 0 ;;
    --all) ALL=1 ;;
    --nested) MODE=nested ;;
    --direct) MODE=direct ;;
    --l2-in-qemu) MODE=l2-in-qemu ;;
    --timeout) TIMEOUT=${2:?}; shift ;;
    --overall-timeout) OVERALL=${2:?}; shift ;;
    --no-build) DO_BUILD=0 ;;
    --no-retry) RETRY=0 ;;
    --rebuild) TB_REBUILD=1 ;;
    --out) RUN_DIR=${2:?}; shift ;;
    --l1-append) L1_APPEND=${2:?}; shift ;;
    --vmm) TB_VMM_OVERRIDE=${2:?}; shift ;;
    --l2-append) L2_APPEND=${2:?}; shift ;;
    -q | --quiet) QUIET=1 ;;
    -*) usage >&2; tb_die "$TB_EXIT_USAGE" "unknown option $1" ;;
    *) SCENARIOS+=("$1") ;;
    esac
    shift
done
if ((ALL)); then
    for s in $(tb_all_scenarios); do
        [[ $s == bench-* ]] && continue # benchmarks run through scripts/bench.sh
        # A `not-in-all` file takes a scenario out of --all; it says why.
        if [[ -f $TB_ITEST/scenarios/$s/not-in-all ]]; then
            tb_warn "--all leaves out $s: $(head -n 1 "$TB_ITEST/scenarios/$s/not-in-all")"
            continue
        fi
        if [[ $MODE == l2-in-qemu ]]; then
            [[ -f $TB_ITEST/scenarios/$s/l2.sh ]] && SCENARIOS+=("$s")
        else
            [[ -f $TB_ITEST/scenarios/$s/l1.sh ]] && SCENARIOS+=("$s")
        fi
    done
fi
((${#SCENARIOS[@]})) || { usage >&2; exit "$TB_EXIT_USAGE"; }
[[ -z $TIMEOUT || $TIMEOUT =~ ^[0-9]+$ ]] || tb_die "$TB_EXIT_USAGE" "--timeout wants seconds"
[[ -z $OVERALL || $OVERALL =~ ^[0-9]+$ ]] || tb_die "$TB_EXIT_USAGE" "--overall-timeout wants seconds"

if [[ -n $TB_VMM_OVERRIDE && $TB_VMM_OVERRIDE != qemu ]]; then
    [[ -x $TB_VMM_OVERRIDE ]] || tb_die "$TB_EXIT_USAGE" "--vmm $TB_VMM_OVERRIDE: not an executable"
    TB_VMM_OVERRIDE=$(readlink -f "$TB_VMM_OVERRIDE")
fi
for s in "${SCENARIOS[@]}"; do
    d=$TB_ITEST/scenarios/$s
    [[ $s =~ ^[A-Za-z0-9._-]+$ && -d $d ]] || tb_die "$TB_EXIT_USAGE" "unknown scenario '$s' (see --list)"
    if [[ $MODE == l2-in-qemu ]]; then
        [[ -f $d/l2.sh ]] || tb_die "$TB_EXIT_USAGE" "scenario '$s' has no l2.sh"
    else
        [[ -f $d/l1.sh ]] || tb_die "$TB_EXIT_USAGE" "scenario '$s' has no l1.sh"
    fi
done

# Per-scenario timeouts and the overall bound.
declare -A TB_TIMEOUTS=()
sum=0
for s in "${SCENARIOS[@]}"; do
    t=${TIMEOUT:-$(tr -dc '0-9' <"$TB_ITEST/scenarios/$s/timeout" 2>/dev/null || true)}
    TB_TIMEOUTS[$s]=${t:-300}
    sum=$((sum + TB_TIMEOUTS[$s]))
done
OVERALL=${OVERALL:-$((300 + 2 * sum))}
TB_OVERALL_DEADLINE=$(($(tb_host_ms) + OVERALL * 1000))

if [[ $MODE == auto ]]; then
    if tb_host_has_hw_virt; then MODE=direct; else MODE=nested; fi
    tb_msg "mode: $MODE (auto-detected: $(tb_host_virt_desc))"
else
    tb_msg "mode: $MODE (forced)"
fi

# --- setup -------------------------------------------------------------
pkgs=(busybox-static cpio xz-utils zstd kmod gcc libc6-dev linux-image-6.12-amd64)
pkgs+=(memcached) # the mtat-colo scenario's LC service (l2-tools)
pkgs+=(pciutils)  # lspci in the virtio-pci scenario's guest (l2-tools)
# vmmload-kvm's real-program suite (l1-tools; the rest are in a base install)
pkgs+=(pigz bzip2 sqlite3 jq git openssl perl mawk zstd)
if [[ $MODE != direct ]]; then pkgs+=(qemu-system-x86); fi
if [[ $MODE == nested ]]; then pkgs+=(numactl linux-headers-6.12-amd64); fi
tb_ensure_packages "${pkgs[@]}"
TB_KVER=$(tb_kernel_version) || tb_die "$TB_EXIT_SETUP" "no 6.12 kernel in /boot (linux-image-6.12-amd64)"
tb_msg "kernel: $TB_KVER"

mkdir -p "$TB_BUILD/runs"
if [[ -z $RUN_DIR ]]; then
    RUN_DIR=$TB_BUILD/runs/$(date +%Y%m%d-%H%M%S)-$$
fi
mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
ln -sfn "$RUN_DIR" "$TB_BUILD/last"
# keep the 20 newest run directories
# shellcheck disable=SC2012
{ ls -1dt "$TB_BUILD"/runs/*/ 2>/dev/null || true; } | tail -n +21 | xargs -r rm -rf --
tb_msg "run directory: $RUN_DIR"

BUILD_NOTE=""
if [[ $MODE != l2-in-qemu && $DO_BUILD == 1 ]]; then
    tb_cargo_build "$RUN_DIR/cargo-build.log" || true
fi

t_img=$(tb_host_ms)
tb_lock
tb_build_tools
case $MODE in
nested) tb_build_l1_initrd ;;
direct) tb_build_l2_initrd; tb_find_binaries ;;
l2-in-qemu) tb_build_l2_initrd ;;
esac
tb_unlock
tb_msg "images ready in $(tb_fmt_secs $(($(tb_host_ms) - t_img))) s"
if [[ $MODE != l2-in-qemu ]]; then
    for n in $TB_BIN_NAMES; do
        if [[ -n ${TB_BINS[$n]:-} ]]; then
            tb_msg "binary $n: ${TB_BINS[$n]} ($(date -r "${TB_BINS[$n]}" '+%F %T'))"
        else
            tb_msg "binary $n: not built (scenarios needing it will SKIP)"
        fi
    done
fi

# --- run ---------------------------------------------------------------
case $MODE in
nested) tb_run_nested "${SCENARIOS[@]}" ;;
direct) tb_run_direct "${SCENARIOS[@]}" ;;
l2-in-qemu) tb_run_l2_in_qemu "${SCENARIOS[@]}" ;;
esac
rc=0
tb_summary "${SCENARIOS[@]}" || rc=$?
exit "$rc"

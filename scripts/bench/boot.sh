#!/usr/bin/env bash
# Boot benchmark: time from VMM start to the L2 guest's /init and to its
# first userspace handshake, and the VMM's own resident memory (RSS minus
# the guest RAM it holds), medians over TB_BOOTS boots (default 5) per VMM.
# Our VMM and upstream Cloud Hypervisor v53 (../shared/anchors/
# cloud-hypervisor-v53/, packed into L1 when present) boot interleaved in
# ONE L1 boot of the nested testbed (scenario bench-boot, L1 with nested
# paging); QEMU/KVM behind the same command line (--vmm qemu) is measured
# in a second L1 boot of the same run as a further baseline. Boots in which
# the guest crashed or rebooted are reported and left out of the medians.
# One JSON line on stdout. Extra arguments go to scripts/testbed.sh (e.g.
# --no-build). TB_BENCH_QEMU=0 skips the QEMU baseline.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BOOTS=${TB_BOOTS:-5}
[[ $BOOTS =~ ^[1-9][0-9]*$ ]] || { echo "TB_BOOTS must be a positive integer" >&2; exit 2; }
out=$(mktemp -d /tmp/bench-boot.XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { # NAME [testbed options]
    local name=$1 rc=0
    shift
    echo "bench boot: $name run ($BOOTS boots per VMM), log $out/$name.log" >&2
    "$ROOT/scripts/testbed.sh" -q --out "$out/$name" --l1-append "tb.boots=$BOOTS" "$@" bench-boot >"$out/$name.log" 2>&1 || rc=$?
    [[ $rc == 0 ]] || { echo "bench boot: $name run: testbed rc $rc; tail of its log:" >&2; tail -n 15 "$out/$name.log" >&2; }
    mkdir -p "$ROOT/build/testbed"
    rm -rf "$ROOT/build/testbed/bench-boot-$name"
    cp -r "$out/$name" "$ROOT/build/testbed/bench-boot-$name" 2>/dev/null || true
    grep -h '^{"scenario":"bench-boot"' "$out/$name/bench-boot/output.log" 2>/dev/null | tail -n 1
}
main=$(run main "$@")
qemu='{}'
if [[ ${TB_BENCH_QEMU:-1} != 0 ]]; then qemu=$(run qemu --no-build --vmm qemu); fi
python3 - "$main" "$qemu" "$BOOTS" <<'PY'
import json, sys
def load(s):
    try:
        return json.loads(s)
    except ValueError:
        return {}
m, q = load(sys.argv[1]), load(sys.argv[2])
mf, qf = m.get("facts", {}), q.get("facts", {})
def pick(f, label):
    keys = ("init_ms_median", "ready_ms_median", "own_rss_kb_median", "rss_kb_median",
            "clean_boots", "crashed_boots", "crashes", "init_ms_all", "ready_ms_all",
            "own_rss_kb_all", "zone_mappings_found")
    if f.get(f"{label}_clean_boots") is None and f.get(f"{label}_crashed_boots") is None:
        return None
    return {k: f.get(f"{label}_{k}") for k in keys}
out = {"bench": "boot", "boots_per_vmm": int(sys.argv[3]),
       "mode": "nested testbed (QEMU TCG L1 with NPT, kvm_amd); ours and upstream interleaved in one L1 boot, QEMU in a second; compare within one run only",
       "result": m.get("result"), "ours": pick(mf, "ours")}
up = pick(mf, "upstream")
out["upstream_ch_v53"] = up if up is not None else {"error": mf.get("upstream_absent", "no upstream figures (see the run log)")}
out["baseline_qemu"] = pick(qf, "qemu") if qf else None
def ratio(a, b, k):
    try:
        return round(a[k] / b[k], 2)
    except (KeyError, TypeError, ZeroDivisionError):
        return None
o = out["ours"] or {}
for name, base in (("upstream", up or {}), ("qemu", out["baseline_qemu"] or {})):
    for k in ("init_ms_median", "ready_ms_median", "own_rss_kb_median"):
        r = ratio(o, base, k)
        if r is not None:
            out[f"ours_vs_{name}_{k.replace('_median', '')}"] = r
out["run_dirs"] = "build/testbed/bench-boot-main, build/testbed/bench-boot-qemu"
print(json.dumps(out))
PY

#!/usr/bin/env bash
# Boot benchmark (issue 2): time from VMM start to the L2 guest's /init and
# to its first userspace handshake (medians of 3 boots), and the VMM's own
# resident memory (RSS minus the guest RAM it holds), for our VMM and, as
# the baseline, QEMU/KVM behind the same command line (--vmm qemu), each in
# its own L1 boot of the nested testbed. One JSON line on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d /tmp/bench-boot.XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { # NAME [testbed options]
    local name=$1
    shift
    "$ROOT/scripts/testbed.sh" -q --out "$out/$name" "$@" bench-boot >"$out/$name.log" 2>&1 || true
    grep -h '^{"scenario":"bench-boot"' "$out/$name/bench-boot/output.log" 2>/dev/null | tail -n 1
}
ours=$(run ours)
qemu=$(run qemu --no-build --vmm qemu)
python3 - "$ours" "$qemu" <<'PY'
import json, sys
def facts(s):
    try:
        return json.loads(s).get("facts", {})
    except ValueError:
        return {}
o, q = facts(sys.argv[1]), facts(sys.argv[2])
out = {"bench": "boot", "mode": "nested testbed (QEMU TCG L1, kvm_amd); compare within one run only",
       "vmm": {k: o.get(k) for k in ("init_ms_median", "ready_ms_median", "vmm_own_rss_kb_median", "init_ms_all")},
       "baseline_qemu": {k: q.get(k) for k in ("init_ms_median", "ready_ms_median", "vmm_own_rss_kb_median", "init_ms_all")}}
try:
    out["init_vs_qemu"] = round(o["init_ms_median"] / q["init_ms_median"], 2)
except (KeyError, TypeError, ZeroDivisionError):
    pass
print(json.dumps(out))
PY

#!/usr/bin/env bash
# Balloon benchmark (issue 4): inflate/deflate rates per tier of our double
# balloon and the latency from the vm.resize call to the target reached,
# with Linux's stock single balloon on the same device measured in the same
# L1 boot as the baseline. Runs the bench-balloon testbed scenario and
# prints its figures as one JSON line on stdout (progress on stderr).
#
# Environment: TB_BENCH_BALLOON_MIB (default 512) is not forwarded into L1;
# edit the scenario to change the size.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d /tmp/bench-balloon.XXXXXX)
trap 'rm -rf "$out"' EXIT
rc=0
"$ROOT/scripts/testbed.sh" -q --out "$out/run" bench-balloon >"$out/log" 2>&1 || rc=$?
line=$(grep -h '^{"scenario":"bench-balloon"' "$out/run/bench-balloon/output.log" "$out/log" 2>/dev/null | tail -n 1 || true)
if [[ -z $line ]]; then
    tail -n 30 "$out/log" >&2
    echo "{\"bench\":\"balloon\",\"error\":\"no result (testbed rc $rc)\"}"
    exit 1
fi
python3 - "$line" "$rc" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
f = r.get("facts", {})
out = {"bench": "balloon", "result": r.get("result"), "testbed_rc": int(sys.argv[2]),
       "mode": r.get("mode"), "size_mib": f.get("size_mib"),
       "note": "times include ch-remote polling (~0.1 s); nested testbed (QEMU TCG L1), not a real host"}
for k in sorted(f):
    if k.endswith("_gib_s") or k.endswith("_latency_ms"):
        out[k] = f[k]
for t in ("fmem", "smem"):
    for d in ("inflate", "deflate"):
        ours, base = f.get(f"{t}_{d}_gib_s"), f.get(f"stock_{d}_gib_s")
        if ours and base:
            out[f"{t}_{d}_vs_stock"] = round(float(ours) / float(base), 2)
print(json.dumps(out))
PY

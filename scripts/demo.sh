#!/usr/bin/env bash
# Boots a tiered VM with our VMM and shows, from inside the guest, its NUMA
# and memory-tier layout: node 0 = FMem (512 MiB, both vCPUs, host node 0),
# node 1 = SMem (1 GiB, memory only, host node 1, lower memory tier).
#
# On this machine kind /dev/kvm cannot boot stock kernels, so the VM runs
# in the nested testbed (QEMU TCG emulating an AMD host with SVM and two
# NUMA nodes); on a real VMX/SVM host it runs directly. See docs/testbed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh
deps_install_all
echo "Booting a tiered VM (2 vCPUs; FMem 512 MiB on host node 0, SMem 1 GiB on host node 1)..."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
./scripts/testbed.sh numa-boot 2>&1 | tee "$log" || status=$?
run=$(ls -d build/testbed/runs/*/numa-boot 2>/dev/null | tail -n 1)
echo
echo "== What the guest saw (facts measured inside the L2 guest; full log in $run) =="
python3 - "$run/output.log" <<'PY' || true
import json, sys
line = [l for l in open(sys.argv[1], errors="replace") if l.startswith("{")][-1]
top = json.loads(line)["facts"]
f = top["l2"]["facts"]
print(f"guest kernel      {f['kernel']}")
for n in (0, 1):
    role = "FMem" if f[f"node{n}_cpus"] else "SMem (memory-only)"
    print(f"node {n} {role:<19} cpus=[{f[f'node{n}_cpus']}] present={f[f'node{n}_present_pages']*4//1024} MiB "
          f"MemTotal={f[f'node{n}_memtotal_kb']//1024} MiB distances=({f[f'node{n}_distance']}) memory_tier{f[f'node{n}_memory_tier']}")
PY
exit "$status"

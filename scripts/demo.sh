#!/usr/bin/env bash
# Boots a tiered VM with our VMM and shows, from inside the guest, its NUMA
# and memory-tier layout: node 0 = FMem (512 MiB, both vCPUs, host node 0),
# node 1 = SMem (1 GiB, memory only, host node 1, lower memory tier); then
# resizes the double balloon through the REST API (128 MiB from FMem, 384
# MiB from SMem) and shows each node giving exactly its share.
#
# On this machine kind /dev/kvm cannot boot stock kernels, so the VM runs
# in the nested testbed (QEMU TCG emulating an AMD host with SVM and two
# NUMA nodes); on a real VMX/SVM host it runs directly. See docs/testbed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh
deps_install_all
echo "Booting a tiered VM (2 vCPUs; FMem 512 MiB on host node 0, SMem 1 GiB on host node 1, double balloon)..."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
./scripts/testbed.sh demo 2>&1 | tee "$log" || status=$?
run=$(ls -d build/testbed/runs/*/demo 2>/dev/null | tail -n 1)
echo
echo "== What the guest saw, and what the double balloon did (full log in $run) =="
python3 - "$run/output.log" <<'PY' || true
import json, sys
line = [l for l in open(sys.argv[1], errors="replace") if l.startswith('{"scenario":"demo"')][-1]
f = json.loads(line)["facts"]
for n in (0, 1):
    kv = dict(p.split("=", 1) for p in f[f"node{n}"].split() if "=" in p)
    role = "FMem" if kv.get("cpus") else "SMem (memory-only)"
    print(f"guest node {n}  {role:<19} cpus=[{kv.get('cpus', '')}] MemTotal={int(kv.get('memtotal_kb', 0)) // 1024} MiB "
          f"distances=({kv.get('distance', '').replace(',', ' ')}) memory_tier{kv.get('tier', '?')}")
print()
print("ch-remote resize --balloon '[128M,384M]'   (one balloon per tier)")
for n, tier in ((0, "FMem"), (1, "SMem")):
    b, a = f[f"node{n}_free_mib_before"], f[f"node{n}_free_mib_after"]
    print(f"  node {n} ({tier}) free: {b} MiB -> {a} MiB  ({b - a} MiB ballooned)")
print(f"  vm.info memory_actual_size: {f['memory_actual_size_mib']} MiB of 1536 MiB")
PY
exit "$status"

#!/usr/bin/env bash
# Virtio device benchmark: boot time with virtio-pci against virtio-mmio
# (ours), and sequential/random 4 KiB disk I/O and bulk TCP over the TAP
# both ways (guest to host "tcp", host to guest "tcp_rx") with 1 and 2
# queues (queue pairs), our VMM on virtio-pci against upstream Cloud
# Hypervisor v53 (../shared/anchors/cloud-hypervisor-v53/, packed into L1
# when present; at 1 queue also upstream with its NIC offloads off: both
# NICs offer checksum/TSO offloads by default, and that run shows what
# they are worth here), all in ONE L1 boot of the nested testbed (scenario
# bench-devices; see its l1.sh: every step is bounded and a stuck one
# leaves diag-*.txt in the run directory). One JSON line on stdout. Extra
# arguments go to scripts/testbed.sh (e.g. --no-build). TB_BOOTS (default
# 3): boots per VMM for the boot times; TB_TCP_REPS (default 5, at most 9):
# TCP repetitions each way per VM (the figure is their median, every one
# is listed); TB_TCP_MIB (default 256): MiB per repetition.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BOOTS=${TB_BOOTS:-3}
[[ $BOOTS =~ ^[1-9][0-9]*$ ]] || { echo "TB_BOOTS must be a positive integer" >&2; exit 2; }
REPS=${TB_TCP_REPS:-5}
[[ $REPS =~ ^[1-9]$ ]] || { echo "TB_TCP_REPS must be 1..9" >&2; exit 2; }
MIB=${TB_TCP_MIB:-256}
[[ $MIB =~ ^[1-9][0-9]*$ ]] || { echo "TB_TCP_MIB must be a positive integer" >&2; exit 2; }
out=$(mktemp -d /tmp/bench-devices.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "bench devices: one L1 boot ($BOOTS boots per VMM, then I/O with 1 and 2 queues, TCP $REPS x $MIB MiB each way), log $out/run.log" >&2
rc=0
"$ROOT/scripts/testbed.sh" -q --out "$out/run" --l1-append "tb.boots=$BOOTS tb.tcpreps=$REPS tb.tcpmib=$MIB" "$@" bench-devices >"$out/run.log" 2>&1 || rc=$?
[[ $rc == 0 ]] || { echo "bench devices: testbed rc $rc; tail of its log:" >&2; tail -n 15 "$out/run.log" >&2; }
mkdir -p "$ROOT/build/testbed"
rm -rf "$ROOT/build/testbed/bench-devices"
cp -r "$out/run" "$ROOT/build/testbed/bench-devices" 2>/dev/null || true
line=$(grep -h '^{"scenario":"bench-devices"' "$out/run/bench-devices/output.log" 2>/dev/null | tail -n 1 || true)
python3 - "$line" <<'PY'
import json, sys
try:
    m = json.loads(sys.argv[1])
except ValueError:
    m = {}
f = m.get("facts", {})
out = {
    "bench": "devices",
    "mode": "nested testbed: QEMU TCG L1 (shadow paging), 2-vCPU L2 with 1 GiB, a 64 MiB raw disk on L1 tmpfs, a TAP to L1 (its TCP ends: busybox nc -e dd, 64 KiB a system call); every VMM in the same L1 boot",
    "note": "Figures are guest-clock rates under TCG emulation, dominated by the emulator: they are not absolute device performance and only compare VMMs, transports and queue counts within this one run.",
    "result": m.get("result"),
}
out["boot_ms_median"] = {k: f.get(f"{k}_boot_ms_median") for k in ("mmio", "pci", "upstream")}
out["boot_ms_all"] = {k: f.get(f"{k}_boot_ms_all") for k in ("mmio", "pci", "upstream")}
metrics = ["seqread_iops", "seqwrite_iops", "randread_iops", "randwrite_iops",
           "seqread_mib_s", "seqwrite_mib_s", "tcp_mbit_s", "tcp_mbit_s_all", "tcp_ms_all",
           "tcp_rx_mbit_s", "tcp_rx_mbit_s_all", "tcp_rx_ms_all"]
for who in ("ours", "upstream"):
    for q in (1, 2):
        out[f"{who}_q{q}"] = {k: f.get(f"{who}_q{q}_{k}") for k in metrics}
out["upstream_nooffload_q1"] = {k: f.get(f"upstream_nooffload_q1_{k}") for k in metrics}
if f.get("upstream_absent"):
    out["upstream_absent"] = f["upstream_absent"]
def ratio(a, b):
    try:
        return round(a / b, 2)
    except (TypeError, ZeroDivisionError):
        return None
# TCP: the ratio of the medians of the repetitions
rates = [k for k in metrics if not k.endswith("_all")]
out["ours_vs_upstream"] = {
    f"q{q}_{k}": ratio(out[f"ours_q{q}"][k], out[f"upstream_q{q}"][k])
    for q in (1, 2) for k in rates
}
for k in ("tcp_mbit_s", "tcp_rx_mbit_s"):
    out[f"ours_vs_upstream_nooffload_q1_{k}"] = ratio(
        out["ours_q1"][k], out["upstream_nooffload_q1"][k])
out["q2_vs_q1"] = {
    who: {k: ratio(out[f"{who}_q2"][k], out[f"{who}_q1"][k]) for k in rates}
    for who in ("ours", "upstream")
}
out["pci_vs_mmio_boot"] = ratio(out["boot_ms_median"]["pci"], out["boot_ms_median"]["mmio"])
out["params"] = {"boots": f.get("boots"), "disk_seconds_per_test": f.get("disk_seconds_per_test"), "tcp_mib": f.get("tcp_mib"), "tcp_reps": f.get("tcp_reps")}
out["failed_checks"] = [k for k, v in (m.get("checks") or {}).items() if v is not True]
out["run_dir"] = "build/testbed/bench-devices"
print(json.dumps(out))
PY

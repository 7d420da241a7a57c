#!/usr/bin/env bash
# Config compatibility with upstream Cloud Hypervisor v53: feeds upstream's
# vm.info config to our vm.create and ours to upstream's, both ways, for a
# minimal and a rich body. Needs ../shared/anchors/cloud-hypervisor-v53.
set -uo pipefail
cd "$(dirname "$0")/.."
ANCHOR=../shared/anchors/cloud-hypervisor-v53
if [ ! -x "$ANCHOR/cloud-hypervisor" ] || [ ! -x "$ANCHOR/ch-remote" ]; then
    echo "NOT RUN: anchors absent"
    exit 0
fi
# SKIP_BUILD=1 reuses target/release as it is.
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p vmm -p api || exit 1
OURS=target/release/cloud-hypervisor
OURS_CR=target/release/ch-remote
[ -x "$OURS_CR" ] || OURS_CR=$(ls target/release/ch-remote* 2>/dev/null | head -1)
WORK=$(mktemp -d)
UP_PID=""; OUR_PID=""
cleanup() {
    [ -n "$UP_PID" ] && kill "$UP_PID" 2>/dev/null
    [ -n "$OUR_PID" ] && kill "$OUR_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# Upstream's seccomp filter kills its HTTP thread on some error paths.
"$ANCHOR/cloud-hypervisor" --seccomp false --api-socket "path=$WORK/up.sock" \
    >"$WORK/up.log" 2>&1 </dev/null & UP_PID=$!
"$OURS" --api-socket "path=$WORK/our.sock" >"$WORK/our.log" 2>&1 </dev/null & OUR_PID=$!
for _ in $(seq 50); do
    [ -S "$WORK/up.sock" ] && [ -S "$WORK/our.sock" ] && break
    sleep 0.1
done

up() { "$ANCHOR/ch-remote" --api-socket "$WORK/up.sock" "$@"; }
ours() { "$OURS_CR" --api-socket "$WORK/our.sock" "$@"; }
config_of() { python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["config"]))'; }

pass=0; fail=0
check() { # name, command...
    local name=$1; shift
    if out=$("$@" 2>&1); then
        echo "ok   $name"; pass=$((pass + 1))
    else
        echo "FAIL $name: $out"; fail=$((fail + 1))
    fi
}

echo '{"payload":{"kernel":"/boot/vmlinuz","cmdline":"console=ttyS0"}}' >"$WORK/minimal.json"
cp vm_config/src/compat/upstream_rich.json "$WORK/rich.json"

for body in minimal rich; do
    # upstream -> ours
    up delete >/dev/null 2>&1
    check "$body: upstream accepts the body" up create "$WORK/$body.json"
    up info | config_of >"$WORK/$body.up.json"
    up delete >/dev/null 2>&1
    ours delete >/dev/null 2>&1
    check "$body: ours accepts upstream's vm.info config" ours create "$WORK/$body.up.json"
    # ours -> upstream
    ours info | config_of >"$WORK/$body.ours.json"
    ours delete >/dev/null 2>&1
    check "$body: upstream accepts our vm.info config" up create "$WORK/$body.ours.json"
    up delete >/dev/null 2>&1
done

# A request for something we do not do is refused, naming field and value.
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
c = json.load(open(f"{w}/rich.up.json"))
c["disks"][0]["pci_segment"] = 1
json.dump(c, open(f"{w}/seg.json", "w"))
c = json.load(open(f"{w}/minimal.up.json"))
c["console"]["mode"] = "Pty"
json.dump(c, open(f"{w}/pty.json", "w"))
PY
refused() { # file, expected text
    local out
    out=$(ours create "$1" 2>&1) && { echo "accepted"; return 1; }
    ours delete >/dev/null 2>&1
    grep -q -- "$2" <<<"$out" || { echo "$out"; return 1; }
}
check "ours refuses disks[0].pci_segment=1 naming it" refused "$WORK/seg.json" 'pci_segment=1'
check "ours refuses console.mode=Pty naming it" refused "$WORK/pty.json" 'console.mode=Pty'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

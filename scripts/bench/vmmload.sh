#!/usr/bin/env bash
# vmmload benchmark (issues 5 and 12): slowdown against native in the same
# run, per backend. Workloads: a CPU-bound Mandelbrot, md5sum of a large
# file (syscall-heavy), a write-heavy two-thread compressor (xz -T2) and
# three Python threads sharing one lock; each native, with tracking off,
# with write tracking only and with writes+reads tracked (default ring),
# interleaved per repetition so background noise hits all alike. Plus the
# cost of a relayed call (getppid), of clock_gettime and of a futex
# ping-pong between two threads.
#
# Backends: this machine's /dev/kvm (PVM here) directly, and standard KVM
# (kvm_amd with NPT) in the nested testbed's L1 through the bench-vmmload
# scenario, run under `flock /tmp/testbed.lock` (8-20 minutes; that L1 runs
# under TCG, so compare configurations within it, not with this machine).
# Prints one JSON line on stdout (progress on stderr).
#
# Environment: VMMLOAD_BIN (prebuilt binary), BENCH_REPS (default 3),
# BENCH_FILE_MB (default 256), BENCH_CPU_SCALE (default 8), BENCH_XZ_MB
# (default 16), BENCH_RINGS (extra ring sizes measured with writes+reads,
# default none, e.g. "256 4096"), BENCH_KVM=0 (skip the testbed part),
# BENCH_KVM_REPS (default 3), CARGO_TARGET_DIR.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$ROOT/tests/vmmload
WORK=$(mktemp -d /tmp/vmmload-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
REPS=${BENCH_REPS:-3}
FILE_MB=${BENCH_FILE_MB:-256}
SCALE=${BENCH_CPU_SCALE:-8}
XZ_MB=${BENCH_XZ_MB:-16}
RINGS=${BENCH_RINGS:-}
for v in "$REPS" "$FILE_MB" "$SCALE" "$XZ_MB" $RINGS; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || { echo "vmmload bench: '$v' is not a positive integer" >&2; exit 2; }
done

if [ -z "${VMMLOAD_BIN:-}" ]; then
	(cd "$ROOT" && cargo build -q --release -p vmmload) >&2
	VMMLOAD_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/vmmload
fi
BIN=$VMMLOAD_BIN

# Standard KVM in the testbed's L1: one JSON object (or an error object).
kvm_part() {
	if [[ ${BENCH_KVM:-1} == 0 ]]; then
		echo '{"skipped":"BENCH_KVM=0"}'
		return
	fi
	local out=$WORK/tb rc=0
	echo "standard KVM: nested testbed scenario bench-vmmload (waits for /tmp/testbed.lock), log $out.log" >&2
	flock /tmp/testbed.lock "$ROOT/scripts/testbed.sh" -q --out "$out" \
		--l1-append "tb.vlreps=${BENCH_KVM_REPS:-3}" bench-vmmload >"$out.log" 2>&1 || rc=$?
	mkdir -p "$ROOT/build/testbed"
	rm -rf "$ROOT/build/testbed/bench-vmmload"
	cp -r "$out" "$ROOT/build/testbed/bench-vmmload" 2>/dev/null || true
	local line
	line=$(grep -h '^{"scenario":"bench-vmmload"' "$out/bench-vmmload/output.log" 2>/dev/null | tail -n 1 || true)
	if [[ -z $line ]]; then
		echo "standard KVM part failed (testbed rc $rc); tail of its log:" >&2
		tail -n 15 "$out.log" >&2
		echo "{\"error\":\"testbed rc $rc, no result line\"}"
		return
	fi
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps({"result": d.get("result"), **d.get("facts", {})}))' "$line"
}

if [ ! -w /dev/kvm ]; then
	echo "{\"bench\":\"vmmload\",\"local\":{\"skipped\":\"no usable /dev/kvm\"},\"standard_kvm\":$(kvm_part)}"
	exit 0
fi
gcc -O2 -o "$WORK/cpu" "$SRC/cpu.c"
gcc -O2 -o "$WORK/sysbench" "$SRC/sysbench.c"
gcc -O2 -pthread -o "$WORK/futex" "$SRC/futex.c"
gcc -O2 -o "$WORK/tscgaps" "$SRC/tscgaps.c"
head -c $((FILE_MB << 20)) /dev/urandom >"$WORK/big.bin"
md5sum "$WORK/big.bin" >/dev/null # warm the page cache
# Compressor input: this machine's programs (compressible, not trivially).
cat /usr/bin/* 2>/dev/null | head -c $((XZ_MB << 20)) >"$WORK/xz.in" || true
PY=$(python3 -c 'import sys; print(sys.executable)') # the real binary, not a shim
cat >"$WORK/pylock.py" <<'EOF'
import threading
lock = threading.Lock()
n = [0]
def work():
    for _ in range(200000):
        with lock:
            n[0] += 1
ts = [threading.Thread(target=work) for _ in range(3)]
for t in ts: t.start()
for t in ts: t.join()
print(n[0])
EOF

# secs CMD...: "WALL CPU" of one run in seconds (CPU = user + system of
# the run and its children, which includes guest time: less sensitive than
# wall time to other load on the machine); a failed run aborts the bench.
secs() {
	local rc=0 TIMEFORMAT='%3R %3U %3S'
	{ time "$@" >/dev/null 2>"$WORK/err" || rc=$?; } 2>"$WORK/time"
	if [[ $rc != 0 ]]; then
		echo "vmmload bench: exit $rc from: $*" >&2
		head -c 500 "$WORK/err" >&2
		exit 1
	fi
	awk '{ printf "%.3f %.3f", $1, $2 + $3 }' "$WORK/time"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# measure NAME CMD...: median wall (T) and CPU (C) time of REPS runs per
# configuration.
declare -A T C
CONFIGS=(native off writes reads)
for r in $RINGS; do CONFIGS+=("ring$r"); done
measure() {
	local name=$1 c t
	shift
	local -A runs cpus
	for ((i = 0; i < REPS; i++)); do
		for c in "${CONFIGS[@]}"; do
			case $c in
			native) t=$(secs "$@") ;;
			off) t=$(secs "$BIN" -q --ring-entries 0 -- "$@") ;;
			writes) t=$(secs "$BIN" -q --reads off -- "$@") ;;
			reads) t=$(secs "$BIN" -q -- "$@") ;;
			ring*) t=$(secs "$BIN" -q --ring-entries "${c#ring}" -- "$@") ;;
			esac
			runs[$c]="${runs[$c]:-} ${t% *}"
			cpus[$c]="${cpus[$c]:-} ${t#* }"
			echo "  $name $c run $i: wall/cpu $t s" >&2
		done
	done
	for c in "${CONFIGS[@]}"; do
		# shellcheck disable=SC2086 # lists of numbers
		T[$name.$c]=$(median ${runs[$c]})
		# shellcheck disable=SC2086
		C[$name.$c]=$(median ${cpus[$c]})
	done
}

echo "load before: $(uptime)" >&2
load_before=$(cut -d' ' -f1 /proc/loadavg)
echo "cpu-bound: cpu $SCALE" >&2
measure cpu "$WORK/cpu" "$SCALE"
echo "syscall-heavy: md5sum of $FILE_MB MiB" >&2
measure md5 md5sum "$WORK/big.bin"
echo "write-heavy, two threads: xz -T2 -3 of $XZ_MB MiB" >&2
measure xz xz -T2 -3 --block-size=4MiB -c "$WORK/xz.in"
echo "three Python threads sharing one lock" >&2
measure pylock "$PY" "$WORK/pylock.py"
load_after=$(cut -d' ' -f1 /proc/loadavg)

# Exits and ring harvests of one tracked run per workload (from the report).
profile() { # NAME CMD...
	local name=$1
	shift
	"$BIN" -q --report "$WORK/$name.json" -- "$@" >/dev/null 2>&1
	python3 - "$WORK/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
p = j["profile"]
print(json.dumps({
    "syscalls": j["syscalls"], "exits": p["exits"],
    "ring_full_harvests": p["ring_harvest"]["on_ring_full"]["count"],
    "interval_harvest_mean_us": round(p["ring_harvest"]["on_interval"]["mean_us"], 1),
    "read_rearm_mean_us": round(p["read_rearm"]["mean_us"], 1),
    "top_calls": [{k: c[k] for k in ("name", "count", "mean_us")} for c in p["syscalls"][:3]],
}))
PY
}
prof_md5=$(profile md5 md5sum "$WORK/big.bin")
prof_xz=$(profile xz xz -T2 -3 --block-size=4MiB -c "$WORK/xz.in")

native_rt=$("$WORK/sysbench" 200000)
vm_rt=$("$BIN" -q --ring-entries 0 -- "$WORK/sysbench" 20000)
native_clock=$("$WORK/sysbench" 1000000 clock)
vm_clock=$("$BIN" -q --ring-entries 0 -- "$WORK/sysbench" 1000000 clock)
native_pp=$("$WORK/futex" pingpong 20000)
vm_pp=$("$BIN" -q --ring-entries 0 -- "$WORK/futex" pingpong 5000)
# Where a CPU-bound program's extra time goes: gaps in a tight rdtsc loop
# (host interrupts natively; under vmmload also every exit that KVM handles
# in the kernel, such as the host timer tick, which vmmload never sees).
kv2json() { awk '{ printf "{"; for (i = 1; i <= NF; i++) { split($i, a, "="); printf "%s\"%s\":%s", (i > 1 ? "," : ""), a[1], a[2] } printf "}" }'; }
gaps_native=$("$WORK/tscgaps" 3 | kv2json)
gaps_vm=$("$BIN" -q --ring-entries 0 -- "$WORK/tscgaps" 3 | kv2json)

slow() { awk -v v="${T[$1.$2]}" -v n="${T[$1.native]}" 'BEGIN { printf "%.2f", (v / n - 1) * 100 }'; }
cslow() { awk -v v="${C[$1.$2]}" -v n="${C[$1.native]}" 'BEGIN { printf "%.2f", (n > 0 ? (v / n - 1) * 100 : 0) }'; }
"$BIN" -q --ring-entries 0 --report "$WORK/true.json" -- /bin/true
backend=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["backend"])' "$WORK/true.json")
loc="{\"backend\":\"$backend\",\"reps\":$REPS,\"loadavg_before\":$load_before,\"loadavg_after\":$load_after"
for w in cpu md5 xz pylock; do
	loc+=",\"${w}_native_s\":${T[$w.native]},\"${w}_native_cpu_s\":${C[$w.native]}"
	for c in "${CONFIGS[@]:1}"; do
		loc+=",\"${w}_${c}_s\":${T[$w.$c]},\"${w}_${c}_slowdown_pct\":$(slow $w "$c")"
		loc+=",\"${w}_${c}_cpu_s\":${C[$w.$c]},\"${w}_${c}_cpu_slowdown_pct\":$(cslow $w "$c")"
	done
done
loc+=",\"md5_file_mib\":$FILE_MB,\"xz_input_mib\":$XZ_MB,\"md5_profile\":$prof_md5,\"xz_profile\":$prof_xz"
loc+=",\"syscall_roundtrip_native_ns\":$native_rt,\"syscall_roundtrip_vmmload_ns\":$vm_rt"
loc+=",\"clock_gettime_native_ns\":$native_clock,\"clock_gettime_vmmload_ns\":$vm_clock"
loc+=",\"futex_pingpong_native_ns\":$native_pp,\"futex_pingpong_vmmload_ns\":$vm_pp"
loc+=",\"tsc_gaps_native\":$gaps_native,\"tsc_gaps_vmmload_off\":$gaps_vm}"
echo "local: $loc" >&2
echo "{\"bench\":\"vmmload\",\"configs\":\"off = --ring-entries 0; writes = default ring, --reads off; reads = default ring, writes+reads\",\"local\":$loc,\"standard_kvm\":$(kvm_part)}"

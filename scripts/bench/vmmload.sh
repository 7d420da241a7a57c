#!/usr/bin/env bash
# vmmload benchmark (issue 5): slowdown against native in the same run for a
# CPU-bound program and a syscall-heavy one (md5sum of a large file), with
# tracking off, with two dirty-ring sizes (writes + reads tracked), and with
# write tracking only; plus the cost of a relayed system call (exit round
# trip) and of one answered inside the guest (clock_gettime). Prints one JSON
# line on stdout (progress goes to stderr).
#
# Environment: VMMLOAD_BIN (prebuilt binary), BENCH_REPS (default 3),
# BENCH_FILE_MB (default 256), BENCH_CPU_SCALE (default 8),
# BENCH_RINGS (default "256 65536"), BENCH_WRITES_ONLY_RING (default 4096),
# CARGO_TARGET_DIR.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$ROOT/tests/vmmload
WORK=$(mktemp -d /tmp/vmmload-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
REPS=${BENCH_REPS:-3}
FILE_MB=${BENCH_FILE_MB:-256}
SCALE=${BENCH_CPU_SCALE:-8}
RINGS=${BENCH_RINGS:-256 65536}
WRITES_ONLY=${BENCH_WRITES_ONLY_RING:-4096}

if [ -z "${VMMLOAD_BIN:-}" ]; then
	(cd "$ROOT" && cargo build -q --release -p vmmload) >&2
	VMMLOAD_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/vmmload
fi
BIN=$VMMLOAD_BIN
if [ ! -w /dev/kvm ]; then
	echo '{"bench":"vmmload","skipped":"no usable /dev/kvm"}'
	exit 0
fi
gcc -O2 -o "$WORK/cpu" "$SRC/cpu.c"
gcc -O2 -o "$WORK/sysbench" "$SRC/sysbench.c"
head -c $((FILE_MB << 20)) /dev/urandom >"$WORK/big.bin"
md5sum "$WORK/big.bin" >/dev/null # warm the page cache

# secs CMD...: wall time of one run in seconds.
secs() {
	local a b
	a=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	b=$(date +%s.%N)
	awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b - a }'
}

# median of a list of numbers
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# measure NAME CMD...: median wall time of REPS runs, interleaved native/VM
# per repetition so that background noise hits all configurations alike.
declare -A T
measure() {
	local name=$1
	shift
	local configs=("native" "off" $RINGS "w$WRITES_ONLY")
	local -A runs
	for ((r = 0; r < REPS; r++)); do
		for c in "${configs[@]}"; do
			case $c in
			native) t=$(secs "$@") ;;
			off) t=$(secs "$BIN" -q --ring-entries 0 -- "$@") ;;
			w*) t=$(secs "$BIN" -q --ring-entries "${c#w}" --reads off -- "$@") ;;
			*) t=$(secs "$BIN" -q --ring-entries "$c" -- "$@") ;;
			esac
			runs[$c]="${runs[$c]:-} $t"
			echo "  $name $c run $r: $t s" >&2
		done
	done
	for c in "${configs[@]}"; do
		T[$name.$c]=$(median ${runs[$c]})
	done
}

echo "cpu-bound: $WORK/cpu $SCALE" >&2
measure cpu "$WORK/cpu" "$SCALE"
echo "syscall-heavy: md5sum of $FILE_MB MiB" >&2
measure md5 md5sum "$WORK/big.bin"

# Ring-full events and syscall counts of one tracked md5sum run.
"$BIN" -q --ring-entries 256 --report "$WORK/r.json" -- md5sum "$WORK/big.bin" >/dev/null
md5_syscalls=$(python3 -c "import json;print(json.load(open('$WORK/r.json'))['syscalls'])")
md5_ringfull=$(python3 -c "import json;print(json.load(open('$WORK/r.json'))['ring_full_events'])")

native_rt=$("$WORK/sysbench" 200000)
vm_rt=$("$BIN" -q --ring-entries 0 -- "$WORK/sysbench" 20000)
native_clock=$("$WORK/sysbench" 1000000 clock)
vm_clock=$("$BIN" -q --ring-entries 0 -- "$WORK/sysbench" 1000000 clock)

slow() { awk -v v="${T[$1.$2]}" -v n="${T[$1.native]}" 'BEGIN { printf "%.2f", (v / n - 1) * 100 }'; }
json="{\"bench\":\"vmmload\",\"reps\":$REPS,\"backend\":\"$("$BIN" -v -q -- /bin/true 2>&1 | grep -q PVM && echo pvm || echo standard-kvm)\""
for w in cpu md5; do
	json+=",\"${w}_native_s\":${T[$w.native]}"
	json+=",\"${w}_off_s\":${T[$w.off]},\"${w}_off_slowdown_pct\":$(slow $w off)"
	for r in $RINGS; do
		json+=",\"${w}_ring${r}_s\":${T[$w.$r]},\"${w}_ring${r}_slowdown_pct\":$(slow $w "$r")"
	done
	json+=",\"${w}_ring${WRITES_ONLY}_writes_only_s\":${T[$w.w$WRITES_ONLY]}"
	json+=",\"${w}_ring${WRITES_ONLY}_writes_only_slowdown_pct\":$(slow $w "w$WRITES_ONLY")"
done
json+=",\"md5_file_mib\":$FILE_MB,\"md5_syscalls\":$md5_syscalls,\"md5_ring256_full_events\":$md5_ringfull"
json+=",\"syscall_roundtrip_native_ns\":$native_rt,\"syscall_roundtrip_vmmload_ns\":$vm_rt"
json+=",\"clock_gettime_native_ns\":$native_clock,\"clock_gettime_vmmload_ns\":$vm_clock}"
echo "$json"

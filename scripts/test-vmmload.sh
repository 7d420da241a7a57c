#!/usr/bin/env bash
# Tests for vmmload (issue 5): unit tests, programs whose output and exit
# status must equal a native run, the page-tracking accuracy test, bad input.
# Builds what it needs. Prints "N passed, M failed" last; exits non-zero on
# any failure. Skips (exit 0) when /dev/kvm is not usable.
#
# Environment: VMMLOAD_BIN=path to use a prebuilt binary; VMMLOAD_RING=entries
# for the program runs (default 4096); CARGO_TARGET_DIR is honoured.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/tests/vmmload
WORK=$(mktemp -d /tmp/vmmload-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PASS=0
FAIL=0
SKIP=0
RING=${VMMLOAD_RING:-4096}

ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }

cd "$ROOT" || exit 1
echo "== building vmmload and unit tests"
if ! cargo build -q -p vmmload; then
	echo "0 passed, 1 failed"
	exit 1
fi
if cargo test -q -p vmmload >"$WORK/unit.log" 2>&1; then
	ok "unit tests ($(grep -o '[0-9]* passed' "$WORK/unit.log" | head -1))"
else
	cat "$WORK/unit.log"
	bad "unit tests"
fi
BIN=${VMMLOAD_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/vmmload}

if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
	echo "no usable /dev/kvm: skipping the VM tests"
	echo "$PASS passed, $FAIL failed, 1 skipped"
	[ "$FAIL" -eq 0 ]
	exit $?
fi

echo "== building test programs"
CFLAGS="-O2 -Wall"
gcc $CFLAGS -static -o "$WORK/hello-static" "$SRC/hello.c" &&
	gcc $CFLAGS -o "$WORK/hello-dyn" "$SRC/hello.c" &&
	gcc $CFLAGS -pthread -o "$WORK/threads" "$SRC/threads.c" &&
	gcc $CFLAGS -o "$WORK/accuracy" "$SRC/accuracy.c" &&
	gcc $CFLAGS -o "$WORK/faults" "$SRC/faults.c" &&
	gcc $CFLAGS -o "$WORK/badptr" "$SRC/badptr.c" &&
	gcc $CFLAGS -o "$WORK/readcache" "$SRC/readcache.c" &&
	gcc $CFLAGS -o "$WORK/timecalls" "$SRC/timecalls.c" || {
	bad "building test programs"
	echo "$PASS passed, $FAIL failed"
	exit 1
}
head -c $((50 << 20)) /dev/urandom >"$WORK/big.bin"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

# same_as_native NAME CMD...: stdout and exit status must match.
same_as_native() {
	local name=$1
	shift
	timeout 120 "$@" >"$WORK/native.out" 2>/dev/null
	local n=$?
	timeout 300 "$BIN" -q --ring-entries "$RING" ${VMMLOAD_EXTRA:-} -- "$@" >"$WORK/vm.out" 2>"$WORK/vm.err"
	local v=$?
	if [ "$n" = "$v" ] && cmp -s "$WORK/native.out" "$WORK/vm.out"; then
		ok "$name (status $v, $(wc -c <"$WORK/vm.out") bytes identical)"
	else
		bad "$name: native status $n, vmmload status $v"
		diff "$WORK/native.out" "$WORK/vm.out" | head -5
		head -5 "$WORK/vm.err"
	fi
}

echo "== programs that must behave as natively"
same_as_native "static C program" "$WORK/hello-static" one two
VMMLOAD_TEST=x same_as_native "dynamic C program" "$WORK/hello-dyn" a b c
same_as_native "/bin/ls -la /" /bin/ls -la /
same_as_native "md5sum of a 50 MB file" md5sum "$WORK/big.bin"
same_as_native "file positions with the read cache" "$WORK/readcache" "$WORK/big.bin"
VMMLOAD_EXTRA=--no-read-cache same_as_native "md5sum without the read cache" md5sum "$WORK/big.bin"
# tar reads in 10240-byte records and takes a short read of a regular file
# for a file that shrank (it wrote corrupt archives when the read cache
# returned short counts at its 1 MiB refills).
same_as_native "tar cf of /usr/share/doc (archive to stdout)" tar cf - /usr/share/doc
same_as_native "python3 -c" "$PY" -c 'import sys, json, hashlib; print(json.dumps({"sq": [i*i for i in range(10)], "h": hashlib.sha256(b"x").hexdigest()})); sys.exit(5)'
same_as_native "multi-threaded CPU-bound program" "$WORK/threads" 5000000
same_as_native "bad guest pointers give EFAULT" "$WORK/badptr"
same_as_native "time and identity calls agree with the host" "$WORK/timecalls"
VMMLOAD_EXTRA=--no-fast-calls same_as_native "time and identity calls, fast paths off" "$WORK/timecalls"
same_as_native "exit(7)" "$WORK/faults" exit7
same_as_native "bash: fork, exec, pipes, wait" /bin/bash -c 'x=0; for i in $(seq 1 20); do x=$((x+i)); done; echo $x; ls / | sort | head -3; (exit 6); echo "sub $?"; exec 3</etc/hostname; read -r h <&3; echo "${#h}"; exit 4'
same_as_native "python3 subprocess (fork/vfork + exec, close_range)" "$PY" -c 'import subprocess, sys; r = subprocess.run(["ls", "/"], capture_output=True); print(r.returncode, sorted(r.stdout.split())[:3]); print(subprocess.run("exit 9", shell=True).returncode); print(subprocess.check_output(["/bin/echo", "hi"]))'
printf '#!/bin/sh\necho "script $0 $#: $*"; exit 3\n' >"$WORK/script.sh"
chmod +x "$WORK/script.sh"
same_as_native "#! script run by its interpreter" "$WORK/script.sh" a b
printf '#!%s -S\nimport sys\nprint(sys.argv[1:], sys.flags.no_site)\n' "$PY" >"$WORK/script.py"
chmod +x "$WORK/script.py"
same_as_native "#! script with an interpreter argument" "$WORK/script.py" x y
/usr/bin/yes | head -1 >/dev/null
n=${PIPESTATUS[0]}
"$BIN" -q -- /usr/bin/yes | head -1 >/dev/null
v=${PIPESTATUS[0]}
[ "$n" = "$v" ] && ok "write to a closed pipe ends like natively (status $v)" || bad "SIGPIPE: native $n, vmmload $v"
# Sampling while the program runs must never disturb it (regression: a
# read-only window in the re-arm step crashed programs).
for i in 1 2 3; do
	VMMLOAD_EXTRA="--interval-ms 5" same_as_native "du -s /usr/include, sampling every 5 ms (run $i)" du -s /usr/include
done
VMMLOAD_EXTRA="--interval-ms 5" same_as_native "threads, sampling every 5 ms" "$WORK/threads" 3000000
same_as_native "mremap moves a mapping without aliasing" "$WORK/faults" mremap
same_as_native "python3: 5 MB JSON round trip (realloc/mremap)" "$PY" -c 'import json; d=[{"k": i, "v": [j*j for j in range(50)]} for i in range(20000)]; s=json.dumps(d); print(len(s), len(json.loads(s)))'
for f in segv abort fpe ill wx ro unmapped; do
	same_as_native "fault: $f" "$WORK/faults" $f
done
"$BIN" -q -- "$WORK/faults" segv 2>"$WORK/segv.err" >/dev/null
if grep -q "SIGSEGV: page fault: read at address 0x10" "$WORK/segv.err"; then
	ok "fault message names the faulting address"
else
	bad "fault message: $(cat "$WORK/segv.err")"
fi

echo "== accuracy of page tracking"
if "$BIN" -q --ring-entries "$RING" --report "$WORK/acc.json" --csv "$WORK/acc.csv" \
	--heatmap "$WORK/acc.png" -- "$WORK/accuracy" >"$WORK/acc.out" 2>"$WORK/acc.err"; then
	"$PY" - "$WORK/acc.json" "$WORK/acc.out" >"$WORK/acc.res" 2>&1 <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
exp_w, exp_r, exp_h = set(), set(), {}
for line in open(sys.argv[2]):
    f = line.split()
    if f[0] == "expect-write": exp_w.add(int(f[1], 16))
    if f[0] == "expect-read": exp_r.add(int(f[1], 16))
    if f[0] == "expect-huge": exp_h[int(f[1], 16)] = int(f[2])
lo, hi = 0x200000000, 0x200000000 + (6 << 20)
pages = {int(p["addr"], 16): p for p in rep["pages"] if lo <= int(p["addr"], 16) < hi}
got_w = {a for a, p in pages.items() if p["write_intervals"] > 0}
got_r = {a for a, p in pages.items() if p["write_intervals"] == 0 and p["read_intervals"] > 0}
print("backend", rep["backend"], "writes", rep["write_tracking"], "reads", rep["read_tracking"])
print("WRITES", "exact" if got_w == exp_w else "MISMATCH missing=%s extra=%s" % (sorted(map(hex, exp_w - got_w)), sorted(map(hex, got_w - exp_w))))
want_iv = 1
for line in open(sys.argv[2]):
    if line.startswith("expect-read-intervals"): want_iv = int(line.split()[1])
if rep["read_tracking"] == "off":
    print("READS", "not tracked")
else:
    print("READS", "exact" if got_r == exp_r else "MISMATCH missing=%s extra=%s" % (sorted(map(hex, exp_r - got_r)), sorted(map(hex, got_r - exp_r))))
    iv = sorted(pages[a]["read_intervals"] for a in got_r & exp_r)
    print("REARM", "ok" if iv and min(iv) >= want_iv else "MISSED read intervals %s, want >= %d" % (iv, want_iv))
hp = {int(h["base"], 16): h for h in rep["huge_pages"]}
for base, n in exp_h.items():
    h = hp.get(base)
    good = h is not None and h["pages_touched"] == n and abs(h["utilisation"] - n / 512) < 1e-9
    print("HUGE", "exact" if good else "MISMATCH %s" % h)
EOF
	cat "$WORK/acc.res"
	grep -q "^WRITES exact" "$WORK/acc.res" && ok "written pages reported exactly" || bad "written pages"
	if grep -q "^READS exact" "$WORK/acc.res"; then
		ok "read-only pages reported exactly"
	else
		bad "read-only pages"
	fi
	grep -q "^REARM ok" "$WORK/acc.res" && ok "pages read in two phases are seen in two intervals (re-arming works)" || bad "read re-arming"
	grep -q "^HUGE exact" "$WORK/acc.res" && ok "1 of 512 pages touched gives 1/512 utilisation" || bad "huge-page utilisation"
	if [ -s "$WORK/acc.csv" ] && [ "$(head -c 8 "$WORK/acc.png" | od -An -c | tr -d ' ')" = "211PNG\r\n032\n" ]; then
		ok "CSV and heat-map PNG written"
	else
		bad "CSV/PNG output"
	fi
else
	bad "accuracy program failed: $(head -3 "$WORK/acc.err")"
fi
# The bitmap fallback and the ring give the same written pages.
if "$BIN" -q --ring-entries 256 --reads off --report "$WORK/acc256.json" -- "$WORK/accuracy" >/dev/null 2>&1 &&
	"$PY" - "$WORK/acc256.json" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
lo, hi = 0x200000000, 0x200000000 + (6 << 20)
w = sorted(int(p["addr"], 16) for p in rep["pages"] if lo <= int(p["addr"], 16) < hi and p["write_intervals"] > 0)
sys.exit(0 if len(w) == 7 else 1)
EOF
then ok "smallest ring (256 entries) still exact for writes"; else bad "256-entry ring"; fi

echo "== bad input"
# expect_fail NAME STATUS REGEX CMD...
expect_fail() {
	local name=$1 want=$2 re=$3
	shift 3
	timeout 60 "$@" >/dev/null 2>"$WORK/err"
	local s=$?
	if [ "$s" = "$want" ] && grep -Eq "$re" "$WORK/err"; then
		ok "$name (status $s: $(head -1 "$WORK/err"))"
	else
		bad "$name: status $s (want $want), stderr: $(head -2 "$WORK/err")"
	fi
}
expect_fail "missing file" 127 "No such file" "$BIN" -- "$WORK/does-not-exist"
expect_fail "command not on PATH" 127 "command not found" "$BIN" -- no-such-command-xyz
printf 'just some text\n' >"$WORK/text"
chmod +x "$WORK/text"
expect_fail "not an ELF file" 126 "not an ELF" "$BIN" -- "$WORK/text"
printf '#!/no/such/interpreter\n' >"$WORK/badbang"
chmod +x "$WORK/badbang"
expect_fail "#! interpreter missing" 127 "no/such/interpreter" "$BIN" -- "$WORK/badbang"
cp "$WORK/hello-static" "$WORK/noexec"
chmod -x "$WORK/noexec"
expect_fail "not executable" 126 "permission denied" "$BIN" -- "$WORK/noexec"
"$PY" - "$WORK" <<'EOF'
import sys, struct, shutil
w = sys.argv[1]
d = bytearray(open(w + "/hello-static", "rb").read())
a = bytearray(d); a[18:20] = struct.pack("<H", 183); open(w + "/arm", "wb").write(a)
c = bytearray(d); c[4] = 1; open(w + "/elf32", "wb").write(c)
open(w + "/trunc", "wb").write(d[:100])
phoff = struct.unpack_from("<Q", d, 32)[0]
big = bytearray(d)
for i in range(struct.unpack_from("<H", d, 56)[0]):
    o = phoff + 56 * i
    if struct.unpack_from("<I", big, o)[0] == 1:
        struct.pack_into("<Q", big, o + 40, 1 << 47)  # p_memsz
        break
open(w + "/absurd", "wb").write(big)
huge = bytearray(d)
for i in range(struct.unpack_from("<H", d, 56)[0]):
    o = phoff + 56 * i
    if struct.unpack_from("<I", huge, o)[0] == 1:
        struct.pack_into("<Q", huge, o + 40, 64 << 30)  # 64 GiB: valid but too big
        break
open(w + "/toobig", "wb").write(huge)
dy = bytearray(open(w + "/hello-dyn", "rb").read())
i = dy.find(b"/lib64/ld-linux-x86-64.so.2")
dy[i:i + 27] = b"/lib64/ld-missing-xx.so.2\0\0"
open(w + "/nointerp", "wb").write(dy)
EOF
chmod +x "$WORK"/arm "$WORK"/elf32 "$WORK"/trunc "$WORK"/absurd "$WORK"/toobig "$WORK"/nointerp
expect_fail "wrong architecture" 126 "wrong architecture" "$BIN" -- "$WORK/arm"
expect_fail "ELF32" 126 "wrong architecture" "$BIN" -- "$WORK/elf32"
expect_fail "truncated headers" 126 "corrupt ELF header|too short" "$BIN" -- "$WORK/trunc"
expect_fail "absurd segment size" 126 "outside the user address space" "$BIN" -- "$WORK/absurd"
expect_fail "segment larger than guest RAM" 126 "out of guest memory" "$BIN" --mem-mib 1024 -- "$WORK/toobig"
expect_fail "missing interpreter" 127 "ld-missing-xx.so.2" "$BIN" -- "$WORK/nointerp"
expect_fail "bad option value" 2 "interval" "$BIN" --interval-ms 0 -- "$WORK/hello-static"
start=$(date +%s)
expect_fail "spinning program stopped by --timeout" 124 "timeout" "$BIN" --timeout 1 -- "$WORK/faults" spin
[ $(($(date +%s) - start)) -le 10 ] && ok "timeout is prompt" || bad "timeout took too long"
"$BIN" -q -- "$WORK/faults" spin &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
s=$?
[ "$s" = 143 ] && ok "SIGTERM ends a spinning program (status 143)" || bad "SIGTERM: status $s"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]

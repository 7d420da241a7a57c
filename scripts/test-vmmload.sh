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
# / itself would race with /proc's link count as other processes come and go
same_as_native "/bin/ls -la /usr/share/doc/coreutils" /bin/ls -la /usr/share/doc/coreutils
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
"$BIN" -- "$WORK/faults" segv 2>"$WORK/segv.err" >/dev/null
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

echo "== futexes, ring sizing and the cost profile (issue 12)"
if gcc $CFLAGS -pthread -o "$WORK/futex" "$SRC/futex.c" &&
	gcc $CFLAGS -pthread -o "$WORK/writeheavy" "$SRC/writeheavy.c"; then
	# EAGAIN, relative and absolute timeouts, wake counts (waiters counted
	# by CMP_REQUEUE without waking them), bad addresses, condvars.
	same_as_native "futex semantics and a mutex/condvar workload" "$WORK/futex"
	VMMLOAD_EXTRA="--interval-ms 5" same_as_native "futexes while sampling every 5 ms" "$WORK/futex"
	printf 'import threading\nlock = threading.Lock()\nn = [0]\ndef work():\n    for _ in range(100000):\n        with lock:\n            n[0] += 1\nts = [threading.Thread(target=work) for _ in range(3)]\nfor t in ts: t.start()\nfor t in ts: t.join()\nprint(n[0])\n' >"$WORK/pylock.py"
	same_as_native "three Python threads sharing one lock" "$PY" "$WORK/pylock.py"
	# The default ring holds what a two-thread program rewrites per interval
	# (2 x 12288 pages): no ring-full exits, which would re-protect the
	# harvested pages and make every rewrite fault again.
	if timeout 120 "$BIN" -q --report "$WORK/wh.json" -- "$WORK/writeheavy" 20 >"$WORK/wh.out" &&
		"$WORK/writeheavy" 20 | cmp -s - "$WORK/wh.out" &&
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["ring_full_events"] == 0 and r["profile"]["exits"]["dirty_ring_full"] == 0 and r["totals"]["pages_written"] >= 24576 else 1)' "$WORK/wh.json"; then
		ok "default dirty ring: no ring-full exits for a write-heavy two-thread program"
	else
		bad "default dirty ring: ring-full exits or wrong output ($(grep -m1 ring_full_events "$WORK/wh.json" 2>/dev/null))"
	fi
	if timeout 120 "$BIN" -q --ring-entries 256 --report "$WORK/wh256.json" -- "$WORK/writeheavy" 2 >/dev/null &&
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["profile"]; sys.exit(0 if r["ring_full_events"] > 0 and p["exits"]["dirty_ring_full"] == r["ring_full_events"] and p["ring_harvest"]["on_ring_full"]["count"] == r["ring_full_events"] else 1)' "$WORK/wh256.json"; then
		ok "256-entry ring: ring-full exits counted in the profile"
	else
		bad "256-entry ring: ring-full exits not reported consistently"
	fi
	# The profile: exits by reason add up, futex calls are counted.
	if timeout 120 "$BIN" -v --ring-entries 0 --report "$WORK/prof.json" -- "$WORK/futex" pingpong 200 >/dev/null 2>"$WORK/prof.err" &&
		grep -q "system calls by time handled" "$WORK/prof.err" &&
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["profile"]; f=[c for c in p["syscalls"] if c["name"] == "futex"]; sys.exit(0 if sum(p["exits"].values()) == r["exits"] and p["exits"]["syscall"] >= r["syscalls"] and f and f[0]["count"] > 0 and sum(c["count"] for c in p["syscalls"]) == r["syscalls"] else 1)' "$WORK/prof.json"; then
		ok "cost profile in the report and with -v (exits by reason, calls by number)"
	else
		bad "cost profile missing or inconsistent: $(grep -c 'system calls by time handled' "$WORK/prof.err") summary line(s); exits $(tr -d ' \n' <"$WORK/prof.json" 2>/dev/null | grep -o '"exits":{[^}]*}' | head -c 200)"
	fi
else
	bad "building the futex / write-heavy test programs"
fi

# ---- signals (issue 12, signals part): handlers run as natively ----
echo "== signals delivered to the program's handlers"
if gcc $CFLAGS -pthread -o "$WORK/signals" "$SRC/signals.c"; then
	for m in alarm-spin alarm-read alarm-read-restart sigpipe sigpipe-ignored sigchld faults \
		altstack nested sigsuspend sigtimedwait ppoll timer threads fpstate storm sibling-storm cow-storm resethand badhandler badstack badsigreturn sigreturn-unmapped; do
		same_as_native "signals: $m" "$WORK/signals" $m
	done
	same_as_native "signals: SIG_IGN survives execve" /bin/sh -c 'trap "" USR1; exec "$0" inherit' "$WORK/signals"
	n=$(/bin/sh -c 'trap "" USR1; exec "$0" inherit' "$WORK/signals" 2>&1; echo "status $?")
	v=$(/bin/sh -c 'trap "" USR1; exec "$0" -q -- "$1" inherit' "$BIN" "$WORK/signals" 2>&1; echo "status $?")
	[ "$n" = "$v" ] && ok "signals: SIG_IGN inherited from vmmload's parent" ||
		bad "signals: SIG_IGN from vmmload's parent: native '$n', vmmload '$v'"
	same_as_native "signals: python3 SIGALRM handler during time.sleep" "$PY" -c 'import signal,time; signal.signal(signal.SIGALRM, lambda *a: print("alarm")); signal.alarm(1); time.sleep(2); print("done")'
	same_as_native "signals: bash trap on SIGUSR1 and SIGCHLD of a pipeline" /bin/bash -c 'trap "echo usr1" USR1; kill -USR1 $$; echo x | cat; wait; echo end'
	# SIGTERM sent to vmmload reaches the program's handler, which exits 0.
	rm -f "$WORK/term.fifo"
	mkfifo "$WORK/term.fifo"
	"$BIN" -q -- "$WORK/signals" term >"$WORK/term.fifo" 2>"$WORK/term.err" &
	pid=$!
	exec 3<"$WORK/term.fifo"
	read -r -t 60 first <&3
	kill -TERM $pid
	rest=$(timeout 60 cat <&3)
	exec 3<&-
	wait $pid
	s=$?
	if [ "$s" = 0 ] && [ "$first" = ready ] && [ "$rest" = "got SIGTERM, exiting cleanly" ]; then
		ok "signals: SIGTERM to vmmload runs the program's handler (status 0)"
	else
		bad "signals: SIGTERM handler: status $s, output '$first' '$rest', $(head -2 "$WORK/term.err")"
	fi
	# A program that ignores SIGTERM keeps running after one (as natively),
	# and --timeout still ends it.
	rm -f "$WORK/ign.fifo"
	mkfifo "$WORK/ign.fifo"
	"$BIN" -q --timeout 4 -- "$WORK/signals" ignore-term >"$WORK/ign.fifo" 2>/dev/null &
	pid=$!
	exec 3<"$WORK/ign.fifo"
	read -r -t 60 first <&3
	kill -TERM $pid
	exec 3<&-
	wait $pid
	s=$?
	if [ "$s" = 124 ] && [ "$first" = ready ]; then
		ok "signals: SIGTERM ignored by the program, --timeout still ends it (status 124)"
	else
		bad "signals: ignored SIGTERM: status $s (want 124), output '$first'"
	fi
else
	bad "building tests/vmmload/signals.c"
fi
# ---- end of signals ----

# ---- real programs, process groups, quiet mode, RAM sizing (issue 12) ----
. "$SRC/realprogs.sh"
. "$SRC/runctl.sh"
. "$SRC/forkbomb.sh"
# ---- end of the issue 12 real-program section ----

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

# shellcheck shell=bash
# Run control (issue 12): --timeout and termination signals end the program
# and everything it forked (vmmload's process group); -q keeps stderr as
# natively and --log gets vmmload's messages; /proc/self/exe is the program;
# MAP_SHARED is shared; the default guest RAM holds what the host would grant. Sourced by
# scripts/test-vmmload.sh (uses BIN, WORK, PY, CFLAGS, SRC, ok, bad,
# same_as_native).

echo "== process group, quiet mode, /proc/self/exe, shared mappings, RAM size (issue 12)"
# leftovers MARKER: pids of processes still running whose command line
# holds MARKER (forked children of vmmload keep its command line).
leftovers() {
	local pid out=""
	for pid in $(pgrep -f -- "$1"); do
		[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || out="$out $pid"
	done
	echo "$out"
}
# no_leftovers NAME MARKER: passes if nothing holding MARKER runs; kills
# (by pid) what a failing run left behind.
no_leftovers() {
	local left
	left=$(leftovers "$2")
	if [ -z "$left" ]; then
		ok "$1"
	else
		bad "$1: still running:$left"
		# shellcheck disable=SC2086
		kill -KILL $left 2>/dev/null
	fi
}

printf '( while :; do :; done ) &\necho started\nwait\n' >"$WORK/orphan-loop.sh"
start=$(date +%s)
"$BIN" -q --timeout 2 -- sh "$WORK/orphan-loop.sh" >"$WORK/ol.out" 2>"$WORK/ol.err"
s=$?
[ "$s" = 124 ] && [ "$(cat "$WORK/ol.out")" = started ] && [ ! -s "$WORK/ol.err" ] &&
	ok "--timeout: status 124, nothing on stderr with -q" || bad "--timeout of a shell: status $s, $(head -2 "$WORK/ol.err")"
no_leftovers "--timeout ends the forked busy loop too" "$WORK/orphan-loop.sh"
printf 'trap "" TERM\n( trap "" TERM; while :; do :; done ) &\nwhile :; do :; done\n' >"$WORK/ignore-term.sh"
"$BIN" -q --timeout 1 --kill-after 1 -- sh "$WORK/ignore-term.sh"
s=$?
[ "$s" = 124 ] && [ $(($(date +%s) - start)) -le 15 ] && ok "--timeout of a program ignoring SIGTERM: status 124, prompt" ||
	bad "--timeout with SIGTERM ignored: status $s"
no_leftovers "children ignoring SIGTERM are SIGKILLed after --kill-after" "$WORK/ignore-term.sh"
printf '( while :; do :; done ) &\nwait\n' >"$WORK/term-group.sh"
"$BIN" -q -- sh "$WORK/term-group.sh" &
pid=$!
# Wait for the forked loop (an event would need the program's cooperation).
for _ in $(seq 100); do [ "$(pgrep -c -f -- "$WORK/term-group.sh")" -ge 2 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
s=$?
[ "$s" = 143 ] && ok "SIGTERM to vmmload: status 143" || bad "SIGTERM to vmmload: status $s"
no_leftovers "SIGTERM to vmmload ends the program's forked children" "$WORK/term-group.sh"

# -q: stderr exactly as natively although vmmload warns (unsupported ioctl);
# --log gets the warning instead, appended.
ioctl_py='import fcntl, sys
try:
    fcntl.ioctl(1, 0x40049409, 0)
except OSError:
    pass
print("out"); sys.stdout.flush(); print("err", file=sys.stderr)'
"$PY" -c "$ioctl_py" >"$WORK/q-n.out" 2>"$WORK/q-n.err"
"$BIN" -q -- "$PY" -c "$ioctl_py" >"$WORK/q-v.out" 2>"$WORK/q-v.err"
if cmp -s "$WORK/q-n.out" "$WORK/q-v.out" && cmp -s "$WORK/q-n.err" "$WORK/q-v.err"; then
	ok "-q: stdout and stderr identical to the native run despite a warning"
else
	bad "-q: stderr differs: $(head -2 "$WORK/q-v.err")"
fi
echo previous >"$WORK/q.log"
"$BIN" -q --log "$WORK/q.log" -- "$PY" -c "$ioctl_py" >/dev/null 2>"$WORK/q-l.err"
if cmp -s "$WORK/q-n.err" "$WORK/q-l.err" && head -1 "$WORK/q.log" | grep -qx previous &&
	grep -q "unsupported ioctl request 0x40049409" "$WORK/q.log"; then
	ok "--log: vmmload's warnings appended to the file, not on stderr"
else
	bad "--log: $(cat "$WORK/q.log" "$WORK/q-l.err" | head -3)"
fi
# Interleaving: stdout and stderr into one file keep the program's order,
# and vmmload's own warning (without -q) sits where the call was made.
mix_py='import fcntl, os
os.write(1, b"out1\n"); os.write(2, b"err1\n")
try:
    fcntl.ioctl(1, 0x40049409, 0)
except OSError:
    pass
os.write(2, b"err2\n"); os.write(1, b"out2\n")'
"$PY" -c "$mix_py" >"$WORK/mix-n.txt" 2>&1
"$BIN" -q -- "$PY" -c "$mix_py" >"$WORK/mix-q.txt" 2>&1
"$BIN" --reads off --ring-entries 0 -- "$PY" -c "$mix_py" >"$WORK/mix-v.txt" 2>&1
if cmp -s "$WORK/mix-n.txt" "$WORK/mix-q.txt" &&
	[ "$(grep -v WARN "$WORK/mix-v.txt")" = "$(cat "$WORK/mix-n.txt")" ] &&
	[ "$(sed -n 3p "$WORK/mix-v.txt" | grep -c "unsupported ioctl")" = 1 ]; then
	ok "stdout/stderr interleaving as natively; a warning appears where the call was made"
else
	bad "interleaving: $(tr '\n' '|' <"$WORK/mix-v.txt")"
fi
# Without -q, a forked and exec'd program still warns (only the summary is
# the first program's alone).
"$BIN" -- sh -c "\"$PY\" -c '$ioctl_py' >/dev/null" 2>"$WORK/q-c.err"
[ "$(grep -c "unsupported ioctl request 0x40049409" "$WORK/q-c.err")" = 1 ] &&
	[ "$(grep -c "vmmload summary" "$WORK/q-c.err")" = 1 ] &&
	ok "a forked child's exec warns without -q, one summary" || bad "child warnings: $(head -3 "$WORK/q-c.err")"
"$BIN" -q --log "$WORK/q.log" --timeout 0.5 -- "$WORK/faults" spin 2>"$WORK/q-t.err"
[ ! -s "$WORK/q-t.err" ] && grep -q "timeout: program killed" "$WORK/q.log" &&
	ok "--log: the timeout notice goes to the log with -q" || bad "--log: timeout notice missing"
"$BIN" -q --log /nonexistent/dir/x.log -- /bin/true 2>"$WORK/q-b.err"
s=$?
[ "$s" = 2 ] && grep -q "vmmload: --log /nonexistent/dir/x.log" "$WORK/q-b.err" &&
	ok "--log to an unwritable path: clear error, status 2" || bad "--log bad path: status $s"

# /proc/self/exe is the program's image for open, readlink and execve(at).
same_as_native "open and readlink of /proc/self/exe name the program" "$PY" -c '
import hashlib, os, sys
real = os.path.realpath(sys.executable)
print(os.readlink("/proc/self/exe") == real, os.readlink("/proc/%d/exe" % os.getpid()) == real)
print(hashlib.sha256(open("/proc/self/exe", "rb").read()).digest() == hashlib.sha256(open(real, "rb").read()).digest())'
same_as_native "fexecve (execveat with AT_EMPTY_PATH)" "$PY" -c '
import os
fd = os.open("/bin/echo", os.O_RDONLY)
os.execve(fd, ["echo", "via", "fd"], {})'

# Shared mappings: shared with forked children, written through to the file.
if gcc $CFLAGS -o "$WORK/shared" "$SRC/shared.c"; then
	"$WORK/shared" "$WORK/shared-native.dat" >"$WORK/sh-n.out"
	n=$?
	"$BIN" -q --timeout 60 -- "$WORK/shared" "$WORK/shared-vm.dat" >"$WORK/sh-v.out"
	v=$?
	if [ "$n" = "$v" ] && cmp -s "$WORK/sh-n.out" "$WORK/sh-v.out" && cmp -s "$WORK/shared-native.dat" "$WORK/shared-vm.dat"; then
		ok "MAP_SHARED: anonymous, /dev/zero and file mappings shared with forks and the file"
	else
		bad "MAP_SHARED: native status $n, vmmload status $v"
		diff "$WORK/sh-n.out" "$WORK/sh-v.out" | head -6
	fi
else
	bad "building shared"
fi

# A program that unmaps its own stack dies of SIGSEGV, as natively.
if gcc $CFLAGS -o "$WORK/unmapstack" "$SRC/unmapstack.c"; then
	same_as_native "unmapping its own stack: SIGSEGV" "$WORK/unmapstack"
	no_leftovers "unmapping its own stack: nothing left running" "$WORK/unmapstack"
else
	bad "building unmapstack"
fi

# Default guest RAM: host RAM plus swap.
if gcc $CFLAGS -o "$WORK/bigalloc" "$SRC/bigalloc.c"; then
	host_kib=$(awk '/^(MemTotal|SwapTotal):/ { s += $2 } END { print s }' /proc/meminfo)
	if [ "$host_kib" -gt $((6 << 20)) ]; then
		same_as_native "5 GiB malloc fits the default guest RAM" "$WORK/bigalloc" 5
		# Memslots beyond the first 4 GiB are added on use and their dirty
		# pages are attributed (one written page per MiB).
		if "$BIN" -q --report "$WORK/ba.json" -- "$WORK/bigalloc" 5 >/dev/null &&
			"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["totals"]["pages_written"] >= 5120 else 1)' "$WORK/ba.json"; then
			ok "writes above 4 GiB of guest RAM (later memslots) are tracked"
		else
			bad "writes above 4 GiB: $(grep -m1 pages_written "$WORK/ba.json")"
		fi
	else
		echo "skip 5 GiB malloc: host RAM plus swap below 6 GiB"
		SKIP=$((SKIP + 1))
	fi
	"$BIN" -q --mem-mib 1024 -- "$WORK/bigalloc" 2 >"$WORK/ba.out"
	s=$?
	[ "$s" = 1 ] && grep -qx "malloc failed" "$WORK/ba.out" &&
		ok "--mem-mib still bounds guest RAM (2 GiB malloc in 1 GiB: ENOMEM)" || bad "--mem-mib 1024: status $s"
else
	bad "building bigalloc"
fi

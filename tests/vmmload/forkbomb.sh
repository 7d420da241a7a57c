# shellcheck shell=bash
# Fork bombs (issue 12, bad input): forks are real host processes, so the
# limit is the host's RLIMIT_NPROC, which counts every task (vmmload's own
# threads too) of a user and does not apply to root. The program runs as an
# otherwise unused uid with `prlimit --nproc`; vmmload must turn a fork it
# cannot complete into EAGAIN (as natively), never hang or panic, and
# --timeout must leave nothing of the bomb running. Sourced by
# scripts/test-vmmload.sh (uses BIN, WORK, CFLAGS, SRC, ok, bad).

echo "== fork bombs under RLIMIT_NPROC (issue 12)"
FB_UID=64123 # no account: the limit counts only this run's tasks
FB_NPROC=48
FB_DIR=$WORK/forkbomb
# running UID: processes of UID that are not zombies (orphaned zombies wait
# for the machine's init, which may reap late)
fb_running() { ps -o pid=,stat= -u "$1" | awk '$2 !~ /^Z/ { print $1 }' | tr '\n' ' '; }
# fb_settle NAME: passes once nothing of the bomb runs (killed members take
# a moment to die); kills leftovers by pid if some survive 10 s.
fb_settle() {
	local left
	for _ in $(seq 100); do
		left=$(fb_running $FB_UID)
		[ -z "$left" ] && break
		sleep 0.1
	done
	if [ -z "$left" ]; then
		ok "$1"
	else
		bad "$1: still running: $left"
		# shellcheck disable=SC2086
		kill -KILL $left 2>/dev/null
	fi
}
kvm_gid=$(stat -c %g /dev/kvm)
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null || ! command -v prlimit >/dev/null; then
	echo "skip: fork bombs need root, setpriv and prlimit (util-linux) to run as uid $FB_UID"
elif [ -n "$(fb_running $FB_UID)" ]; then
	bad "fork bomb: uid $FB_UID already has processes; pick another FB_UID"
elif mkdir -p "$FB_DIR" && chmod 711 "$WORK" && chmod 755 "$FB_DIR" &&
	gcc $CFLAGS -o "$FB_DIR/forkbomb" "$SRC/forkbomb.c"; then
	# as_limited CMD...: CMD as FB_UID under the limit (and a hard stop)
	as_limited() {
		timeout -s KILL 120 prlimit --nproc=$FB_NPROC \
			setpriv --reuid=$FB_UID --regid=$FB_UID --groups="$kvm_gid" "$@"
	}
	n=$(cd / && as_limited "$FB_DIR/forkbomb" bounded 2>&1; echo "status $?")
	v=$(cd / && as_limited "$BIN" -q -- "$FB_DIR/forkbomb" bounded 2>&1; echo "status $?")
	if [ "$n" = "$v" ] && [ "${v%status 0}" != "$v" ]; then
		ok "fork until EAGAIN under RLIMIT_NPROC=$FB_NPROC: every child exits 0 and is reaped, as natively"
	else
		bad "bounded fork bomb: native '$n', vmmload '$v'"
	fi
	fb_settle "bounded fork bomb leaves nothing running"
	start=$(date +%s)
	v=$(cd / && as_limited "$BIN" -q --timeout 3 -- "$FB_DIR/forkbomb" bomb 2>&1; echo "status $?")
	took=$(($(date +%s) - start))
	if [ "$v" = "$(printf 'bombing\nstatus 124')" ] && [ "$took" -le 20 ]; then
		ok "fork bomb ended by --timeout 3 after ${took}s: status 124, nothing on stderr"
	else
		bad "fork bomb under --timeout 3: '$v' after ${took}s"
	fi
	fb_settle "fork bomb: nothing left running after --timeout"
else
	bad "building tests/vmmload/forkbomb.c"
fi

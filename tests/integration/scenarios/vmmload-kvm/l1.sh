# shellcheck shell=sh
# vmmload-kvm: vmmload on standard KVM (kvm_amd in the L1 host; this
# machine's own /dev/kvm is the PVM backend, tested by scripts/test-vmmload.sh).
# Unmodified programs (busybox, vmmload's static C tests hello and threads,
# and the build host's dynamic ls and md5sum with their libraries) must give the
# same output and exit status as a native run, the backend must be the
# standard one, and dirty-ring write tracking must see the written pages.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

[ -x "$TB_VMMLOAD" ] || tb_skip "no vmmload binary at $TB_VMMLOAD"
[ -e /dev/kvm ] || tb_skip "no /dev/kvm"
BB=$(command -v busybox)
VL="$TB_VMMLOAD -q --mem-mib 512 --timeout 120"

# same NAME CMD...: native and vmmload runs print the same on stdout, the
# program's stderr shows up in vmmload's, and both exit the same
same() {
    _n=$1
    shift
    "$@" >"$TB_OUT/$_n.native" 2>"$TB_OUT/$_n.native-stderr"
    _rn=$?
    # shellcheck disable=SC2086 # VL is a word list
    $VL --report "$TB_OUT/$_n.json" -- "$@" >"$TB_OUT/$_n.vmmload" 2>"$TB_OUT/$_n.stderr"
    _rv=$?
    if [ "$_rn" = "$_rv" ] && cmp -s "$TB_OUT/$_n.native" "$TB_OUT/$_n.vmmload" &&
        { [ ! -s "$TB_OUT/$_n.native-stderr" ] || grep -qF -f "$TB_OUT/$_n.native-stderr" "$TB_OUT/$_n.stderr"; }; then
        tb_pass "$_n" "exit $_rv, $(wc -c <"$TB_OUT/$_n.native") bytes identical"
        # The program's expected stderr (e.g. the shell's "Segmentation
        # fault" for a program that dies of SIGSEGV natively too) must not
        # read as a vmmload crash to the testbed's crash check of *.stderr.
        mv "$TB_OUT/$_n.stderr" "$TB_OUT/$_n.program-stderr"
    else
        tb_fail "$_n" "native exit $_rn, vmmload exit $_rv; stderr: $(head -c 200 "$TB_OUT/$_n.stderr" | tr '\n' '|')"
    fi
}
# field RUN KEY: a top-level string of the report; total RUN KEY: a number
# from its "totals" object
field() { sed -n "s/^  \"$2\": *\"\([^\"]*\)\".*/\1/p" "$TB_OUT/$1.json" | head -n 1; }
total() {
    tr -d ' \n' <"$TB_OUT/$1.json" | sed -n 's/.*"totals":{\([^}]*\)}.*/\1/p' |
        tr ',' '\n' | sed -n "s/^\"$2\":\([0-9]*\)$/\1/p"
}

same echo "$BB" echo hello from a VM with no guest OS
same ls-la "$BB" ls -la /tb/bin
same md5sum "$BB" md5sum "$TB_VMM"
same exit-status "$BB" sh -c 'exit 3'
same static-c "$TB_BIN/vl-hello" one two
same threads "$TB_BIN/vl-threads"
# Signals run the program's handlers (tests/vmmload/signals.c). On standard
# KVM a handler is entered through the stub's sysretq after a system call,
# or with KVM_SET_SREGS after an exception or a kick that interrupted the
# program; rt_sigreturn restores every register the same way.
# sibling-storm: a forked sibling sends 5,000 SIGUSR1 and 2,000 queued
# SIGRTMIN (all must arrive) while the program keeps making system calls.
for m in alarm-spin alarm-read-restart sigpipe sigchld faults altstack nested sigsuspend ppoll fpstate resethand badsigreturn sibling-storm; do
    same "signals-$m" "$TB_BIN/vl-signals" "$m"
done
# The storm again, several times (storm.sh; a race once showed up in one
# boot in four).
# shellcheck source=storm.sh
. "$TB_SCENARIO_DIR/storm.sh"
# Dynamically linked programs (PT_INTERP loader), packed from the build host.
dd if=/dev/urandom of=/tmp/vl-50m bs=1M count=50 2>/dev/null
tb_check dynamic-programs-packed sh -c '[ -f /usr/bin/ls ] && [ ! -L /usr/bin/ls ] && [ -f /usr/bin/md5sum ] && [ ! -L /usr/bin/md5sum ]'
same dyn-md5sum-50MB /usr/bin/md5sum /tmp/vl-50m
same dyn-ls-la /usr/bin/ls -la /
same missing-file "$BB" cat /nonexistent
tb_check_eq backend-is-standard-kvm standard-kvm "$(field md5sum backend)"
tb_check_ge md5sum-pages-written "$(total md5sum pages_written)" 1
tb_check_ge md5sum-pages-touched "$(total md5sum pages_touched)" 1
# Tracking accuracy (tests/vmmload/accuracy.c): known written pages, known
# pages read in two phases, one page touched in a 2 MiB region.
if $VL --report "$TB_OUT/acc.json" -- "$TB_BIN/vl-accuracy" >"$TB_OUT/acc.out" 2>"$TB_OUT/acc.err"; then
    awk '
        FNR == NR {
            if ($1 == "expect-write") ew[$2] = 1
            if ($1 == "expect-read") er[$2] = 1
            if ($1 == "expect-huge") { eh = $2; ehn = $3 }
            next
        }
        function arena(a) { return length(a) == 11 && a >= "0x200000000" && a < "0x200600000" }
        /"addr":/ { a = $2; gsub(/[",]/, "", a) }
        /"read_intervals":/ { r = $2; gsub(/,/, "", r) }
        /"write_intervals":/ {
            w = $2; gsub(/,/, "", w)
            if (arena(a)) { if (w > 0) gw[a] = 1; else if (r > 0) gr[a] = r }
        }
        /"base":/ { b = $2; gsub(/[",]/, "", b) }
        /"pages_touched":/ && b == eh && !hset { t = $2; gsub(/,/, "", t); ht = t; hset = 1 }
        END {
            for (k in ew) if (!(k in gw)) mw++
            for (k in gw) if (!(k in ew)) xw++
            for (k in er) { if (!(k in gr)) mr++; if (!(k in gr) && !(k in gw)) lr++ }
            for (k in gr) if (!(k in er)) xr++
            rearm = "ok"; for (k in gr) if ((k in er) && gr[k] < 2) rearm = "missed"
            printf "missed_writes %d extra_writes %d missed_reads %d extra_reads %d rearm %s huge %s lost_reads %d\n",
                mw, xw, mr, xr, rearm, (ht == ehn) ? "exact" : "mismatch", lr
        }' "$TB_OUT/acc.out" "$TB_OUT/acc.json" >"$TB_OUT/acc.res"
    res=$(cat "$TB_OUT/acc.res")
    tb_fact_str accuracy "$res"
    # Hard: no written page missed, no read page missed, re-arming, 1/512.
    # Measured on nested SVM: two pages that were only read are reported as
    # written too (recorded as facts; exact on the PVM backend, see
    # docs/vmmload.md).
    tb_check_eq accuracy-no-written-page-missed 0 "$(echo "$res" | awk '{ print $2 }')"
    tb_check_eq accuracy-no-read-page-lost 0 "$(echo "$res" | awk '{ print $14 }')"
    tb_check_eq accuracy-reads-rearmed ok "$(echo "$res" | awk '{ print $10 }')"
    tb_check_eq accuracy-huge-1-of-512 exact "$(echo "$res" | awk '{ print $12 }')"
    tb_fact accuracy_extra_writes "$(echo "$res" | awk '{ print $4 }')"
    tb_fact accuracy_missed_reads "$(echo "$res" | awk '{ print $6 }')"
    tb_fact_str accuracy_read_tracking "$(field acc read_tracking)"
else
    tb_fail accuracy-program "$(head -c 200 "$TB_OUT/acc.err")"
fi
# Debian programs against their native runs in L1 (issue 12).
# shellcheck source=realprogs.sh
. "$TB_SCENARIO_DIR/realprogs.sh"
tb_fact_str write_tracking "$(field md5sum write_tracking)"
tb_fact_str read_tracking "$(field md5sum read_tracking)"
tb_fact md5sum_pages_touched "$(total md5sum pages_touched)"
tb_finish

# shellcheck shell=sh
# bench-vmmload: vmmload's cost on standard KVM (kvm_amd with NPT in the L1
# host; scripts/bench/vmmload.sh measures this machine's PVM backend and
# starts this scenario for the other). Not part of --all. Per workload the
# median wall time of TB_REPS runs (default 3, tb.vlreps=N on the L1 command
# line), interleaved native / tracking off / writes only / writes+reads, and
# the cost of one relayed call (getppid), of clock_gettime and of a futex
# ping-pong. L1 runs under TCG: compare configurations within this run only.
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l1.sh
. "$TB_LIB/l1.sh"
tb_begin l1

[ -x "$TB_VMMLOAD" ] || tb_skip "no vmmload binary at $TB_VMMLOAD"
[ -e /dev/kvm ] || tb_skip "no /dev/kvm"
for p in vl-cpu vl-sysbench vl-futex; do
    [ -x "$TB_BIN/$p" ] || tb_skip "no $TB_BIN/$p"
done
REPS=${TB_REPS:-$(tr ' ' '\n' </proc/cmdline | sed -n 's/^tb\.vlreps=//p' | tail -n 1)}
case $REPS in '' | *[!0-9]*) REPS=3 ;; esac
VL="$TB_VMMLOAD -q --mem-mib 1024 --timeout 600"
MD5_MB=32
dd if=/dev/urandom of=/tmp/vb-md5 bs=1M count=$MD5_MB 2>/dev/null
# Compressor input: binaries (compressible, not trivially).
cat "$TB_VMMLOAD" /usr/bin/* 2>/dev/null | head -c 2097152 >/tmp/vb-xz
md5sum /tmp/vb-md5 >/dev/null
tb_fact reps "$REPS"
tb_fact md5_file_mib "$MD5_MB"
tb_fact_str backend_report "$($VL --report /tmp/vb-r.json -- "$TB_BIN/vl-hello" >/dev/null 2>&1; sed -n 's/^  "backend": *"\([^"]*\)".*/\1/p' /tmp/vb-r.json)"

# run CONFIG CMD...: wall milliseconds of one run (stdout discarded), or
# "fail" with the run's stderr kept in $TB_OUT/last.err
run() {
    _c=$1
    shift
    _a=$(tb_now_ms)
    case $_c in
    native) "$@" >/dev/null 2>"$TB_OUT/last.err" ;;
    off) $VL --ring-entries 0 -- "$@" >/dev/null 2>"$TB_OUT/last.err" ;;
    writes) $VL --reads off -- "$@" >/dev/null 2>"$TB_OUT/last.err" ;;
    reads) $VL -- "$@" >/dev/null 2>"$TB_OUT/last.err" ;;
    esac
    _rc=$?
    _b=$(tb_now_ms)
    if [ "$_rc" = 0 ]; then echo $((_b - _a)); else echo "fail $_rc"; fi
}
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : -1) }'; }

# measure NAME CMD...: facts NAME_CONFIG_ms (median of the runs that
# succeeded) and NAME_CONFIG_slowdown_pct; a failed run is a failed check
# with its stderr in $TB_OUT/NAME-CONFIG-REP.err.
measure() {
    W=$1
    shift
    t_native="" t_off="" t_writes="" t_reads=""
    i=0
    while [ "$i" -lt "$REPS" ]; do
        for c in native off writes reads; do
            ms=$(run "$c" "$@")
            case $ms in
            fail*)
                cp "$TB_OUT/last.err" "$TB_OUT/$W-$c-$i.err"
                tb_fail "$W-$c-run-$i" "exit ${ms#fail }: $(head -c 300 "$TB_OUT/last.err" | tr '\n' '|')"
                ;;
            *) eval "t_$c=\"\$t_$c $ms\"" ;;
            esac
            tb_log "$W $c run $i: $ms ms"
        done
        i=$((i + 1))
    done
    nat=$(echo "$t_native" | median)
    tb_fact "${W}_native_ms" "$nat"
    for c in off writes reads; do
        eval "m=\$(echo \"\$t_$c\" | median)"
        tb_fact "${W}_${c}_ms" "$m"
        # (parenthesised: a bare '>' in printf's arguments is a redirection)
        tb_fact "${W}_${c}_slowdown_pct" "$(awk -v v="$m" -v n="$nat" 'BEGIN { printf "%.1f", (n > 0 && v > 0 ? (v / n - 1) * 100 : -1) }')"
    done
}

# futex semantics on this backend, against native (tests/vmmload/futex.c)
"$TB_BIN/vl-futex" >"$TB_OUT/futex.native" 2>&1
$VL --ring-entries 0 -- "$TB_BIN/vl-futex" >"$TB_OUT/futex.vmmload" 2>&1
if cmp -s "$TB_OUT/futex.native" "$TB_OUT/futex.vmmload"; then
    tb_pass futex-semantics-as-native
else
    tb_fail futex-semantics-as-native "$(diff "$TB_OUT/futex.native" "$TB_OUT/futex.vmmload" | head -n 8 | tr '\n' '|')"
fi
measure cpu "$TB_BIN/vl-cpu" 1
measure md5 /usr/bin/md5sum /tmp/vb-md5
measure xz /usr/bin/xz -T2 -3 --block-size=512KiB -c /tmp/vb-xz
tb_fact syscall_roundtrip_native_ns "$("$TB_BIN/vl-sysbench" 100000)"
tb_fact syscall_roundtrip_vmmload_ns "$($VL --ring-entries 0 -- "$TB_BIN/vl-sysbench" 20000)"
tb_fact clock_gettime_native_ns "$("$TB_BIN/vl-sysbench" 100000 clock)"
tb_fact clock_gettime_vmmload_ns "$($VL --ring-entries 0 -- "$TB_BIN/vl-sysbench" 20000 clock)"
tb_fact futex_pingpong_native_ns "$("$TB_BIN/vl-futex" pingpong 20000)"
tb_fact futex_pingpong_vmmload_ns "$($VL --ring-entries 0 -- "$TB_BIN/vl-futex" pingpong 5000)"
tb_finish

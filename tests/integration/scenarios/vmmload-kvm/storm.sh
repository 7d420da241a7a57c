# shellcheck shell=sh
# Repeated sibling signal storms (tests/vmmload/signals.c sibling-storm) and
# copy-on-write storms (cow-storm: a live fork, no signals) on standard KVM,
# sourced by l1.sh. One storm in four L1 boots once ended in a
# guest triple fault; repeating it, also with the sampler clearing accessed
# bits every 5 ms while the forked sibling keeps guest RAM copy-on-write,
# makes such a race show up in one boot. A crash is evidence, never retried
# away: every failed run is a failed check, its stderr is kept.
#
# Open (issue 12, docs/vmmload.md): on the testbed's standard KVM a guest
# dies in about one storm in six. Until that is understood the repetition
# is opt-in, so that the default run keeps one storm (l1.sh) and CI's
# verdict stays about regressions; reproduce with
#   ./scripts/testbed.sh --l1-append tb.vlstorm=6 vmmload-kvm
# L1 command line: tb.vlstorm=N runs each configuration N times (default
# VL_STORM_RUNS, 0); tb.vlstormtrace=1 records KVM's trace events and keeps
# the last ones before a failed run in $TB_OUT/storm-CFG-I.kvmtrace (off by
# default: tracing changes the timing under TCG).

VL_STORM_RUNS=${VL_STORM_RUNS:-0}
_sr=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^tb\.vlstorm=//p' | tail -n 1)
[ -n "$_sr" ] && VL_STORM_RUNS=$_sr
_trace=/sys/kernel/tracing
_tracing=0
if tr ' ' '\n' </proc/cmdline | grep -qx 'tb\.vlstormtrace=1'; then
    [ -d "$_trace/events" ] || mount -t tracefs nodev "$_trace" 2>/dev/null
    if [ -d "$_trace/events/kvm" ]; then
        echo 0 >"$_trace/tracing_on"
        echo 1024 >"$_trace/buffer_size_kb"
        echo 1 >"$_trace/events/kvm/enable"
        _tracing=1
    fi
fi
tb_fact storm_kvm_trace "$_tracing"

# storm_cfg MODE NAME OPTIONS...: VL_STORM_RUNS runs of `vl-signals MODE`
# under vmmload with OPTIONS, each against the native output
storm_cfg() {
    _m=$1
    _c=$2
    shift 2
    "$TB_BIN/vl-signals" "$_m" >"$TB_OUT/storm.native" 2>&1
    _rn=$?
    _i=1
    _failed=0
    while [ "$_i" -le "$VL_STORM_RUNS" ]; do
        _o=$TB_OUT/storm-$_c-$_i
        [ "$_tracing" = 1 ] && { echo >"$_trace/trace"; echo 1 >"$_trace/tracing_on"; }
        # A storm takes seconds; a crashed sibling leaves the parent
        # waiting for its last signal until --timeout (status 124).
        "$TB_VMMLOAD" -q --mem-mib 512 --timeout 30 "$@" -- "$TB_BIN/vl-signals" "$_m" \
            >"$_o.out" 2>"$_o.stderr"
        _rv=$?
        [ "$_tracing" = 1 ] && echo 0 >"$_trace/tracing_on"
        if [ "$_rv" = "$_rn" ] && cmp -s "$TB_OUT/storm.native" "$_o.out"; then
            rm -f "$_o.out" "$_o.stderr"
        else
            _failed=$((_failed + 1))
            [ "$_tracing" = 1 ] && tail -n 4000 "$_trace/trace" >"$_o.kvmtrace"
            tb_log "storm $_c run $_i: exit $_rv (native $_rn): $(head -c 800 "$_o.stderr")"
        fi
        _i=$((_i + 1))
    done
    tb_check_eq "storm-$_c-x$VL_STORM_RUNS" 0 "$_failed"
}
if [ "$VL_STORM_RUNS" -gt 0 ]; then
    storm_cfg sibling-storm default
    storm_cfg sibling-storm sample-5ms --interval-ms 5
    storm_cfg sibling-storm sample-5ms-writes-only --interval-ms 5 --reads off
    storm_cfg sibling-storm untracked --ring-entries 0 --reads off
    # The same copy-on-write pressure without signals.
    storm_cfg cow-storm cow-sample-5ms --interval-ms 5
    storm_cfg cow-storm cow-untracked --ring-entries 0 --reads off
fi
[ "$_tracing" = 1 ] && echo 0 >"$_trace/events/kvm/enable"
tb_fact storm_runs "$VL_STORM_RUNS"

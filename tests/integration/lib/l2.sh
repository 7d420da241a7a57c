# shellcheck shell=sh
# L2-side helpers (inside the guest booted by our VMM, or by QEMU with
# --l2-in-qemu). Source common.sh first.
#
#   tb_l2_handshake [SECS]   print "@@TB-L2 READY <scenario>" and wait (at
#                            most SECS, default $TB_ACK_TIMEOUT or 30) for a
#                            line containing "tb-ack" on the console.
#                            Returns at once in standalone mode
#                            (TB_STANDALONE=1, i.e. --l2-in-qemu).
#                            Sets TB_ACK=ok|timeout|standalone.
#   tb_bg_start VAR CMD...   run CMD in the background, output to a file;
#                            VAR_PID and VAR_OUT are set
#   tb_bg_stop PID           stop a background helper (SIGTERM, then SIGKILL;
#                            bounded, a helper that will not die fails)
#
# Environment (set by the L2 /init): TB_SCENARIO, TB_SIDE=l2, TB_MODE=l2,
# TB_LIB, TB_BIN, TB_STANDALONE (0/1), TB_ACK_TIMEOUT.

tb_l2_handshake() {
    _tb_limit=${1:-${TB_ACK_TIMEOUT:-30}}
    if [ "${TB_STANDALONE:-0}" = 1 ]; then
        echo "@@TB-L2 READY $TB_SCENARIO standalone"
        TB_ACK=standalone
        return 0
    fi
    _tb_t0=$(tb_now_ms)
    _tb_deadline=$((_tb_t0 + _tb_limit * 1000))
    echo "@@TB-L2 READY $TB_SCENARIO"
    TB_ACK=timeout
    while :; do
        _tb_now=$(tb_now_ms)
        _tb_left=$(((_tb_deadline - _tb_now + 999) / 1000))
        [ "$_tb_left" -gt 0 ] || break
        # The console tty buffers input even before this read starts.
        # shellcheck disable=SC3045 # busybox ash supports read -t
        if read -r -t "$_tb_left" _tb_line; then
            case $_tb_line in *tb-ack*)
                TB_ACK=ok
                break
                ;;
            esac
        else
            # timeout, or EOF (no console input possible): stop waiting
            # only when the time is really up or input is gone for good.
            [ "$(tb_now_ms)" -lt "$_tb_deadline" ] || break
            sleep 0.1
        fi
    done
    echo "@@TB-L2 ACK $TB_SCENARIO $TB_ACK after $(($(tb_now_ms) - _tb_t0)) ms"
}

tb_bg_start() {
    _tb_var=$1
    shift
    _tb_out=/tmp/tb-bg-$_tb_var.out
    "$@" >"$_tb_out" 2>&1 &
    eval "${_tb_var}_PID=\$!"
    eval "${_tb_var}_OUT=\$_tb_out"
}

# Running, not a zombie waiting to be reaped.
_tb_running() {
    _tb_st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$_tb_st" ] && [ "$_tb_st" != Z ]
}

# PID TENTHS: whether PID stops running within TENTHS tenths of a second.
_tb_exits_within() {
    _tb_i=0
    while _tb_running "$1"; do
        [ "$_tb_i" -lt "$2" ] || return 1
        sleep 0.1
        _tb_i=$((_tb_i + 1))
    done
}

# SIGTERM, 30 s, SIGKILL, 10 s: a helper that will not die (stuck in the
# kernel) is a failure with its evidence -- where it waits and the
# kernel's blocked tasks -- instead of a wait that never ends.
tb_bg_stop() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    if ! _tb_exits_within "$1" 300; then
        _tb_comm=$(cat "/proc/$1/comm" 2>/dev/null)
        echo "tb_bg_stop: $_tb_comm ($1) still running 30 s after SIGTERM," \
            "state $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)," \
            "wchan $(cat "/proc/$1/wchan" 2>/dev/null); its kernel stack:"
        sed 's/^/S| /' "/proc/$1/stack" 2>/dev/null
        kill -KILL "$1" 2>/dev/null || true
        if ! _tb_exits_within "$1" 100; then
            echo w >/proc/sysrq-trigger 2>/dev/null
            dmesg | tail -n 80 | sed 's/^/K| /'
            tb_fail "stop-$_tb_comm" "pid $1 survived SIGTERM and SIGKILL (stuck in the kernel)"
            return 1
        fi
        tb_fail "stop-$_tb_comm" "pid $1 ignored SIGTERM for 30 s; SIGKILL ended it"
    fi
    wait "$1" 2>/dev/null || true
}

# Kernel log since a point, robust to the ring buffer wrapping (a line
# count taken earlier is not: old lines drop off the front).
#   tb_kmsg_mark NAME    write a unique marker line to the kernel log
#   tb_kmsg_since NAME   the kernel log after that marker; all of it (and
#                        a note on stderr) if the marker has been overwritten
#   tb_kernel_reports    count of crash reports (BUG:, Oops, WARNING:,
#                        general protection) in the lines on stdin
tb_kmsg_mark() {
    eval "_TB_KMARK_$1=\"@@TB-KMARK $1 \$\$-\$(tb_now_ms)\""
    eval "echo \"\$_TB_KMARK_$1\"" >/dev/kmsg 2>/dev/null || true
}
tb_kmsg_since() {
    eval "_tb_m=\$_TB_KMARK_$1"
    if dmesg | grep -qF "$_tb_m"; then
        dmesg | awk -v m="$_tb_m" 'seen { print } index($0, m) { seen = 1 }'
    else
        echo "tb_kmsg_since: marker $1 not in the kernel log (wrapped): all of it" >&2
        dmesg
    fi
}
tb_kernel_reports() { grep -cE 'BUG:|Oops|WARNING:|general protection' || true; }

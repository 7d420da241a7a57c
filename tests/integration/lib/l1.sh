# shellcheck shell=sh
# L1-side helpers (the host that runs our VMM). Source common.sh first.
#
#   tb_vmm_start ARGS...        start "$TB_VMM" [--landlock] ARGS... in the background
#                               (--landlock for our VMM unless TB_VMM_LANDLOCK=off):
#                               stdout (the guest serial console with
#                               --serial tty) -> $TB_OUT/serial.log,
#                               stderr -> $TB_OUT/vmm.stderr, stdin from the
#                               FIFO $TB_OUT/vmm.stdin (kept open on fd 9).
#                               Sets TB_VMM_PID, TB_VMM_START_MS.
#   tb_vmm_alive                is the VMM still running (not a zombie)?
#   tb_vmm_wait_line ERE SECS   wait for a serial line; 0 found, 1 timeout,
#                               2 the VMM exited first, 3 the guest crashed
#                               (tb_l2_crash: a panic, or a second boot with
#                               TB_L2_SINGLE_BOOT=1; reported as l2-no-crash
#                               with the evidence, and the VMM stopped)
#   tb_vmm_send TEXT            write TEXT + newline to the guest console
#   tb_l2_hang WHAT [DIAG]      the guest stopped doing WHAT: l2-no-hang
#                               with its vCPUs' exits, VMM stopped (a crash
#                               for the harness)
#   tb_vmm_wait_exit SECS       wait for the VMM to exit (TERM then KILL on
#                               timeout); sets TB_VMM_RC (124 = timed out)
#   tb_vmm_stop                 kill the VMM if still running
#   (start, wait_exit and stop fail "seccomp-no-sigsys" when the VMM log
#   has the seccomp SIGSYS report, see tb_sigsys_check)
#   tb_vmm_diag [FILE]          dump the VMM's threads (state, wchan, kernel
#                               stack) and KVM debugfs counters to FILE
#                               (default $TB_OUT/vmm-diag.txt), e.g. when the
#                               guest hangs, before killing it
#   tb_l2_json                  last L2 result JSON line from serial.log
#   tb_l2_marker_rc             rc from "@@TB-L2 END <scenario> rc=N"
#   tb_pid_alive PID
#   tb_numa_maps_summary PID    "start size policy N0=.. N1=.." per mapping
#   tb_l1_abit_tlb_flush        tiering.ko's abit_tlb_flush for an L2 of this
#                               L1: 2 with nested paging (NPT/EPT), 1 on
#                               shadow paging (L1's KVM re-reads a guest page
#                               table's accessed bits only when it flushes)
#
# L2-side handshake (see lib/l2.sh): the guest prints
#   "@@TB-L2 READY <scenario>" when it has finished its checks and holds
# its memory; the L1 side inspects the VMM, then tb_vmm_send "tb-ack"; the
# guest stops waiting (bounded) and powers off.

# shellcheck disable=SC2034 # TB_VMM_* are read by the scenarios
TB_VMM_PID=""
TB_VMM_RC=""

tb_pid_alive() {
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
    _tb_st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ -n "$_tb_st" ] && [ "$_tb_st" != Z ] && [ "$_tb_st" != X ]
}

tb_vmm_start() {
    # A previous VMM's log is about to be overwritten: check it first.
    tb_sigsys_check "$TB_OUT/vmm.stderr"
    # Our VMM always runs under Landlock (issue 16; seccomp is on by
    # default): a start without --kernel names the files of the VMs it will
    # create with --landlock-rules. TB_VMM_LANDLOCK=off opts out; upstream's
    # binary and the QEMU stand-in run as given.
    if [ "${TB_VMM_LANDLOCK:-on}" = on ] && [ "$TB_VMM" != "${TB_CH_UPSTREAM:-}" ] &&
        [ "${TB_VMM##*/}" = cloud-hypervisor ]; then
        case " $* " in
        *" --landlock "*) ;;
        *) set -- --landlock "$@" ;;
        esac
    fi
    TB_VMM_SERIAL=$TB_OUT/serial.log
    TB_VMM_STDERR=$TB_OUT/vmm.stderr
    _tb_fifo=$TB_OUT/vmm.stdin
    rm -f "$_tb_fifo"
    mkfifo "$_tb_fifo"
    # Read-write open of a FIFO never blocks and keeps a writer present, so
    # the VMM never sees EOF on stdin while the scenario runs.
    exec 9<>"$_tb_fifo"
    {
        printf '%s' "$TB_VMM"
        for _tb_a in "$@"; do printf " '%s'" "$_tb_a"; done
        printf '\n'
    } >"$TB_OUT/vmm.cmdline"
    tb_log "starting VMM: $(cat "$TB_OUT/vmm.cmdline")"
    TB_VMM_START_MS=$(tb_now_ms)
    "$TB_VMM" "$@" <"$_tb_fifo" >"$TB_VMM_SERIAL" 2>"$TB_VMM_STDERR" &
    TB_VMM_PID=$!
    tb_log "VMM pid $TB_VMM_PID"
}

tb_vmm_alive() { tb_pid_alive "$TB_VMM_PID"; }

# tb_l2_crash: "panic LINE" when the guest kernel panicked, "reboot LINE"
# when it booted a second time and the scenario set TB_L2_SINGLE_BOOT=1
# (a triple fault resets the guest with no message), else nothing. LINE:
# where in serial.log. reboot=k panic=-1 turn both into a new boot, which
# runs the scenario again: without this the run ends in its timeout, with
# the evidence far up the log.
tb_l2_crash() {
    [ -f "$TB_VMM_SERIAL" ] || return 0
    awk -v single="${TB_L2_SINGLE_BOOT:-0}" '{ sub(/\r$/, "") }
        /Kernel panic - not syncing/ && !p { p = NR }
        single == 1 && /Linux version [0-9]/ && ++banners == 2 { r = NR }
        END { if (p) print "panic " p; else if (r) print "reboot " r }' "$TB_VMM_SERIAL" 2>/dev/null
}

# tb_l2_crash_report: once per scenario, fail "l2-no-crash" with the crash
# sign and its first report lines (first line, RIP, task), save the guest
# console around it to $TB_OUT/l2-crash.txt and show it on the L1 console
# (which reaches the host even when this run is killed before its output
# is packed), and stop the VMM. Needs TB_L2_CRASH (tb_vmm_wait_line).
tb_l2_crash_report() {
    [ -z "${_tb_crash_reported:-}" ] || return 0
    _tb_crash_reported=1
    _tb_at=${TB_L2_CRASH#* }
    # From 20 lines before the first report within 400 lines of the sign
    # (a recursive fault prints dozens of frames between the oops and the
    # panic), else 60 lines before it, to 40 lines after.
    tr -d '\r' <"$TB_VMM_SERIAL" | awk -v at="$_tb_at" '
        NR > at - 400 && NR <= at && !first && /Oops|BUG:|general protection|double fault/ { first = NR }
        { line[NR] = $0 }
        NR >= at + 40 { exit }
        END { a = first ? first - 20 : at - 60; for (i = (a > 1 ? a : 1); i <= NR; i++) print line[i] }' \
        >"$TB_OUT/l2-crash.txt"
    tb_log "L2 crashed (${TB_L2_CRASH%% *} at ${TB_VMM_SERIAL##*/} line $_tb_at); L2 console around it:"
    sed 's/^/L2| /' "$TB_OUT/l2-crash.txt"
    _tb_cr=$(awk '
        !first && /Oops|BUG:|general protection|Kernel panic|double fault|Linux version [0-9]/ { sub(/^\[ *[0-9.]+\] /, ""); first = $0; next }
        first && !rip && /RIP: 0010/ { sub(/^\[ *[0-9.]+\] /, ""); rip = $0 }
        first && !comm && /Comm: / { sub(/.*Comm: /, "Comm: "); sub(/ (Tainted|Not tainted).*/, ""); comm = $0 }
        END { print substr(first, 1, 120) " | " rip " | " comm }' "$TB_OUT/l2-crash.txt")
    tb_fail l2-no-crash "${TB_L2_CRASH%% *} at ${TB_VMM_SERIAL##*/} line $_tb_at: $_tb_cr (l2-crash.txt); VMM stopped"
    tb_vmm_stop
}

_tb_vmm_line_or_dead() {
    if _tb_has_line "$TB_VMM_SERIAL" "$1"; then
        _tb_vl=found
        return 0
    fi
    # the whole log again: once a second is soon enough (polls: 10/s)
    _tb_now=$(tb_now_ms)
    if [ "$_tb_now" -ge "${_tb_crash_scan_ms:-0}" ] || ! tb_vmm_alive; then
        _tb_crash_scan_ms=$((_tb_now + 1000))
        TB_L2_CRASH=$(tb_l2_crash)
        if [ -n "$TB_L2_CRASH" ]; then
            _tb_vl=crash
            return 0
        fi
    fi
    if ! tb_vmm_alive; then
        _tb_vl=dead
        return 0
    fi
    return 1
}

tb_vmm_wait_line() {
    _tb_vl=timeout
    tb_wait_until "$2" _tb_vmm_line_or_dead "$1" || true
    case $_tb_vl in
    found) return 0 ;;
    crash)
        tb_l2_crash_report
        return 3
        ;;
    dead)
        # The line may have been written just before the exit.
        _tb_has_line "$TB_VMM_SERIAL" "$1" && return 0
        return 2
        ;;
    esac
    return 1
}

tb_vmm_send() { printf '%s\n' "$1" >&9; }

_tb_vmm_gone() { ! tb_vmm_alive; }

tb_vmm_wait_exit() {
    [ -n "$TB_VMM_PID" ] || return 1
    if tb_wait_until "$1" _tb_vmm_gone; then
        wait "$TB_VMM_PID"
        TB_VMM_RC=$?
    else
        tb_log "VMM did not exit within $1 s: sending TERM"
        kill -TERM "$TB_VMM_PID" 2>/dev/null || true
        tb_wait_until 5 _tb_vmm_gone || kill -KILL "$TB_VMM_PID" 2>/dev/null || true
        wait "$TB_VMM_PID" || true
        TB_VMM_RC=124
    fi
    TB_VMM_EXIT_MS=$(tb_now_ms)
    tb_sigsys_check "$TB_VMM_STDERR"
    exec 9>&-
    TB_VMM_PID=""
    return 0
}

tb_vmm_stop() {
    [ -n "$TB_VMM_PID" ] || return 0
    kill -TERM "$TB_VMM_PID" 2>/dev/null || true
    tb_wait_until 5 _tb_vmm_gone || kill -KILL "$TB_VMM_PID" 2>/dev/null || true
    wait "$TB_VMM_PID" 2>/dev/null || true
    tb_sigsys_check "$TB_VMM_STDERR"
    TB_VMM_PID=""
}

tb_l2_json() {
    tr -d '\r' <"${1:-$TB_VMM_SERIAL}" 2>/dev/null | grep '^{.*"side":"l2"' | tail -n 1
}

tb_l2_marker_rc() {
    tr -d '\r' <"${1:-$TB_VMM_SERIAL}" 2>/dev/null |
        sed -n "s/.*@@TB-L2 END ${TB_SCENARIO} rc=\([0-9]*\).*/\1/p" | tail -n 1
}

# tb_numa_maps_summary PID: one line per mapping that has a policy other
# than default or resident pages: "start size_bytes policy N0=.. N1=..".
tb_numa_maps_summary() {
    while read -r _tb_range _tb_rest; do
        _tb_s=${_tb_range%-*}
        _tb_e=${_tb_range#*-}
        echo "$_tb_s $((0x$_tb_e - 0x$_tb_s))"
    done <"/proc/$1/maps" >"$TB_OUT/.maps-sizes.$$"
    awk 'NR == FNR { size[$1] = $2; next }
        {
            nodes = ""
            for (i = 3; i <= NF; i++) if ($i ~ /^N[0-9]+=/) nodes = nodes " " $i
            if ($2 == "default" && nodes == "") next
            print $1, (($1 in size) ? size[$1] : "?"), $2 nodes
        }' "$TB_OUT/.maps-sizes.$$" "/proc/$1/numa_maps"
    rm -f "$TB_OUT/.maps-sizes.$$"
}

tb_l1_abit_tlb_flush() {
    case $(cat /sys/module/kvm_amd/parameters/npt /sys/module/kvm_intel/parameters/ept 2>/dev/null | head -n 1) in
    Y | 1) echo 2 ;;
    *) echo 1 ;;
    esac
}

# _tb_kvm_exits SECS: where the guest runs, from the kvm_exit events of
# the VMM's threads over SECS seconds (a sampling window): count, exit
# reason, guest RIP, most frequent first. A guest that hangs with nothing
# on its console shows the loop it spins in.
_tb_kvm_exits() {
    _tb_tr=/sys/kernel/tracing
    [ -w "$_tb_tr/events/kvm/kvm_exit/enable" ] || return 0
    echo "## kvm_exit over $1 s: count, reason, guest RIP, guest function"
    for _tb_t in /proc/"$TB_VMM_PID"/task/*; do printf '%s ' "${_tb_t##*/}"; done >"$_tb_tr/set_event_pid"
    : >"$_tb_tr/trace"
    echo 1 >"$_tb_tr/events/kvm/kvm_exit/enable"
    sleep "$1"
    echo 0 >"$_tb_tr/events/kvm/kvm_exit/enable"
    grep -o 'reason [^ ]* rip 0x[0-9a-f]*' "$_tb_tr/trace" | sort | uniq -c | sort -rn |
        head -n 20 | _tb_name_guest_rips
    : >"$_tb_tr/set_event_pid"
    : >"$_tb_tr/trace"
}

# Adds the guest kernel function to "count reason R rip 0xRIP" lines when
# the guest runs this L1's kernel build (its "@@TB-L2 INIT" line gives its
# _stext, i.e. its KASLR base, and its release): offsets from _stext are
# the same in both, so this kernel's /proc/kallsyms names them. Only the
# low 32 bits are compared (awk's numbers are doubles; the text is far
# smaller than 4 GiB).
_tb_name_guest_rips() {
    _tb_init=$(tr -d '\r' <"$TB_VMM_SERIAL" 2>/dev/null | grep '@@TB-L2 INIT .*stext=0x' | tail -n 1)
    _tb_st2=$(echo "$_tb_init" | sed -n 's/.*stext=0x\([0-9a-f]*\).*/\1/p')
    _tb_st1=$(grep -m 1 ' _stext$' /proc/kallsyms | cut -d ' ' -f 1)
    case "$_tb_init" in *" kernel=$(uname -r)"*) ;; *) _tb_st2="" ;; esac
    if [ -z "$_tb_st2" ] || [ -z "$_tb_st1" ] || [ "$_tb_st1" = 0000000000000000 ]; then
        cat
        return
    fi
    awk -v st1="$_tb_st1" -v st2="$_tb_st2" '
        function lo32(h,   v, i) {
            h = tolower(substr(h, length(h) - 7)); v = 0
            for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
            return v
        }
        function rel(h, base) { return (lo32(h) - base + 4294967296) % 4294967296 }
        NR == FNR { if ($2 ~ /^[tT]$/) { r = rel($1, b1); if (r < 1073741824) { a[++n] = r; s[n] = $3 } } next }
        {
            line = $0; rip = $NF; sub(/^0x/, "", rip)
            if (length(rip) == 16 && substr(rip, 1, 4) == "ffff") {
                r = rel(rip, b2); best = -1
                for (i = 1; i <= n; i++) if (a[i] <= r && (best < 0 || a[i] > a[best])) best = i
                if (best > 0) line = line sprintf(" %s+0x%x", s[best], r - a[best])
            }
            print line
        }
        BEGIN { b1 = lo32(st1); b2 = lo32(st2) }
    ' /proc/kallsyms -
}

# tb_diag_exit_sites FILE N: the N most frequent L2 exit sites of a
# tb_vmm_diag FILE on one line ("no exits" when the L2's vCPUs did not run
# during its 2 s sample).
tb_diag_exit_sites() {
    awk -v n="$2" '/^## kvm_exit/ { on = 1; next } on && /^#/ { exit }
        on && k < n { sub(/^ +/, ""); out = out (k++ ? "; " : "") $0 }
        END { print (k ? out : "no exits") }' "$1" 2>/dev/null
}

# tb_l2_hang WHAT [DIAG]: the guest stopped doing WHAT (answering on its
# console, moving its balloon): fail "l2-no-hang" with where its vCPUs run
# (the kvm_exit sample of tb_vmm_diag: DIAG if the scenario just took one,
# else a fresh vmm-diag-hang.txt) and stop the VMM. The harness counts it
# as a crash (evidence kept, a CRASH line, one re-run:
# scripts/lib/tb-run.sh); the scenario should end after it, as every later
# step would only time out.
tb_l2_hang() {
    _tb_hd=${2:-}
    if [ ! -f "$_tb_hd" ]; then
        _tb_hd=$TB_OUT/vmm-diag-hang.txt
        tb_vmm_diag "$_tb_hd" >&2
    fi
    tb_fail l2-no-hang "$1; L2 exits in 2 s: $(tb_diag_exit_sites "$_tb_hd" 3) (${_tb_hd##*/}); VMM stopped"
    tb_vmm_stop
}

tb_vmm_diag() {
    _tb_df=${1:-$TB_OUT/vmm-diag.txt}
    [ -n "$TB_VMM_PID" ] && [ -d "/proc/$TB_VMM_PID" ] || return 0
    {
        echo "# VMM pid $TB_VMM_PID at uptime $(tb_now_ms) ms"
        grep -E '^(VmHWM|VmRSS|Threads)' "/proc/$TB_VMM_PID/status"
        for _tb_t in /proc/"$TB_VMM_PID"/task/*; do
            echo "## tid ${_tb_t##*/} $(cat "$_tb_t/comm" 2>/dev/null)" \
                "state=$(sed 's/.*) //' "$_tb_t/stat" 2>/dev/null | cut -c1)" \
                "wchan=$(cat "$_tb_t/wchan" 2>/dev/null)"
            cat "$_tb_t/stack" 2>/dev/null
        done
        for _tb_k in /sys/kernel/debug/kvm/"$TB_VMM_PID"-*; do
            [ -d "$_tb_k" ] || continue
            echo "## kvm debugfs $_tb_k"
            for _tb_f in "$_tb_k"/*; do
                [ -f "$_tb_f" ] && echo "${_tb_f##*/} $(cat "$_tb_f" 2>/dev/null)"
            done
            for _tb_v in "$_tb_k"/vcpu*; do
                [ -d "$_tb_v" ] || continue
                echo "### ${_tb_v##*/}"
                for _tb_f in "$_tb_v"/*; do
                    [ -f "$_tb_f" ] && echo "${_tb_f##*/} $(cat "$_tb_f" 2>/dev/null)"
                done
            done
        done
        _tb_kvm_exits 2
    } >"$_tb_df" 2>&1
    tb_log "VMM diagnostics saved to $_tb_df"
}

# --- REST API helpers (scenarios that start the VMM with --api-socket) ----
#   tb_chr ARGS...            ch-remote on $TB_API_SOCK
#   tb_balloon_field TIER KEY a number from vm.balloon-stats' entry for TIER
#                             (fmem|smem), e.g. actual, target, host_inflated
#   tb_balloon_actual_is F S  the guest reports balloons of F and S bytes
TB_API_SOCK=${TB_OUT:-/tmp}/api.sock
# Bounded: the VMM answers every call within its 60 s API timeout; a
# ch-remote that gets nothing in TB_CHR_TIMEOUT s (100) means a hung VMM,
# whose threads are then printed (stderr) and saved (tb_vmm_diag).
tb_chr() {
    timeout -k 5 "${TB_CHR_TIMEOUT:-100}" "$TB_CH_REMOTE" --api-socket "$TB_API_SOCK" "$@"
    _tb_chr_rc=$?
    case $_tb_chr_rc in 124 | 137 | 143) _tb_chr_hung=1 ;; *) _tb_chr_hung=0 ;; esac # GNU, KILL, busybox
    if [ "$_tb_chr_hung" = 1 ]; then
        tb_log "ch-remote $1: no answer within ${TB_CHR_TIMEOUT:-100} s; VMM threads:" >&2
        tb_vmm_diag "$TB_OUT/vmm-diag-hung-api.txt" >&2
        grep -E '^## tid|^# VMM' "$TB_OUT/vmm-diag-hung-api.txt" >&2 2>/dev/null
    fi
    return "$_tb_chr_rc"
}
tb_balloon_field() {
    # ch-remote prints keys sorted, so "tier" is the last key of its
    # object: cut the JSON at every "}" and pick the piece naming the tier.
    tb_chr balloon-stats 2>/dev/null | tr -d ' \n' | tr '}' '\n' | grep "\"tier\":\"$1\"" |
        sed -n "s/.*[{,]\"$2\":\([0-9]*\).*/\1/p"
}
tb_balloon_actual_is() {
    [ "$(tb_balloon_field fmem actual)" = "$1" ] && [ "$(tb_balloon_field smem actual)" = "$2" ]
}

# tb_vmm_ask CMD PATTERN [SECS]: send CMD to the guest's console, wait
# (default 30 s) for a complete serial line matching PATTERN (an ERE), print
# the newest one.
tb_vmm_ask() {
    tb_vmm_send "$1"
    tb_vmm_wait_line "$2" "${3:-30}" || return 1
    tb_complete_lines "$TB_VMM_SERIAL" | grep -E -- "$2" | tail -n 1
}

# --- upstream Cloud Hypervisor v53 (the anchors) ----------------------------
#   tb_need_upstream [vmm] [remote]  tb_skip unless upstream's cloud-hypervisor
#                             ($TB_CH_UPSTREAM) / ch-remote
#                             ($TB_CH_REMOTE_UPSTREAM) are there; they are
#                             packed only when ../shared/anchors/
#                             cloud-hypervisor-v53/ exists beside the project
#   tb_upstream_args ARGS...  print ARGS one per line with our tier keys
#                             (latency_ns=, bandwidth_mbps= in --numa values)
#                             removed, for upstream's command line
tb_need_upstream() {
    [ $# -gt 0 ] || set -- vmm remote
    for _tb_w in "$@"; do
        case $_tb_w in
        vmm) _tb_p=${TB_CH_UPSTREAM:-} ;;
        remote) _tb_p=${TB_CH_REMOTE_UPSTREAM:-} ;;
        *) continue ;;
        esac
        [ -n "$_tb_p" ] && [ -x "$_tb_p" ] ||
            tb_skip "anchors absent: upstream Cloud Hypervisor v53 $_tb_w binary not found (${_tb_p:-unset}); it is packed from ../shared/anchors/cloud-hypervisor-v53/ beside the project root, which this checkout lacks"
    done
}

tb_strip_tier_keys() { # one --numa value -> without latency_ns=/bandwidth_mbps=
    printf '%s\n' "$1" | sed -e 's/,latency_ns=[^,]*//g' -e 's/,bandwidth_mbps=[^,]*//g' \
        -e 's/^latency_ns=[^,]*,\{0,1\}//' -e 's/^bandwidth_mbps=[^,]*,\{0,1\}//' -e 's/^latency_ns=[^,]*,\{0,1\}//'
}

# --- JSON without jq/python (busybox awk) -----------------------------------
#   tb_json paths FILE          one line per value: "path<TAB>value" (scalars
#                               as written, containers as {} / []); path
#                               components joined by "." (array index = number)
#   tb_json get FILE PATH       the value at PATH, compact JSON
#   tb_json drop FILE K1,K2..   the whole document, compact, with every object
#                               member named K1, K2, ... removed (any depth)
#   tb_json_keys FILE [PATH]    the member names of the object at PATH (top
#                               level by default), sorted, one a line
#   tb_json_value FILE PATH     a scalar at PATH, strings unquoted
tb_json() {
    awk -v mode="$1" -v arg="${3:-}" '
    function ws() { while (pos <= n && index(" \t\r\n", substr(s, pos, 1))) pos++ }
    function str(   st, c) {
        st = pos; pos++
        while (pos <= n) {
            c = substr(s, pos, 1)
            if (c == "\\") pos += 2
            else if (c == "\"") { pos++; return substr(s, st, pos - st) }
            else pos++
        }
        bad = 1; return ""
    }
    function val(path,   c, out, k, kn, v, first, i, st, sub_) {
        ws(); c = substr(s, pos, 1)
        if (c == "{") {
            if (mode == "paths" && path != "") print path "\t{}"
            pos++; out = "{"; first = 1; ws()
            if (substr(s, pos, 1) == "}") { pos++; out = "{}" }
            else while (!bad) {
                ws(); k = str(); ws()
                if (substr(s, pos, 1) != ":") { bad = 1; break }
                pos++
                kn = substr(k, 2, length(k) - 2)
                v = val(path == "" ? kn : path "." kn)
                if (!(kn in drop)) { out = out (first ? "" : ",") k ":" v; first = 0 }
                ws(); c = substr(s, pos, 1); pos++
                if (c == "}") { out = out "}"; break }
                if (c != ",") { bad = 1; break }
            }
        } else if (c == "[") {
            if (mode == "paths" && path != "") print path "\t[]"
            pos++; out = "["; i = 0; ws()
            if (substr(s, pos, 1) == "]") { pos++; out = "[]" }
            else while (!bad) {
                v = val(path == "" ? i : path "." i)
                out = out (i ? "," : "") v; i++
                ws(); c = substr(s, pos, 1); pos++
                if (c == "]") { out = out "]"; break }
                if (c != ",") { bad = 1; break }
            }
        } else if (c == "\"") {
            out = str()
            if (mode == "paths") print path "\t" out
        } else {
            st = pos
            while (pos <= n && !index(",]} \t\r\n", substr(s, pos, 1))) pos++
            out = substr(s, st, pos - st)
            if (out == "") bad = 1
            if (mode == "paths") print path "\t" out
        }
        if (mode == "get" && path == arg) { got = out; found = 1 }
        return out
    }
    { s = s $0 "\n" }
    END {
        n = length(s); pos = 1
        if (mode == "drop") { m = split(arg, dk, ","); for (j = 1; j <= m; j++) drop[dk[j]] = 1 }
        r = val("")
        if (bad) exit 2
        if (mode == "drop") print r
        else if (mode == "get") { if (!found) exit 1; print got }
    }' "$2"
}

tb_json_keys() {
    _tb_jp=${2:-}
    tb_json paths "$1" | awk -F '\t' -v p="$_tb_jp" '
        { k = $1
          if (p != "") { if (substr(k, 1, length(p) + 1) != p ".") next; k = substr(k, length(p) + 2) }
          if (index(k, ".") == 0) print k }' | LC_ALL=C sort -u
}

tb_json_value() {
    tb_json get "$1" "$2" | sed -e 's/^"//' -e 's/"$//'
}

# shellcheck shell=sh
# Testbed scenario library, shared by the L1 side (l1.sh) and the L2 side
# (l2.sh). POSIX sh: runs under busybox ash (L1/L2 images) and bash/dash
# (direct mode). Source it, then call tb_begin.
#
#   tb_begin SIDE                  start a scenario side (l1 or l2)
#   tb_log MSG...                  timestamped log line
#   tb_pass NAME [DETAIL]          record a passed check
#   tb_fail NAME [DETAIL]          record a failed check
#   tb_check NAME CMD...           pass if CMD succeeds
#   tb_check_eq NAME WANT GOT      string equality
#   tb_check_ge NAME GOT MIN       integer GOT >= MIN
#   tb_check_le NAME GOT MAX       integer GOT <= MAX
#   tb_fact KEY JSON               record a fact (raw JSON value)
#   tb_fact_str KEY STRING         record a fact (string, escaped)
#   tb_report                      print the final JSON line, set TB_RC
#                                  (L1: fails if a file under TB_OUT has
#                                  the VMM's seccomp SIGSYS report)
#   tb_sigsys_check FILE...        fail "seccomp-no-sigsys" for each FILE
#                                  with the VMM's SIGSYS report
#   tb_finish                      tb_report, then exit TB_RC
#   tb_skip REASON                 print a SKIP JSON line, exit 77
#   tb_now_ms                      milliseconds since boot
#   tb_wait_until SECS CMD...      poll CMD (every 0.1 s) until it succeeds;
#                                  1 on timeout
#   tb_wait_file PATH SECS         wait for a file to exist
#   tb_wait_line FILE ERE SECS     wait for a complete line matching ERE in FILE
#   tb_complete_lines FILE         FILE's finished lines (no CRs)
#   tb_json_str STRING             JSON string literal of STRING
#   tb_nodelist_has LIST N         "0-2,5" contains N?

TB_NPASS=0
TB_NFAIL=0
TB_CHECKS=""
TB_FACTS=""
TB_RC=0
TB_SIDE=${TB_SIDE:-l1}
TB_SKIP_RC=77
TB_SIGSYS_SEEN=""

tb_now_ms() {
    # /proc/uptime has two decimals: "123.45 ..." -> 123450
    read -r _tb_up _tb_idle </proc/uptime
    _tb_s=${_tb_up%.*}
    _tb_f=${_tb_up#*.}
    echo "$((_tb_s * 1000 + ${_tb_f#0} * 10))"
}

tb_begin() {
    TB_SIDE=${1:-$TB_SIDE}
    TB_BEGIN_MS=$(tb_now_ms)
    tb_log "scenario ${TB_SCENARIO:-?} ($TB_SIDE, mode ${TB_MODE:-?}) starting"
}

tb_log() {
    _tb_t=$(tb_now_ms)
    echo "[$TB_SIDE $((_tb_t / 1000)).$(((_tb_t % 1000) / 100))] $*"
}

tb_json_str() {
    printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t' '  ' | tr -d '\000-\037')"
}

_tb_append() { # var-name fragment
    eval "_tb_cur=\$$1"
    if [ -z "$_tb_cur" ]; then
        eval "$1=\$2"
    else
        eval "$1=\"\$_tb_cur,\$2\""
    fi
}

tb_fact() { _tb_append TB_FACTS "$(tb_json_str "$1"):$2"; }
tb_fact_str() { _tb_append TB_FACTS "$(tb_json_str "$1"):$(tb_json_str "$2")"; }

tb_pass() {
    TB_NPASS=$((TB_NPASS + 1))
    _tb_append TB_CHECKS "$(tb_json_str "$1"):true"
    echo "PASS: $1${2:+ - $2}"
}

tb_fail() {
    TB_NFAIL=$((TB_NFAIL + 1))
    _tb_append TB_CHECKS "$(tb_json_str "$1"):false"
    echo "FAIL: $1${2:+ - $2}"
}

tb_check() {
    _tb_name=$1
    shift
    if "$@"; then tb_pass "$_tb_name"; else tb_fail "$_tb_name" "command failed: $*"; fi
}

tb_check_eq() {
    if [ "$2" = "$3" ]; then
        tb_pass "$1" "'$3'"
    else
        tb_fail "$1" "want '$2', got '$3'"
    fi
}

_tb_is_int() {
    case $1 in '' | *[!0-9-]*) return 1 ;; esac
    return 0
}

tb_check_ge() {
    if _tb_is_int "$2" && [ "$2" -ge "$3" ]; then
        tb_pass "$1" "$2 >= $3"
    else
        tb_fail "$1" "want >= $3, got '$2'"
    fi
}

tb_check_le() {
    if _tb_is_int "$2" && [ "$2" -le "$3" ]; then
        tb_pass "$1" "$2 <= $3"
    else
        tb_fail "$1" "want <= $3, got '$2'"
    fi
}

_tb_json_line() { # result
    _tb_end=$(tb_now_ms)
    printf '{"scenario":%s,"side":"%s","mode":%s,"result":"%s","passed":%d,"failed":%d,"duration_ms":%d,"checks":{%s},"facts":{%s}}\n' \
        "$(tb_json_str "${TB_SCENARIO:-?}")" "$TB_SIDE" "$(tb_json_str "${TB_MODE:-?}")" \
        "$1" "$TB_NPASS" "$TB_NFAIL" "$((_tb_end - ${TB_BEGIN_MS:-$_tb_end}))" \
        "$TB_CHECKS" "$TB_FACTS"
}

# The VMM's SIGSYS handler prints this line (vmm/src/seccomp.rs) when a
# thread makes a syscall its seccomp filter forbids.
TB_SIGSYS_ERE='cloud-hypervisor: seccomp: a .* thread made a forbidden syscall'

# tb_sigsys_check FILE...: one failed check per file whose text has the
# SIGSYS report (a VMM thread ran a syscall outside its filter).
tb_sigsys_check() {
    for _tb_sf in "$@"; do
        [ -f "$_tb_sf" ] || continue
        _tb_sl=$(grep -a -E "$TB_SIGSYS_ERE" "$_tb_sf" | head -n 1)
        [ -n "$_tb_sl" ] || continue
        case " $TB_SIGSYS_SEEN " in *" $_tb_sf "*) continue ;; esac
        TB_SIGSYS_SEEN="$TB_SIGSYS_SEEN $_tb_sf"
        tb_fail "seccomp-no-sigsys" "${_tb_sf##*/}: $_tb_sl"
    done
}

tb_report() {
    # Any VMM log under TB_OUT (L1 side) that reports a SIGSYS fails the run.
    if [ "$TB_SIDE" = l1 ] && [ -n "${TB_OUT:-}" ] && [ -d "$TB_OUT" ]; then
        # Regular files only: TB_OUT holds the VMM's stdin FIFO, which a
        # recursive grep would open and block on.
        # shellcheck disable=SC2046 # file names without blanks (TB_OUT)
        tb_sigsys_check $(find "$TB_OUT" -type f 2>/dev/null)
    fi
    if [ "$TB_NFAIL" -eq 0 ] && [ "$TB_NPASS" -gt 0 ]; then
        TB_RC=0
        tb_log "result: PASS ($TB_NPASS checks)"
        _tb_json_line PASS
    else
        TB_RC=1
        [ "$TB_NPASS" -gt 0 ] || [ "$TB_NFAIL" -gt 0 ] || tb_fail "no-checks-ran"
        tb_log "result: FAIL ($TB_NFAIL of $((TB_NPASS + TB_NFAIL)) checks failed)"
        _tb_json_line FAIL
    fi
}

tb_finish() {
    tb_report
    exit "$TB_RC"
}

tb_skip() {
    tb_fact_str skip_reason "$1"
    tb_log "SKIP: $1"
    _tb_json_line SKIP
    exit "$TB_SKIP_RC"
}

tb_wait_until() {
    _tb_deadline=$(($(tb_now_ms) + $1 * 1000))
    shift
    while :; do
        if "$@"; then return 0; fi
        [ "$(tb_now_ms)" -lt "$_tb_deadline" ] || return 1
        sleep 0.1
    done
}

tb_wait_file() { tb_wait_until "$2" test -e "$1"; }

# FILE's complete lines, CRs dropped: a line still being written (no
# newline yet) is left out, so a reader never parses half a line (seen:
# resize-zone read "... promoted=4" of a line that went on to "rmmod=1
# oops=0"). The \001 sentinel ends the stream: the last line it forms is
# either the sentinel alone or the unfinished line, and is dropped.
tb_complete_lines() {
    [ -f "$1" ] || return 0
    { tr -d '\r' <"$1"; printf '\001'; } | sed '$d'
}
_tb_has_line() { [ -f "$1" ] && tb_complete_lines "$1" | grep -Eq -- "$2"; }
tb_wait_line() { tb_wait_until "$3" _tb_has_line "$1" "$2"; }

# tb_nodelist_has "0-1,4" 4 -> true
tb_nodelist_has() {
    for _tb_r in $(echo "$1" | tr ',' ' '); do
        case $_tb_r in
        *-*) [ "$2" -ge "${_tb_r%-*}" ] && [ "$2" -le "${_tb_r#*-}" ] && return 0 ;;
        *) [ "$2" = "$_tb_r" ] && return 0 ;;
        esac
    done
    return 1
}

# tb_memory_tier_of NODE -> tier number (memory_tierN) or empty
tb_memory_tier_of() {
    for _tb_t in /sys/devices/virtual/memory_tiering/memory_tier*; do
        [ -f "$_tb_t/nodelist" ] || continue
        if tb_nodelist_has "$(cat "$_tb_t/nodelist")" "$1"; then
            echo "${_tb_t##*memory_tier}"
            return 0
        fi
    done
}

# tb_node_count -> number of online NUMA nodes
tb_node_count() {
    # shellcheck disable=SC2012 # names are node0, node1, ...
    ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l | tr -d ' '
}

# tb_node_memtotal_kb N
tb_node_memtotal_kb() {
    awk '/MemTotal:/ { print $4 }' "/sys/devices/system/node/node$1/meminfo" 2>/dev/null
}

# tb_node_cpulist N
tb_node_cpulist() { cat "/sys/devices/system/node/node$1/cpulist" 2>/dev/null; }

# tb_node_distance N -> "10 25"
tb_node_distance() { tr -s ' ' <"/sys/devices/system/node/node$1/distance" 2>/dev/null | sed 's/ *$//'; }

# tb_node_pfn_range N -> "start_pfn end_pfn" spanning all zones of node N
tb_node_pfn_range() {
    awk -v n="$1" '
        /^Node [0-9]+, zone/ { cur = ($2 == n ",") ; next }
        cur && $1 == "spanned" { sp = $2 }
        cur && $1 == "start_pfn:" {
            if (sp > 0) { if (lo == "" || $2 < lo) lo = $2; if ($2 + sp > hi) hi = $2 + sp }
            sp = 0
        }
        END { if (lo != "") print lo, hi }' /proc/zoneinfo
}

# tb_node_present_pages N -> sum of "present" over the zones of node N
tb_node_present_pages() {
    awk -v n="$1" '
        /^Node [0-9]+, zone/ { cur = ($2 == n ",") ; next }
        cur && $1 == "present" { p += $2 }
        END { print p + 0 }' /proc/zoneinfo
}

# tb_kernel_image_kb_on_node N -> KiB of the kernel image (code, rodata,
# data, bss as listed in /proc/iomem; needs root) inside node N. Physical
# KASLR may put the image on any node, which lowers that node's MemTotal.
tb_kernel_image_kb_on_node() {
    _tb_rng=$(tb_node_pfn_range "$1")
    [ -n "$_tb_rng" ] || { echo 0; return; }
    _tb_lo=$((${_tb_rng% *} * 4096))
    _tb_hi=$((${_tb_rng#* } * 4096))
    _tb_sum=0
    # shellcheck disable=SC2013 # one range per word
    for _tb_r in $(sed -n 's/^ *\([0-9a-f]*-[0-9a-f]*\) : Kernel .*/\1/p' /proc/iomem); do
        _tb_a=$((0x${_tb_r%-*}))
        _tb_b=$((0x${_tb_r#*-} + 1))
        [ "$_tb_a" -ge "$_tb_lo" ] || _tb_a=$_tb_lo
        [ "$_tb_b" -le "$_tb_hi" ] || _tb_b=$_tb_hi
        [ "$_tb_b" -le "$_tb_a" ] || _tb_sum=$((_tb_sum + _tb_b - _tb_a))
    done
    echo $((_tb_sum / 1024))
}

# tb_show_tail FILE [LINES] [PREFIX]: print the end of a log (e.g. the guest
# console) with a prefix, CRs stripped. Use it rather than cat: the harness
# treats unprefixed "[  1.2] Kernel panic" lines on the L1 console as an L1
# kernel panic.
tb_show_tail() {
    tr -d '\r' <"$1" 2>/dev/null | tail -n "${2:-40}" | awk -v p="${3:-L2| }" '{ print p $0 }'
}

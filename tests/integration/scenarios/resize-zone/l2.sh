# shellcheck shell=sh
# resize-zone (guest side): Linux's stock virtio_mem driver with hot-plugged
# memory onlined movable (so it can be unplugged again), and our
# demeter_balloon.ko; answers the L1 side's commands on the console.
#
# Commands (one per line), answers prefixed "@@RZ":
#   m TAG        "@@RZ M TAG t0=<kB> t1=<kB> f0=<kB> f1=<kB> bs=<pages> c1=<cpus>
#                bf=<pages> cap=<pages> fend=<pfn> gt=<n> gz=<n> gmin=<Mupdates/s>":
#                MemTotal and free memory of nodes 0 and 1 (from
#                /sys/devices/system/node/nodeN/meminfo), the SMem balloon's
#                size, node 1's CPU list ("none" when empty), the FMem
#                balloon's size, tiering.ko's fmem_capacity_pages and the
#                end of the PFN span it counts as FMem ("-" without the
#                module) and the workload's per-second ticks
#                since the previous m: how many, how many with no update,
#                the lowest rate, the last hot-set share in FMem (%), and
#                the pages the agent promoted/demoted so far (ghot= mv=;
#                "-" without a workload), node 1's ZONE_MOVABLE (its
#                plugged memory) as present/managed/free pages (z1=; the
#                balloon takes its pages out of their zone's managed count)
#   ticks TAG N  wait (at most 30 s) until the workload has N more
#                per-second ticks than the last m counted:
#                "@@RZ TICKS TAG <ticks>"
#   touch N:MIB  make MIB MiB of node N host-resident (tb-numa hold, then
#                free it): "@@RZ TOUCHED N:MIB <tb-numa's line>"
#   tier start [FLUSH]  insmod tiering.ko (abit_tlb_flush=FLUSH), start
#                gups-hotset (128 MiB, its last 16 MiB hot, first touched on
#                SMem: numactl --preferred=1; runs until "tier stop") as the
#                agent's target and `tiering-agent run`, as the tiering-gups
#                and l2-kernel-6.1 scenarios do:
#                "@@RZ TIER STARTED ok=<0|1> slot=<n> state=<s> cap=<pages>"
#   tier stop    look at the manager (workload, agent, module worker alive;
#                the target's state and counters), stop the agent and the
#                workload, rmmod tiering: "@@RZ TIER STOPPED key=value ..."
#                (see tier_stop; oops= counts BUG:/Oops/WARNING: lines
#                since tier start)
#   quit         final checks and report (the guest powers off)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

node_kb() { # NODE FIELD: a kB figure of the node's meminfo
    awk -v f="$2:" '$3 == f { print $4 }' "/sys/devices/system/node/node$1/meminfo"
}
tb_kmsg_mark start

# ---- the tiering manager under resize (VM 2) ----
SYS=/sys/kernel/tiering
BAL=/sys/kernel/demeter_balloon
GUPS=$TB_BIN/gups-hotset
AGENT=$TB_BIN/tiering-agent
GUPS_OUT=/tmp/gups-rz.out
G_PID=""
G_SEEN=0 # tick lines already counted by gups_window
stat_of() { awk -v k="$2" '$1 == k { print $2 }' "$1" 2>/dev/null; }
json_num() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p"; }
cap_pages() { cat "$SYS/fmem_capacity_pages" 2>/dev/null || echo -; }
# the PFNs tiering.ko counts as FMem: "END" (exclusive), "-" without it
span_end() { awk '{ print $2 }' "$SYS/fmem_pfn_span" 2>/dev/null | grep . || echo -; }
# zone_pages NODE ZONE: "present/managed/free" pages of the zone (/proc/zoneinfo)
zone_pages() {
    awk -v n="$1," -v z="$2" '
        /^Node / { cur = ($2 == n && $4 == z); next }
        cur && $1 == "pages" && $2 == "free" { f = $3 }
        cur && $1 == "present" { p = $2 }
        cur && $1 == "managed" { m = $2 }
        END { if (p != "") printf "%d/%d/%d", p, m, f; else printf "-" }' /proc/zoneinfo
}
# GW: the workload's per-second ticks since the previous call, complete
# lines only (the reporter may be writing the last one). Not in a
# subshell: it advances G_SEEN.
gups_window() {
    GW="gt=- gz=- gmin=- ghot=- mv=-"
    [ -n "$G_PID" ] || return 0
    grep '"gups":"tick".*}$' "$GUPS_OUT" | tail -n +$((G_SEEN + 1)) >/tmp/gups-window
    G_SEEN=$((G_SEEN + $(wc -l </tmp/gups-window)))
    GW=$(sed -n 's/.*"mups":\([0-9.]*\).*"hot_fmem_pct":\([0-9.]*\).*/\1 \2/p' /tmp/gups-window | awk '
        { n++; v = $1 + 0; if (v == 0) z++; if (n == 1 || v < m) m = v; h = $2 }
        END { if (n) printf "gt=%d gz=%d gmin=%.3f ghot=%s", n, z, m, h; else printf "gt=0 gz=0 gmin=- ghot=-" }')
    # the pages the agent moved so far (the module's count of its reports)
    GW="$GW mv=$(stat_of "$SYS/targets/0/stats" promoted 2>/dev/null)/$(stat_of "$SYS/targets/0/stats" demoted 2>/dev/null)"
}
# ticks_new N: N complete ticks more than gups_window counted so far
ticks_new() { [ "$(grep -c '"gups":"tick".*}$' "$GUPS_OUT" 2>/dev/null)" -ge $((G_SEEN + $1)) ]; }
gups_gone() { ! kill -0 "$G_PID" 2>/dev/null; }

tier_start() { # [ABIT_TLB_FLUSH]
    tb_kmsg_mark tier
    # shellcheck disable=SC2086 # one word or none
    if ! insmod /tb/kmod/tiering.ko ${1:+abit_tlb_flush=$1} 2>/tmp/insmod-tiering.err; then
        tb_fail insmod-tiering "$(head -c 200 /tmp/insmod-tiering.err)"
        echo "@@RZ TIER STARTED ok=0 slot=- state=- cap=-"
        return
    fi
    tb_pass insmod-tiering "abit_tlb_flush=${1:-auto}"
    tb_check_eq tiering-fmem-node-0 0 "$(cat "$SYS/fmem_node" 2>/dev/null)"
    tb_check_eq tiering-smem-node-1 1 "$(cat "$SYS/smem_node" 2>/dev/null)"
    numactl --preferred=1 "$GUPS" -s 128 -H 16 -r 10 -t 3600 -i 1000 -f 0 >"$GUPS_OUT" 2>&1 &
    G_PID=$!
    if ! tb_wait_line "$GUPS_OUT" '"gups":"start"' 120; then
        tb_fail gups-started "no start line: $(tail -n 3 "$GUPS_OUT" | tr '\n' '|')"
        echo "@@RZ TIER STARTED ok=0 slot=- state=- cap=$(cap_pages)"
        return
    fi
    slot=$("$AGENT" add "$G_PID" 2>&1)
    tb_check_eq agent-add-slot-0 0 "$slot"
    state=$(cat "$SYS/targets/0/state" 2>/dev/null)
    tb_check_eq target-running running "$state"
    tb_bg_start AG "$AGENT" run
    ok=0
    [ "$slot" = 0 ] && [ "$state" = running ] && ok=1
    echo "@@RZ TIER STARTED ok=$ok slot=$slot state=$state cap=$(cap_pages)"
}

tier_stop() {
    g_alive=0 a_alive=0 w_alive=0
    kill -0 "$G_PID" 2>/dev/null && g_alive=1
    kill -0 "${AG_PID:-}" 2>/dev/null && a_alive=1
    cat "$SYS/stats" >/tmp/tier-stats 2>&1
    wpid=$(stat_of /tmp/tier-stats worker_pid)
    [ -n "$wpid" ] && kill -0 "$wpid" 2>/dev/null && w_alive=1
    state=$(cat "$SYS/targets/0/state" 2>/dev/null)
    cat "$SYS/targets/0/stats" >/tmp/tier-target-stats 2>&1
    tb_show_tail /tmp/tier-target-stats 40 'T| '
    # the agent first (it prints its totals on SIGTERM), then the workload
    tb_bg_stop "${AG_PID:-}"
    kill -TERM "$G_PID" 2>/dev/null
    tb_wait_until 30 gups_gone
    wait "$G_PID" 2>/dev/null
    ag=$(grep '"agent":"done"' "$AG_OUT" 2>/dev/null | tail -n 1)
    gd=$(grep '"gups":"done"' "$GUPS_OUT" | tail -n 1)
    tb_fact agent_done "${ag:-null}"
    tb_fact gups_done "${gd:-null}"
    tb_fact_str hot_fmem_pct_series "$(grep '"gups":"tick"' "$GUPS_OUT" |
        sed -n 's/.*"hot_fmem_pct":\([0-9.]*\).*/\1/p' | tr '\n' ',' | sed 's/,$//')"
    # without -v the agent writes to stderr only what went wrong
    a_err=$(grep -c '^tiering-agent:' "$AG_OUT" 2>/dev/null)
    tb_show_tail "$AG_OUT" 5 'A| '
    rm_ok=0
    if rmmod tiering 2>/tmp/rmmod.err; then
        rm_ok=1
    else
        echo "rmmod tiering failed: $(head -c 200 /tmp/rmmod.err);" \
            "refcnt $(cat /sys/module/tiering/refcnt 2>/dev/null)," \
            "state $(cat /sys/module/tiering/initstate 2>/dev/null)," \
            "holders '$(ls /sys/module/tiering/holders 2>/dev/null | tr '\n' ' ')'"
    fi
    oops=$(tb_kmsg_since tier | tb_kernel_reports)
    # the evidence, on the console: the first report and its trace
    [ "$oops" = 0 ] || tb_kmsg_since tier |
        grep -m 1 -A 40 -E 'BUG:|Oops|WARNING:|general protection' | sed 's/^/K| /'
    echo "@@RZ TIER STOPPED gups=$g_alive agent=$a_alive worker=$w_alive target=${state:-none}" \
        "epochs=$(stat_of /tmp/tier-target-stats epoch) samples=$(stat_of /tmp/tier-target-stats samples)" \
        "reloc_failed=$(stat_of /tmp/tier-target-stats reloc_failed)" \
        "agent_done=$([ -n "$ag" ] && echo 1 || echo 0) agent_errors=${a_err:-0}" \
        "rounds=$(json_num "$ag" rounds) promoted=$(json_num "$ag" promoted)" \
        "demoted=$(json_num "$ag" demoted) failed=$(json_num "$ag" failed)" \
        "gups_done=$([ -n "$gd" ] && echo 1 || echo 0) gups_mups=$(json_num "$gd" mups)" \
        "hot_fmem_pct=$(json_num "$gd" hot_fmem_pct) rmmod=$rm_ok oops=$oops"
    G_PID=""
}

# Hot-plugged memory goes to ZONE_MOVABLE, so unplugging can migrate
# whatever the guest put there.
tb_check online-movable sh -c 'echo online_movable >/sys/devices/system/memory/auto_online_blocks'
tb_check load-virtio_mem modprobe virtio_mem
tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
bound() { ls /sys/bus/virtio/drivers/virtio_mem/ 2>/dev/null | grep -c '^virtio'; }
two_bound() { [ "$(bound)" -ge 2 ]; }
tb_wait_until 10 two_bound
tb_check_eq virtio-mem-devices-bound 2 "$(bound)"
tb_check_eq hetero-mem-negotiated 1 "$(cat "$BAL/hetero_mem" 2>/dev/null)"
dmesg | grep -i virtio_mem >/tmp/virtio_mem.dmesg
tb_show_tail /tmp/virtio_mem.dmesg 20 "dmesg: "
echo "@@RZ READY"

while read -r cmd arg; do
    case $cmd in
    m)
        c1=$(cat /sys/devices/system/node/node1/cpulist 2>/dev/null)
        gups_window
        echo "@@RZ M $arg t0=$(node_kb 0 MemTotal) t1=$(node_kb 1 MemTotal)" \
            "f0=$(node_kb 0 MemFree) f1=$(node_kb 1 MemFree)" \
            "bs=$(cat "$BAL/smem/size_pages" 2>/dev/null || echo 0)" \
            "c1=${c1:-none} bf=$(cat "$BAL/fmem/size_pages" 2>/dev/null || echo 0)" \
            "cap=$(cap_pages) fend=$(span_end) $GW z1=$(zone_pages 1 Movable)"
        ;;
    ticks)
        # shellcheck disable=SC2086 # "TAG N"
        set -- $arg
        [ -n "$G_PID" ] && tb_wait_until 30 ticks_new "$2"
        echo "@@RZ TICKS $1 $(($(grep -c '"gups":"tick".*}$' "$GUPS_OUT" 2>/dev/null) - G_SEEN))"
        ;;
    tier)
        # shellcheck disable=SC2086 # "start [FLUSH]" / "stop"
        set -- $arg
        case $1 in
        start) tier_start "$2" ;;
        stop) tier_stop ;;
        esac
        ;;
    touch)
        rm -f /tmp/hold.out
        "$TB_BIN/tb-numa" hold "${arg%:*}" "${arg#*:}" >/tmp/hold.out 2>&1 &
        hold_pid=$!
        i=0
        while [ ! -s /tmp/hold.out ] && [ "$i" -lt 600 ] && kill -0 "$hold_pid" 2>/dev/null; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -TERM "$hold_pid" 2>/dev/null
        wait "$hold_pid" 2>/dev/null
        echo "@@RZ TOUCHED $arg $(head -n 1 /tmp/hold.out)"
        ;;
    quit) break ;;
    esac
done
dmesg | grep -i virtio_mem >/tmp/virtio_mem.dmesg
tb_show_tail /tmp/virtio_mem.dmesg 20 "dmesg: "
tb_check_eq no-new-kernel-oops-or-warning 0 "$(tb_kmsg_since start | tb_kernel_reports)"
tb_report

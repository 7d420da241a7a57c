# shellcheck shell=sh
# tiering-gups, L2 side: the guest tiered-memory manager (tiering.ko +
# tiering-agent) against the baselines a stock kernel offers, on a GUPS
# "hotset" workload whose footprint exceeds FMem (node 0).
#
# Phases (one fresh gups-hotset each, REGION_MB with its last HOT_MB hot,
# 10x access density; first-touched cold part first, so the hot set starts
# in SMem because FMem fills up first):
#   none   no tiering                                   BASE_S seconds
#   static no tiering, hot set first-touched first (-P)  BASE_S seconds
#          so it starts in FMem: the rate of the ideal placement with
#          no manager, the control that tells the placement's effect on
#          the rate (static / none) from the manager's cost (ours after
#          convergence / static)
#   numab  numa_balancing=2 + demotion_enabled=true     RUN_S seconds
#   damon  DAMON's own tiering: two paddr kdamonds,      RUN_S seconds
#          DAMOS migrate_hot SMem->FMem, migrate_cold FMem->SMem
#          (where the kernel has them; 6.11+)
#   ours   tiering.ko (sampler auto) + tiering-agent    RUN_S seconds
#   unload rmmod while a target and the agent run
#   usersample  the agent's user-space sampler (--sampler pagefault)
#          feeding targets/<i>/samples_in (checks only, after the above)
# Each phase reports the hot-set residency in FMem once a second.
# Kernel command line knobs: tb.tier_run_s=N tb.tier_base_s=N
# tb.tier_region_mb=N tb.tier_hot_mb=N tb.tier_min_pct=N
# tb.tier_phases=none,static,numab,ours,unload (a subset, for development).
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

SYS=/sys/kernel/tiering
KO=/tb/kmod/tiering.ko
GUPS=$TB_BIN/gups-hotset
AGENT=$TB_BIN/tiering-agent
REGION_MB=640
HOT_MB=64
RUN_S=30
BASE_S=15
MIN_PCT=60
PHASES="none static numab damon ours unload usersample"
CPU_PCT=0	# the agent's manager CPU budget (-c); 0 = none
# The workload's own rate with the manager, after convergence, as a
# percentage of the no-tiering run's: the check's floor (0 = report only).
# l1.sh sets it by L1's paging mode (shadow paging costs more per scan).
MIN_RATIO_PCT=0
ABIT_FLUSH=
# tb.tier_thp=1: transparent huge pages on (THP "always", GUPS region
# MADV_HUGEPAGE), as Debian's 6.12 default; else 4 KiB pages only.
THP=0
GUPS_THP=""
# tb.tier_ratio=R: a hot byte is R times as likely to be updated as a
# cold one (gups-hotset -r)
RATIO=10
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.tier_run_s=*) RUN_S=${arg#*=} ;;
    tb.tier_base_s=*) BASE_S=${arg#*=} ;;
    tb.tier_region_mb=*) REGION_MB=${arg#*=} ;;
    tb.tier_hot_mb=*) HOT_MB=${arg#*=} ;;
    tb.tier_min_pct=*) MIN_PCT=${arg#*=} ;;
    tb.tier_phases=*) PHASES=$(echo "${arg#*=}" | tr ',' ' ') ;;
    tb.tier_cpu_pct=*) CPU_PCT=${arg#*=} ;;
    tb.tier_min_ratio_pct=*) MIN_RATIO_PCT=${arg#*=} ;;
    tb.tier_abit_flush=*) ABIT_FLUSH=${arg#*=} ;;
    tb.tier_thp=*) THP=${arg#*=} ;;
    tb.tier_ratio=*) RATIO=${arg#*=} ;;
    esac
done
tb_fact region_mb "$REGION_MB"
tb_fact hot_mb "$HOT_MB"
tb_fact ratio "$RATIO"
tb_fact run_s "$RUN_S"
tb_fact cpu_pct_budget "$CPU_PCT"
tb_fact node0_memtotal_kb "$(tb_node_memtotal_kb 0)"
if [ "$THP" = 1 ]; then
    echo always >/sys/kernel/mm/transparent_hugepage/enabled
    GUPS_THP=-T
fi
tb_fact_str thp "$(cat /sys/kernel/mm/transparent_hugepage/enabled)"
# The user-sampler step opens and closes software page-fault perf events
# while GUPS faults on the other vCPU: without an event held open from
# here on, each first open and last close live-patches the page-fault
# path, which nested TCG races (tests/integration/guest/tb-perf-hold.c).
tb_bg_start PH tb-perf-hold
tb_wait_line "$PH_OUT" '^perf-hold:' 10 || tb_fail perf-hold-started "$(cat "$PH_OUT")"

# json_field FILE-LINE KEY: numeric field of a one-line JSON object
json_num() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\(-\{0,1\}[0-9.]*\).*/\1/p"; }
stat_of() { awk -v k="$2" '$1 == k { print $2 }' "$1" 2>/dev/null; }
# try_write NAME WANT-ERRNO-TEXT VALUE FILE: the write must fail with that error
try_write() {
    if sh -c "echo '$3' > '$4'" 2>/tmp/tw.err; then
        tb_fail "$1" "write '$3' to $4 succeeded"
    elif grep -qi "$2" /tmp/tw.err; then
        tb_pass "$1" "$(tr -d '\n' </tmp/tw.err)"
    else
        tb_fail "$1" "wrong error: $(tr -d '\n' </tmp/tw.err)"
    fi
}

# run_phase NAME SECS: start gups, call "on_start_NAME PID" once it is in
# its access phase, wait for it, call "on_end_NAME", record facts.
run_phase() {
    p_name=$1
    p_secs=$2
    p_out=/tmp/gups-$p_name.out
    rm -f "$p_out"
    # shellcheck disable=SC2086 # GUPS_THP, GUPS_PHASE_OPTS: one word or none
    "$GUPS" -s "$REGION_MB" -H "$HOT_MB" -r "$RATIO" -t "$p_secs" -i 1000 -f 0 $GUPS_THP ${GUPS_PHASE_OPTS:-} >"$p_out" 2>&1 &
    p_pid=$!
    # The first phase's GUPS touches 640 MiB of L2 memory that L1 (under
    # TCG) backs for the first time: 120 s was too short on a busy host
    # (2026-11-25: three nested runs failed here, before any module).
    if ! tb_wait_line "$p_out" '"gups":"start"' 240; then
        tb_fail "$p_name-gups-started" "no start line: $(tail -n 3 "$p_out")"
        kill "$p_pid" 2>/dev/null
        return 1
    fi
    "on_start_$p_name" "$p_pid"
    # gups ends itself after p_secs; bounded wait with slack for the queries
    if ! tb_wait_until $((p_secs + 60)) sh -c "! kill -0 $p_pid 2>/dev/null"; then
        kill "$p_pid" 2>/dev/null
        tb_fail "$p_name-gups-finished" "still running after $((p_secs + 60)) s"
    fi
    wait "$p_pid" 2>/dev/null
    "on_end_$p_name"
    first=$(grep '"gups":"tick"' "$p_out" | head -n 1)
    done_l=$(grep '"gups":"done"' "$p_out" | tail -n 1)
    series=$(grep '"gups":"tick"' "$p_out" | sed -n 's/.*"hot_fmem_pct":\([0-9.]*\).*/\1/p' | tr '\n' ',' | sed 's/,$//')
    acc=$(grep '"gups":"tick"' "$p_out" | sed -n 's/.*"fmem_access_pct":\([0-9.]*\).*/\1/p' | tr '\n' ',' | sed 's/,$//')
    rate=$(grep '"gups":"tick"' "$p_out" | sed -n 's/.*"mups":\([0-9.]*\).*/\1/p' | tr '\n' ',' | sed 's/,$//')
    tb_fact "${p_name}_mups_series" "[$rate]"
    tb_fact "${p_name}_hot_fmem_pct_series" "[$series]"
    tb_fact "${p_name}_fmem_access_pct_series" "[$acc]"
    tb_fact "${p_name}_done" "${done_l:-null}"
    tb_fact "${p_name}_initial_hot_fmem_pct" "$(json_num "$first" hot_fmem_pct | sed 's/^$/null/')"
    echo "$p_name: first $first"
    echo "$p_name: done $done_l"
    [ -n "$done_l" ]
}

phase_on() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

# ---- phase 1: no tiering ----
echo 0 >/proc/sys/kernel/numa_balancing
echo false >/sys/kernel/mm/numa/demotion_enabled 2>/dev/null
# Warm-up, not measured: the first GUPS after boot touches memory that the
# layers below back for the first time, and its rate stays low and uneven
# for a while after (seen on the NPT L1: 0.6-1.3 Mupdates/s in the first
# phase, 1.4 in the next with the same program): without it the no-tiering
# baseline is taken on colder memory than the phases it is compared with.
if phase_on none; then
    timeout $((BASE_S + 240)) "$GUPS" -s "$REGION_MB" -H "$HOT_MB" -r "$RATIO" -t "$BASE_S" -i 1000 -f 0 $GUPS_THP >/tmp/gups-warm.out 2>&1 ||
        tb_fail warm-up-gups "rc $?: $(tail -n 2 /tmp/gups-warm.out)"
    tb_fact warm_mups_series "[$(sed -n 's/.*"gups":"tick".*"mups":\([0-9.]*\).*/\1/p' /tmp/gups-warm.out | tr '\n' ',' | sed 's/,$//')]"
fi
on_start_none() { :; }
on_end_none() { :; }
if phase_on none; then
    run_phase none "$BASE_S" && tb_pass none-phase-ran
    none_first=$(grep '"gups":"tick"' /tmp/gups-none.out | head -n 1)
    none_init=$(json_num "$none_first" hot_fmem_pct)
    none_init=${none_init%.*}
    # Precondition: the hot set starts out mostly in SMem (FMem filled first).
    tb_check_le "hot-set-starts-in-smem(<50%)" "${none_init:-100}" 49
fi

# ---- phase 1b: no tiering, the hot set placed in FMem from the start ----
on_start_static() { :; }
on_end_static() { :; }
if phase_on static; then
    GUPS_PHASE_OPTS=-P
    run_phase static "$BASE_S" && tb_pass static-phase-ran
    GUPS_PHASE_OPTS=""
    st_init=$(json_num "$(grep '"gups":"tick"' /tmp/gups-static.out | head -n 1)" hot_fmem_pct)
    # Precondition: FMem had room for the hot set when it was touched.
    tb_check_ge "static-hot-set-starts-in-fmem(>=90%)" "${st_init%.*}" 90
fi

# ---- phase 2: Linux tiering (NUMA balancing tiering mode + demotion) ----
on_start_numab() {
    echo 2 >/proc/sys/kernel/numa_balancing
    echo true >/sys/kernel/mm/numa/demotion_enabled
    nb_before=$(awk '/^(pgpromote_success|pgdemote_kswapd|pgdemote_direct) / { printf "%s=%s ", $1, $2 }' /proc/vmstat)
}
on_end_numab() {
    echo 0 >/proc/sys/kernel/numa_balancing
    echo false >/sys/kernel/mm/numa/demotion_enabled
    nb_after=$(awk '/^(pgpromote_success|pgdemote_kswapd|pgdemote_direct) / { printf "%s=%s ", $1, $2 }' /proc/vmstat)
    tb_fact_str numab_vmstat_before "$nb_before"
    tb_fact_str numab_vmstat_after "$nb_after"
}
if ! phase_on numab; then
    :
elif [ -e /proc/sys/kernel/numa_balancing ]; then
    run_phase numab "$RUN_S" && tb_pass numab-phase-ran
else
    tb_fact_str numab "no /proc/sys/kernel/numa_balancing"
fi

# ---- phase 2b: DAMON's tiering (DAMOS migrate_hot / migrate_cold) ----
DAMON=/sys/kernel/mm/damon/admin/kdamonds
# node_phys_range NID: "start end" of the node's memory blocks (bytes)
node_phys_range() {
    bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)))
    ls -d /sys/devices/system/node/node"$1"/memory[0-9]* 2>/dev/null |
        sed 's/.*memory//' | sort -n | awk -v bs="$bs" '
        NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%d %d\n", lo * bs, (hi + 1) * bs }'
}
# damon_kdamond IDX NODE ACTION TARGET_NID: one paddr kdamond over NODE's
# memory applying ACTION (migrate_hot: regions accessed in >= 5 % of the
# samples; migrate_cold: not accessed for >= 2 s) towards TARGET_NID
damon_kdamond() {
    k=$DAMON/$1
    c=$k/contexts/0
    set -- "$@" $(node_phys_range "$2")
    [ $# -eq 6 ] || return 1
    echo 1 >"$k/contexts/nr_contexts" &&
        echo paddr >"$c/operations" &&
        echo 5000 >"$c/monitoring_attrs/intervals/sample_us" &&
        echo 100000 >"$c/monitoring_attrs/intervals/aggr_us" &&
        echo 10 >"$c/monitoring_attrs/nr_regions/min" &&
        echo 1000 >"$c/monitoring_attrs/nr_regions/max" &&
        echo 1 >"$c/targets/nr_targets" &&
        echo 1 >"$c/targets/0/regions/nr_regions" &&
        echo "$6" >"$c/targets/0/regions/0/end" &&
        echo "$5" >"$c/targets/0/regions/0/start" &&
        echo 1 >"$c/schemes/nr_schemes" &&
        echo "$3" >"$c/schemes/0/action" &&
        echo "$4" >"$c/schemes/0/target_nid" || return 1
    case $3 in
    migrate_hot) echo 1 >"$c/schemes/0/access_pattern/nr_accesses/min" ;;
    migrate_cold)
        echo 0 >"$c/schemes/0/access_pattern/nr_accesses/max"
        echo 20 >"$c/schemes/0/access_pattern/age/min"
        ;;
    esac
}
# CPU clock ticks of the kdamond threads so far
kdamond_ticks() {
    for d in /proc/[0-9]*; do
        case $(cat "$d/comm" 2>/dev/null) in
        kdamond*) awk '{ print $14 + $15 }' "$d/stat" 2>/dev/null ;;
        esac
    done | awk '{ s += $1 } END { print s + 0 }'
}
on_start_damon() {
    echo 2 >"$DAMON/nr_kdamonds" &&
        damon_kdamond 0 1 migrate_hot 0 && damon_kdamond 1 0 migrate_cold 1 &&
        echo on >"$DAMON/0/state" && echo on >"$DAMON/1/state"
    tb_check_eq damon-kdamonds-on "on on" "$(cat "$DAMON/0/state" "$DAMON/1/state" 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
    damon_t0=$(tb_now_ms)
    damon_cpu0=$(kdamond_ticks)
}
on_end_damon() {
    damon_cpu1=$(kdamond_ticks)
    # clock ticks (USER_HZ 100) over wall ms: % of one CPU
    tb_fact damon_kdamond_cpu_pct "$(awk -v a="$damon_cpu0" -v b="$damon_cpu1" -v w="$(($(tb_now_ms) - damon_t0))" \
        'BEGIN { printf "%.2f", w ? (b - a) * 10 * 100 / w : 0 }')"
    for s in 0 1; do
        echo update_schemes_stats >"$DAMON/$s/state" 2>/dev/null
        tb_fact "damon_scheme${s}_sz_applied" "$(cat "$DAMON/$s/contexts/0/schemes/0/stats/sz_applied" 2>/dev/null || echo null)"
    done
    echo off >"$DAMON/0/state" 2>/dev/null
    echo off >"$DAMON/1/state" 2>/dev/null
    echo 0 >"$DAMON/nr_kdamonds" 2>/dev/null
}
if ! phase_on damon; then
    :
elif [ -w "$DAMON/nr_kdamonds" ] && echo 1 >"$DAMON/nr_kdamonds" 2>/dev/null &&
    echo 1 >"$DAMON/0/contexts/nr_contexts" &&
    echo 1 >"$DAMON/0/contexts/0/schemes/nr_schemes" &&
    echo migrate_hot >"$DAMON/0/contexts/0/schemes/0/action" 2>/dev/null; then
    echo 0 >"$DAMON/nr_kdamonds"
    run_phase damon "$RUN_S" && tb_pass damon-phase-ran
else
    echo 0 >"$DAMON/nr_kdamonds" 2>/dev/null
    tb_fact_str damon "no DAMON sysfs with DAMOS migrate_hot in this kernel"
fi

# ---- phase 3: ours ----
dmesg_lines=$(dmesg | wc -l)

# The double balloon, when the VM has one (our VMM; not --l2-in-qemu): the
# agent reports its statistics to the host through its guest_report file.
BAL=/sys/kernel/demeter_balloon
if grep -qx 0x0005 /sys/bus/virtio/devices/*/device 2>/dev/null && [ -e /tb/kmod/demeter_balloon.ko ]; then
    tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
    tb_check balloon-guest-report-present test -e "$BAL/guest_report"
    try_write guest-report-tag-below-EINVAL "invalid argument" "32767 1" "$BAL/guest_report"
    try_write guest-report-tag-above-EINVAL "invalid argument" "32800 1" "$BAL/guest_report"
    try_write guest-report-bad-value-EINVAL "invalid argument" "32768 x" "$BAL/guest_report"
    try_write guest-report-no-value-EINVAL "invalid argument" "32768" "$BAL/guest_report"
    tb_check guest-report-accepts sh -c "printf '32768 0\n32771 0\n' > $BAL/guest_report"
    tb_check_ge guest-reports-counted "$(cat "$BAL/guest_reports" 2>/dev/null)" 1
else
    tb_fact_str balloon "no virtio-balloon device: the agent reports nothing"
fi
tb_check insmod-tiering insmod "$KO" ${ABIT_FLUSH:+abit_tlb_flush=$ABIT_FLUSH}
tb_check sysfs-present test -d "$SYS/targets"
echo "sampler: $(tr '\n' ' ' <"$SYS/sampler")| pebs: $(cat "$SYS/pebs")"
tb_fact_str pebs "$(cat "$SYS/pebs" 2>/dev/null)"
tb_check_eq fmem-node-0 0 "$(cat "$SYS/fmem_node" 2>/dev/null)"
tb_check_eq smem-node-1 1 "$(cat "$SYS/smem_node" 2>/dev/null)"

# bad writes are refused with clear errors
echo 1 >"$SYS/targets/nr_targets"
try_write bad-pid-text-EINVAL "invalid argument" abc "$SYS/targets/0/pid"
try_write bad-pid-missing-ESRCH "no such process" 999999 "$SYS/targets/0/pid"
try_write bad-pid-kthread-EINVAL "invalid argument" 2 "$SYS/targets/0/pid"
try_write bad-nr_targets-EINVAL "invalid argument" 100000 "$SYS/targets/nr_targets"
try_write bad-sampler-EINVAL "invalid argument" fast "$SYS/sampler"
try_write bad-relocated-EINVAL "invalid argument" "1 2" "$SYS/targets/0/relocated"
try_write bad-param-EINVAL "invalid argument" 5 /sys/module/tiering/parameters/split_period_ms
if grep -q '^pebs unavailable' "$SYS/sampler"; then
    try_write pebs-unavailable-ENODEV "no such device" pebs "$SYS/sampler"
    # the module parameter takes the same validation (it used to accept
    # pebs, and a target start then failed after freeing its ranges)
    try_write pebs-param-unavailable-ENODEV "no such device" pebs /sys/module/tiering/parameters/sampler
    tb_check_eq sampler-param-unchanged auto "$(cat /sys/module/tiering/parameters/sampler)"
fi
# FMem capacity: node 0's managed pages above the watermarks (and minus a
# balloon that still counts in them); never more than the node
cap0=$(cat "$SYS/fmem_capacity_pages" 2>/dev/null)
tb_fact fmem_capacity_pages_start "${cap0:-null}"
tb_check_le fmem-capacity-below-node0 "${cap0:-0}" $(($(tb_node_memtotal_kb 0) / 4))
tb_check_ge fmem-capacity-positive "${cap0:-0}" 1
tb_check_eq idle-target-pid -1 "$(cat "$SYS/targets/0/pid")"
# a second slot for the same process is refused; shrinking nr_targets
# stops and removes running targets
sleep 120 &
s_pid=$!
tb_check_eq add-target-slot-0 0 "$("$AGENT" add "$s_pid")"
echo 2 >"$SYS/targets/nr_targets"
try_write same-pid-twice-EBUSY "busy" "$s_pid" "$SYS/targets/1/pid"
tb_check shrink-nr_targets-while-running sh -c "echo 0 > $SYS/targets/nr_targets"
tb_check slot-removed sh -c "[ ! -e $SYS/targets/0 ] && [ \$(cat $SYS/targets/nr_targets) = 0 ]"
kill "$s_pid"
wait "$s_pid" 2>/dev/null
echo 1 >"$SYS/targets/nr_targets"

# automatic targets by cgroup (v2): a process in /tier is picked up
CG=/sys/fs/cgroup
grep -q " $CG cgroup2 " /proc/mounts || mount -t cgroup2 none "$CG" 2>/dev/null
try_write auto-cgroup-missing-ENOENT "no such file" /no-such-cgroup "$SYS/auto_cgroup"
try_write auto-cgroup-relative-EINVAL "invalid argument" tier "$SYS/auto_cgroup"
if mkdir -p "$CG/tier" 2>/dev/null; then
    sleep 120 &
    c_pid=$!
    echo "$c_pid" >"$CG/tier/cgroup.procs"
    tb_check auto-cgroup-set sh -c "echo /tier > $SYS/auto_cgroup"
    cg_slot() {
        for d in "$SYS"/targets/[0-9]*; do
            [ "$(cat "$d/pid" 2>/dev/null)" = "$c_pid" ] &&
                [ "$(cat "$d/state" 2>/dev/null)" = running ] && return 0
        done
        return 1
    }
    if tb_wait_until 15 cg_slot; then
        tb_pass auto-target-by-cgroup "pid $c_pid (in $CG/tier) picked up"
    else
        tb_fail auto-target-by-cgroup "pid $c_pid not picked up within 15 s"
    fi
    echo "" >"$SYS/auto_cgroup"
    kill "$c_pid"
    wait "$c_pid" 2>/dev/null
else
    tb_fact_str cgroup "no cgroup2 hierarchy: $CG/tier could not be created"
fi
# the cgroup's process exited: back to one idle slot for the next phase
echo 0 >"$SYS/targets/nr_targets"
echo 1 >"$SYS/targets/nr_targets"

on_start_ours() {
    # the L1 side inflates both balloons during this phase (l1.sh)
    echo "@@TIER ours-start"
    slot=$("$AGENT" add "$1")
    tb_check_eq agent-add-slot-0 0 "$slot"
    tb_check_eq target-running running "$(cat "$SYS/targets/0/state" 2>/dev/null)"
    cat "$SYS/stats" >/tmp/tier-stats-0
    w0=$(stat_of /tmp/tier-stats-0 worker_cpu_ns)
    t_ours0=$(tb_now_ms)
    tb_bg_start AG "$AGENT" run -v -c "$CPU_PCT"
    # The capacity the module plans with, its hot set and the FMem
    # balloon, once a second while the workload runs: "ms capacity_pages
    # hot_pages fmem_balloon_pages" (checked in on_end_ours).
    (while kill -0 "$1" 2>/dev/null; do
        echo "$(tb_now_ms) $(cat "$SYS/fmem_capacity_pages" 2>/dev/null || echo -1)" \
            "$(awk '$1 == "hot_bytes" { printf "%d", $2 / 4096 }' "$SYS/targets/0/stats" 2>/dev/null)" \
            "$(cat "$BAL/fmem/size_pages" 2>/dev/null || echo 0)"
        sleep 1
    done >/tmp/tier-capacity.log) &
    # diagnostics only: the classifier's state half-way through
    (sleep $((RUN_S / 2)); cat "$SYS/targets/0/stats" "$SYS/targets/0/ranges" \
        "$SYS/targets/0/promote" "$SYS/targets/0/demote" >/tmp/tier-mid 2>&1
        cat "$SYS/targets/0/promote" >/tmp/tier-promote-mid 2>&1
        cat "$SYS/fmem_capacity_pages" >/tmp/cap-mid 2>&1
        "$AGENT" stats >/tmp/agent-stats-mid.json 2>&1
        # CPU so far (worker ns, agent clock ticks) for the second half's share
        echo "$(tb_now_ms) $(awk '$1 == "worker_cpu_ns" { print $2 }' "$SYS/stats") \
            $(awk '{ print $14 + $15 }' "/proc/$AG_PID/stat")" >/tmp/cpu-mid) &
}
on_end_ours() {
    t_ours1=$(tb_now_ms)
    "$AGENT" stats >/tmp/agent-stats.json
    cat "$SYS/stats" >/tmp/tier-stats-1
    cat "$SYS/targets/0/stats" >/tmp/tier-target-stats
    w1=$(stat_of /tmp/tier-stats-1 worker_cpu_ns)
    tb_bg_stop "$AG_PID"
    ag=$(grep '"agent":"done"' "$AG_OUT" | tail -n 1)
    tb_fact agent_done "${ag:-null}"
    # No rotation of cold pages: the hot set is HOT_MB; promoting more
    # than twice its pages means the agent moved pages that are not hot
    # (before the hot-set floor: 83,456 for 16,384 on the NPT L1).
    hot_pages=$((HOT_MB * 256))
    tb_check_le ours-promotions-within-2x-hot-set "$(json_num "$ag" promoted | sed 's/^$/999999999/')" $((2 * hot_pages))
    tb_fact agent_stats "$(cat /tmp/agent-stats.json)"
    mid=$(cat /tmp/agent-stats-mid.json 2>/dev/null)
    case $mid in '{'*) tb_fact agent_stats_mid "$mid" ;; esac
    agcpu=$(json_num "$ag" agent_cpu_ns)
    wall=$((t_ours1 - t_ours0))
    kns=$((w1 - w0))
    tb_fact ours_wall_ms "$wall"
    tb_fact ours_worker_cpu_ns "$kns"
    tb_fact ours_agent_cpu_ns "${agcpu:-null}"
    tot=$((kns + ${agcpu:-0}))
    tb_fact ours_manager_cpu_pct "$(awk -v c="$tot" -v w="$wall" 'BEGIN { printf "%.2f", w ? c / (w * 10000) : 0 }')"
    tb_fact ours_worker_cpu_pct "$(awk -v c="$kns" -v w="$wall" 'BEGIN { printf "%.2f", w ? c / (w * 10000) : 0 }')"
    # second half of the run (after convergence): worker + agent CPU share
    if [ -s /tmp/cpu-mid ] && [ -n "$agcpu" ]; then
        read -r m_t m_w m_a </tmp/cpu-mid
        tb_fact ours_manager_cpu_pct_2nd_half "$(awk -v t0="$m_t" -v t1="$t_ours1" -v w0="$m_w" -v w1="$w1" \
            -v a0="$m_a" -v a1="$agcpu" 'BEGIN { d = t1 - t0; if (d <= 0) { print "null"; exit }
                printf "%.2f", ((w1 - w0) + (a1 - a0 * 10000000)) / (d * 10000) }')"
    fi
    tb_fact fmem_capacity_pages_mid "$(cat /tmp/cap-mid 2>/dev/null || echo null)"
    # list files are whole (no PAGE_SIZE cut): "epoch N" ... "end N", and
    # the accessed-bit walk publishes each range's resident / FMem pages
    pm=/tmp/tier-promote-mid
    if [ "$(sed -n '1s/^epoch //p' $pm)" = "$(sed -n '$s/^end //p' $pm)" ] &&
        [ -n "$(sed -n '1s/^epoch //p' $pm)" ]; then
        tb_pass promote-list-complete "$(($(wc -l <$pm) - 2)) intervals"
    else
        tb_fail promote-list-complete "$(head -n 1 $pm) ... $(tail -n 1 $pm)"
    fi
    tb_check_eq promote-has-residency 5 "$(sed -n '2p' $pm | awk '{ print NF }')"
    src=$(stat_of /tmp/tier-target-stats source)
    tb_fact_str ours_source "$src"
    tb_fact ours_sample_rate "$(stat_of /tmp/tier-target-stats sample_rate)"
    tb_fact ours_ranges "$(stat_of /tmp/tier-target-stats ranges)"
    tb_fact ours_splits "$(stat_of /tmp/tier-target-stats splits)"
    tb_fact ours_window_ms "$(stat_of /tmp/tier-target-stats window_ms)"
    # where the accessed-bit source's time went (ns) and its back-off
    for k in scan_ns arm_ns check_ns resident_ns flush_ns epoch_ns scans \
        resident_walks flushes scan_level stable_epochs epoch_period_ms; do
        tb_fact "ours_abit_$k" "$(stat_of /tmp/tier-target-stats $k | sed 's/^$/null/')"
    done
    echo "--- target stats ---"
    tb_show_tail /tmp/tier-target-stats 48 'T| '
    echo "--- half-way: stats, ranges, promote, demote ---"
    # the huge-entry figures first (the tail below may cut the stats)
    grep -E '^(huge_|abit_huge|abit_base)' /tmp/tier-mid 2>/dev/null | sed 's/^/H| /'
    tb_show_tail /tmp/tier-mid 400 'M| '
    echo "--- agent log (tail) ---"
    tb_show_tail "$AG_OUT" 15 'A| '
    tb_check_eq target-exited-after-workload exited "$(cat "$SYS/targets/0/state" 2>/dev/null)"
    # Never planned beyond the capacity: each sample's hot set fits the
    # largest capacity of the last 8 samples (an epoch lasts up to 8 s
    # backed off, and a hot set is sized against the capacity of its own
    # epoch); with the FMem balloon inflated (the L1 side's step), the
    # capacity is at least the balloon's pages below where it started.
    awk 'BEGIN { bad = 0 }
        { cap[NR] = $2; m = $2; for (k = NR - 7; k < NR; k++) if (k > 0 && cap[k] > m) m = cap[k]
          if ($3 != "" && $3 > m) { bad++; if (!first) first = $0 } }
        END { print bad + 0, NR + 0, first }' /tmp/tier-capacity.log >/tmp/tier-capacity.chk
    read -r cap_bad cap_n cap_first </tmp/tier-capacity.chk
    if [ "${cap_n:-0}" -lt 5 ]; then
        tb_fail hot-set-within-capacity "only ${cap_n:-0} capacity samples"
    elif [ "$cap_bad" -eq 0 ]; then
        tb_pass hot-set-within-capacity "$cap_n samples"
    else
        tb_fail hot-set-within-capacity "$cap_bad of $cap_n samples over: ms cap hot balloon = $cap_first"
    fi
    # The settled sample at the fullest balloon: the lowest capacity among
    # them (the capacity is recomputed once an epoch, the balloon read live,
    # so the first sample at the fullest balloon can predate the update).
    bmax=$(awk '$4 > m || ($4 == m && $2 < c) { m = $4; c = $2; line = $0 } END { print line }' /tmp/tier-capacity.log)
    if [ -n "$bmax" ]; then
        set -- $bmax
        cap_first0=$(awk 'NR == 1 { print $2 }' /tmp/tier-capacity.log)
        tb_fact capacity_with_fmem_balloon "{\"start\":$cap_first0,\"inflated\":$2,\"balloon_pages\":$4}"
        if [ "$4" -ge 8192 ]; then
            # 1/16 slack: the watermarks move a little with the managed pages
            tb_check_le capacity-follows-fmem-balloon "$2" $((cap_first0 - $4 + $4 / 16))
        fi
    fi
    if [ -e "$BAL/guest_reports" ]; then
        gr=$(cat "$BAL/guest_reports")
        tb_fact balloon_guest_reports "$gr"
        tb_fact balloon_stats_sent "$(cat "$BAL/stats_sent")"
        # the agent reports after each round and at least once a second
        tb_check_ge agent-reported-to-balloon "$gr" $((RUN_S / 2))
    fi
}
if phase_on ours; then
run_phase ours "$RUN_S" && tb_pass ours-phase-ran
ours_done=$(grep '"gups":"done"' /tmp/gups-ours.out | tail -n 1)
t60=$(json_num "$ours_done" t60_ms)
best=$(grep '"gups":"tick"' /tmp/gups-ours.out | sed -n 's/.*"hot_fmem_pct":\([0-9]*\).*/\1/p' | sort -n | tail -n 1)
tb_fact ours_t60_ms "${t60:-null}"
# the workload's own rate, with and without the manager (whole runs)
m_none=$(json_num "$(grep '"gups":"done"' /tmp/gups-none.out 2>/dev/null | tail -n 1)" mups)
m_ours=$(json_num "$ours_done" mups)
tb_fact gups_mups_none "${m_none:-null}"
tb_fact gups_mups_ours "${m_ours:-null}"
echo "@@FIGURE GUPS Mupdates/s: no tiering ${m_none:-?}, with the manager ${m_ours:-?}"
tb_check_ge "ours-hot-set-reached-${MIN_PCT}pct-in-fmem" "${best:-0}" "$MIN_PCT"
# Throughput after convergence: the mean per-second rate from 2 s after
# the first tick with >= 90 % of the hot set in FMem, over the mean rate
# of the no-tiering run (same guest, same run).
conv=$(grep '"gups":"tick"' /tmp/gups-ours.out | awk -F'"hot_fmem_pct":' '
    { split($2, a, ","); n++; if (!c && a[1] + 0 >= 90) c = n }
    END { print c + 0 }')
tb_fact ours_converged_tick "$conv"
ratio=$(awk -v c="$conv" '
    FNR == 1 { f++ }
    /"gups":"tick"/ { split($0, a, "\"mups\":"); v = a[2] + 0
        if (f == 1) { sn += v; nn++ } else if (c && ++k >= c + 2) { so += v; no++ } }
    END { if (!nn || !no || !sn) { print "null"; exit }
        printf "%.3f", (so / no) / (sn / nn) }' /tmp/gups-none.out /tmp/gups-ours.out 2>/dev/null)
tb_fact ours_throughput_ratio_converged "${ratio:-null}"
# mean per-second rate of a phase's ticks from tick FROM on (1-based)
mean_rate() { grep '"gups":"tick"' "$1" 2>/dev/null | sed -n 's/.*"mups":\([0-9.]*\).*/\1/p' |
    awk -v from="${2:-1}" 'NR >= from { s += $1; n++ } END { if (n) printf "%.4f", s / n }'; }
if [ -s /tmp/gups-static.out ]; then
    r_none=$(mean_rate /tmp/gups-none.out)
    r_static=$(mean_rate /tmp/gups-static.out)
    r_conv=""
    [ "$conv" -gt 0 ] && r_conv=$(mean_rate /tmp/gups-ours.out $((conv + 2)))
    q() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b; else print "null" }'; }
    tb_fact static_throughput_ratio "$(q "$r_static" "$r_none")"
    tb_fact ours_vs_static_converged "$(q "$r_conv" "$r_static")"
    echo "@@FIGURE GUPS static placement (hot set in FMem, no manager) / no tiering: $(q "$r_static" "$r_none"); with the manager after convergence / static placement: $(q "$r_conv" "$r_static")"
fi
tb_fact ours_throughput_ratio_run "$(awk -v a="${m_ours:-0}" -v b="${m_none:-0}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "null" }')"
echo "@@FIGURE GUPS throughput with the manager / without: ${ratio:-?} after convergence (tick ${conv}), whole run $(awk -v a="${m_ours:-0}" -v b="${m_none:-0}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "?" }')"
if [ "$MIN_RATIO_PCT" -gt 0 ]; then
    rp=$(awk -v r="${ratio:-0}" 'BEGIN { printf "%d", (r == "null" ? 0 : r) * 100 }')
    tb_check_ge "ours-throughput-after-convergence>=${MIN_RATIO_PCT}pct" "$rp" "$MIN_RATIO_PCT"
fi
fin=$(json_num "$ours_done" hot_fmem_pct)
tb_check_ge "ours-final-hot-set-${MIN_PCT}pct-in-fmem" "${fin%.*}" "$MIN_PCT"
fi

# ---- phase 4: an automatic target (RSS >= 64 MiB) that forks a child
# sharing its region and unmaps half of its cold part half-way; then
# unload while it and the agent are running ----
if phase_on unload; then
echo 64 >/sys/module/tiering/parameters/auto_rss_mb
"$GUPS" -s 96 -H 16 -t 40 -i 1000 -k -u >/tmp/gups-unload.out 2>&1 &
u_pid=$!
tb_wait_line /tmp/gups-unload.out '"gups":"start"' 30
# the worker looks every 2 s
auto_slot() {
    for d in "$SYS"/targets/[0-9]*; do
        [ "$(cat "$d/pid" 2>/dev/null)" = "$u_pid" ] &&
            [ "$(cat "$d/state" 2>/dev/null)" = running ] && { basename "$d"; return 0; }
    done
    return 1
}
auto_slot_q() { auto_slot >/dev/null; }
if tb_wait_until 15 auto_slot_q; then
    u_slot=$(auto_slot)
    tb_pass auto-target-by-rss "pid $u_pid in slot $u_slot"
    tb_check_eq auto-target-flag 1 "$(awk '$1 == "auto" { print $2 }' "$SYS/targets/$u_slot/stats")"
else
    tb_fail auto-target-by-rss "pid $u_pid not picked up within 15 s"
    u_slot=$("$AGENT" add "$u_pid")
fi
echo 0 >/sys/module/tiering/parameters/auto_rss_mb
# the child gups forked (-k) is followed as a target of its own
u_child=$(sed -n 's/.*"gups":"start".*"child":\([0-9]*\).*/\1/p' /tmp/gups-unload.out | head -n 1)
child_slot() {
    for d in "$SYS"/targets/[0-9]*; do
        [ "$(cat "$d/pid" 2>/dev/null)" = "$u_child" ] &&
            [ "$(awk '$1 == "parent" { print $2 }' "$d/stats")" = "$u_pid" ] && return 0
    done
    return 1
}
if [ -n "$u_child" ] && tb_wait_until 15 child_slot; then
    tb_pass forked-child-followed "child $u_child of $u_pid"
else
    tb_fail forked-child-followed "child ${u_child:-?} of $u_pid not a target within 15 s"
fi
tb_bg_start AU "$AGENT" run
if tb_wait_until 20 sh -c "[ \$(awk '\$1 == \"epoch\" { print \$2 }' $SYS/targets/$u_slot/stats) -ge 3 ]"; then
    tb_pass unload-target-active "$(awk '$1 == "epoch" || $1 == "samples" { printf "%s=%s ", $1, $2 }' "$SYS/targets/$u_slot/stats")"
else
    tb_fail unload-target-active "no 3 epochs in 20 s"
fi
# the target unmaps part of a managed range (at 20 s): keep going (one
# more scan and epoch; backed off, an epoch lasts up to 8 s)
if tb_wait_line /tmp/gups-unload.out '"gups":"unmapped"' 40; then
    e0=$(awk '$1 == "epoch" { print $2 }' "$SYS/targets/$u_slot/stats")
    s0=$(awk '$1 == "scans" { print $2 }' "$SYS/targets/$u_slot/stats")
    if tb_wait_until 20 sh -c "[ \$(awk '\$1 == \"epoch\" { print \$2 }' $SYS/targets/$u_slot/stats) -ge $((e0 + 1)) ] &&
        [ \$(awk '\$1 == \"scans\" { print \$2 }' $SYS/targets/$u_slot/stats) -ge $((s0 + 1)) ]"; then
        tb_pass target-survives-unmap "$(awk '$1 == "state" || $1 == "epoch" || $1 == "ranges" || $1 == "reloc_failed" { printf "%s=%s ", $1, $2 }' "$SYS/targets/$u_slot/stats")"
    else
        tb_fail target-survives-unmap "no further scan and epoch in 20 s after the unmap"
    fi
else
    tb_fail target-survives-unmap "gups did not unmap: $(tail -n 2 /tmp/gups-unload.out)"
fi
tb_check_eq target-still-running-after-unmap running "$(cat "$SYS/targets/$u_slot/state")"
tb_check rmmod-while-running rmmod tiering
tb_check workload-survives-unload kill -0 "$u_pid"
if tb_wait_until 10 sh -c "! kill -0 $AU_PID 2>/dev/null"; then
    tb_pass agent-exits-after-unload
else
    tb_fail agent-exits-after-unload "still running 10 s after rmmod"
fi
tb_bg_stop "$AU_PID"
kill "$u_pid" 2>/dev/null
wait "$u_pid" 2>/dev/null
fi
# ---- user-space sampling (agent --sampler pagefault -> samples_in): the
# path that feeds large PEBS from per-thread perf rings on Intel hosts,
# run here with the software page-fault event (no PMU in the testbed).
# After the measured phases; 15-25 s. The workload forks a child (-k)
# so that its writes keep taking copy-on-write faults after the attach. ----
if phase_on usersample; then
[ -d "$SYS" ] || tb_check us-insmod insmod "$KO"
tb_bg_start US "$AGENT" run -v --sampler pagefault
"$GUPS" -s 128 -H 16 -t 40 -i 1000 -k >/tmp/gups-us.out 2>&1 &
us_pid=$!
if tb_wait_line /tmp/gups-us.out '"gups":"start"' 60; then
    us_slot=$("$AGENT" add "$us_pid")
    us_dir=$SYS/targets/$us_slot
    us_src() { [ "$(cat "$us_dir/source" 2>/dev/null)" = user ]; }
    us_acc() { awk '$1 == "user_accepted" { print $2 }' "$us_dir/stats" 2>/dev/null; }
    if tb_wait_until 5 us_src; then
        tb_pass us-source-user "slot $us_slot"
    else
        tb_fail us-source-user "source '$(cat "$us_dir/source" 2>/dev/null)' after 5 s"
    fi
    us_acc_100() { [ "$(us_acc)" -ge 100 ] 2>/dev/null; }
    tb_wait_until 8 us_acc_100
    tb_check_ge us-samples-accepted "$(us_acc)" 100
    # the module trusts nothing it is given
    # (dd, not the shell's printf, which fails silently on a write error)
    try_bin() {
        # shellcheck disable=SC2059 # the format is the bytes
        printf "$2" >/tmp/us.bin
        if dd if=/tmp/us.bin of="$us_dir/samples_in" bs=4096 2>/tmp/tb.err; then
            tb_fail "$1" "write accepted"
        elif grep -qi "$3" /tmp/tb.err; then
            tb_pass "$1" "$(tr -d '\n' </tmp/tb.err)"
        else
            tb_fail "$1" "wrong error: $(tr -d '\n' </tmp/tb.err)"
        fi
    }
    try_bin us-length-not-8-EINVAL 'abc' "invalid argument"
    d0=$(awk '$1 == "user_dropped" { print $2 }' "$us_dir/stats")
    # a kernel address (0xffff888000000000, little endian): never a
    # target's (the span may start at 0: a low address can be inside it)
    tb_check us-kernel-address-written sh -c "printf '\\0\\0\\0\\0\\200\\210\\377\\377' > $us_dir/samples_in"
    tb_check_ge us-kernel-address-dropped "$(awk '$1 == "user_dropped" { print $2 }' "$us_dir/stats")" $((${d0:-0} + 1))
    try_write us-source-bad-EINVAL "invalid argument" fast "$us_dir/source"
    grep -E '^(source|samples|user_|span_)' "$us_dir/stats" | sed 's/^/U| /'
    tb_bg_stop "$US_PID"
    usd=$(grep '"sampler":"done"' "$US_OUT" | tail -n 1)
    tb_fact usersample_done "${usd:-null}"
    tb_check_ge us-threads-sampled "$(json_num "$usd" threads_max)" 2
    tb_check_ge us-batches-sent "$(json_num "$usd" batches)" 1
    tb_check_eq us-no-write-errors 0 "$(json_num "$usd" write_errors)"
    # the agent gave the target back to the module's own source
    tb_check_eq us-source-handed-back abit "$(cat "$us_dir/source" 2>/dev/null)"
    try_bin us-not-user-EBUSY '\0\0\0\0\0\0\0\1' "busy"
else
    tb_fail us-gups-started "no start line: $(tail -n 2 /tmp/gups-us.out)"
    tb_bg_stop "$US_PID"
fi
tb_show_tail "$US_OUT" 6 'S| '
kill "$us_pid" 2>/dev/null
wait "$us_pid" 2>/dev/null
tb_check us-rmmod rmmod tiering
fi
tb_bg_stop "$PH_PID"
# kernel messages since the module was loaded
dmesg | tail -n +$((dmesg_lines + 1)) >/tmp/dmesg-new
if grep -qE 'BUG:|Oops|WARNING:|general protection|refcount_t|list_(add|del) corruption' /tmp/dmesg-new; then
    tb_fail no-kernel-warnings "$(grep -E 'BUG:|Oops|WARNING:|general protection|refcount_t|corruption' /tmp/dmesg-new | head -n 2 | tr '\n' '|')"
else
    tb_pass no-kernel-warnings
fi
dmesg | grep -i tiering | tail -n 3 | sed 's/^/K| /'

tb_report
tb_l2_handshake "${TB_ACK_TIMEOUT:-30}"
exit "$TB_RC"

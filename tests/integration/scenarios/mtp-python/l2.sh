# shellcheck shell=sh
# mtp-python, L2 side: MTP (guest/python/mtp, object-level tiering for
# CPython) on real PyPI workloads in a two-node guest whose FMem is limited
# with our FMem balloon, beside no tiering and Linux's own tiering.
#
# Python comes on a virtio-blk disk (ext4, read-only): Debian's python3.11,
# the mtp extension, NetworkX and SQLAlchemy (build-testbed-disk.sh), run
# in a chroot. Per workload:
#   ref     one run with FMem unlimited: the reference result digest and
#           the peak RSS the FMem limit is derived from
#   then per FMem size (a share of that RSS; the L1 side sets the FMem
#   balloon on request) one fresh run per phase:
#   none    no tiering (numa_balancing=0, demotion off)
#   mtp     the rounds run under mtp.start(mask=[1], ...)
#   numab   numa_balancing=2 + demotion_enabled (TPP-like), last because
#           demotion also moves the page cache out of FMem
# mtp-hotmon (DAMON, accessed bits) samples every phase: the share of the
# process's hot pages resident in FMem (node 0) over time.
# Kernel command line: tb.mtp_workloads=nx,orm tb.mtp_pcts=50 (FMem as %
# of the workload's RSS) tb.mtp_nx_size=N tb.mtp_orm_size=N
# tb.mtp_rounds=N (nx) tb.mtp_orm_rounds=N tb.mtp_interval=S
# tb.mtp_phases=none,mtp,numab tb.mtp_sampling_share=F (MTP's max_sampling_share)
# tb.mtp_samples_per_migration=N tb.mtp_migration_ms=MS tb.mtp_migration_share=F
# tb.mtp_hotmon_ms=MS (ground-truth sampling interval)
# shellcheck source=../../lib/common.sh
. "$TB_LIB/common.sh"
# shellcheck source=../../lib/l2.sh
. "$TB_LIB/l2.sh"
tb_begin l2

WORKLOADS=nx
PCTS=50
NX_SIZE=1200
ORM_SIZE=1500
# long enough for MTP to act: a marking pass and two sweeps (about 6 s
# under nested TCG) come before its first migration round
ROUNDS=10
ORM_ROUNDS=30 # an ORM round is about 20x shorter than a NetworkX one
INTERVAL=0.5
# A sweep of ~150 000 objects takes 2-8 s under nested TCG (natively
# ~30 ms): with the default 10 % sampling share (half for sweeps) a run of
# 15-130 s got one sweep and never reached its first migration round (bench
# run 2026-11-26 09:15). The testbed measures placement, so MTP gets half
# the time here; the bench reports the sampling share it took.
SAMPLING_SHARE=0.5
# The same reasoning for migration: a round's fold and page lookup take
# seconds under nested TCG, and 200 ms of move_pages moved 95-446 pages per
# round there; MTP acted once per run, 20-30 s in, when the ORM runs last
# 25-130 s. Here a round follows every sweep (the marking pass sets the
# refcount baseline, so the first sweep measures), with 1 s of move_pages
# and up to 30 % of the time (native defaults: every 8 sweeps, 200 ms, 10 %).
SAMPLES_PER_MIGRATION=1
MIGRATION_MS=1000
MIGRATION_SHARE=0.3
# DAMON's aggregation is 400 ms: a sample a second gives a NetworkX run of
# 10 rounds 5-8 samples (2 s gave 1-3, too few to compare phases)
HOTMON_MS=1000
PHASES="none mtp numab"
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in
    tb.mtp_workloads=*) WORKLOADS=$(echo "${arg#*=}" | tr ',' ' ') ;;
    tb.mtp_pcts=*) PCTS=$(echo "${arg#*=}" | tr ',' ' ') ;;
    tb.mtp_nx_size=*) NX_SIZE=${arg#*=} ;;
    tb.mtp_orm_size=*) ORM_SIZE=${arg#*=} ;;
    tb.mtp_rounds=*) ROUNDS=${arg#*=} ;;
    tb.mtp_orm_rounds=*) ORM_ROUNDS=${arg#*=} ;;
    tb.mtp_interval=*) INTERVAL=${arg#*=} ;;
    tb.mtp_phases=*) PHASES=$(echo "${arg#*=}" | tr ',' ' ') ;;
    tb.mtp_sampling_share=*) SAMPLING_SHARE=${arg#*=} ;;
    tb.mtp_samples_per_migration=*) SAMPLES_PER_MIGRATION=${arg#*=} ;;
    tb.mtp_migration_ms=*) MIGRATION_MS=${arg#*=} ;;
    tb.mtp_migration_share=*) MIGRATION_SHARE=${arg#*=} ;;
    tb.mtp_hotmon_ms=*) HOTMON_MS=${arg#*=} ;;
    tb.timeout=*) LIMIT_S=${arg#*=} ;;
    esac
done
# l2-init kills the scenario at tb.timeout without its JSON: from the
# second FMem size of a workload on, a size starts only if one as long as
# the longest so far still fits, so that what ran is reported. (The first
# size has no estimate; if it overruns, its finished runs' @@MTPRES lines
# are on the console for scripts/bench/mtp.sh.)
LIMIT_S=${LIMIT_S:-600}
START_MS=$(tb_now_ms)
tb_fact_str workloads "$WORKLOADS"
tb_fact_str fmem_pcts "$PCTS"
tb_fact rounds "$ROUNDS"
tb_fact orm_rounds "$ORM_ROUNDS"
tb_fact_str mtp_interval_s "$INTERVAL"
tb_fact hotmon_ms "$HOTMON_MS"
tb_fact_str mtp_sampling_share "$SAMPLING_SHARE"
tb_fact_str mtp_samples_per_migration "$SAMPLES_PER_MIGRATION"
tb_fact_str mtp_migration_ms "$MIGRATION_MS"
tb_fact_str mtp_migration_share "$MIGRATION_SHARE"

ROOT=/mnt/py
BAL=/sys/kernel/demeter_balloon
HOTMON=$TB_BIN/mtp-hotmon

json_num() { printf '%s\n' "$1" | sed -n "s/.*\"$2\": *\(-\{0,1\}[0-9.e+-]*\).*/\1/p" | head -n 1; }
json_str() { printf '%s\n' "$1" | sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" | head -n 1; }
# node 0's free memory in kB: buddy pages plus the per-CPU lists
node0_free_kb() {
    awk '$1 == "Node" { node = $2 + 0 }
        node == 0 && $1 == "pages" && $2 == "free" { kb += $3 * 4 }
        node == 0 && $1 == "count:" { kb += $2 * 4 }
        END { print kb + 0 }' /proc/zoneinfo
}
node0_low_kb() {
    awk '$1 == "Node" { node = $2 + 0 } node == 0 && $1 == "low" { kb += $2 * 4 } END { print kb + 0 }' /proc/zoneinfo
}
oops_count() { dmesg | grep -ciE "Oops|BUG:|WARNING:|general protection"; }
oops0=$(oops_count)

# ---- the disk, the chroot and the balloon driver ----
tb_check modprobe-ext4 sh -c "modprobe crc32c_generic && modprobe ext4"
disk=""
for d in /sys/block/vd*; do
    [ -e "$d" ] && disk=/dev/${d##*/} && break
done
tb_check virtio-blk-disk-present test -b "${disk:-/dev/none}"
mkdir -p "$ROOT"
tb_check mount-python-disk mount -t ext4 -o ro "${disk:-/dev/none}" "$ROOT"
for m in proc sys dev; do mount -o bind "/$m" "$ROOT/$m"; done
mount -t tmpfs -o size=64m tmpfs "$ROOT/tmp"
PY="chroot $ROOT /usr/bin/python3"
ver=$($PY -c 'import sys, mtp, networkx, sqlalchemy; print(sys.version.split()[0], networkx.__version__, sqlalchemy.__version__)' 2>&1)
case $ver in
3.*) tb_pass python-imports-mtp-networkx-sqlalchemy "$ver" ;;
*) tb_fail python-imports-mtp-networkx-sqlalchemy "$(echo "$ver" | tail -n 2 | tr '\n' '|')" ;;
esac
# bad input reaches Python as a clear error, not a crash
bad=$($PY -c 'import mtp
try:
    mtp.start(mask=[5])
except ValueError as e:
    print("ValueError", e)' 2>&1)
case $bad in ValueError*) tb_pass mtp-rejects-missing-node "$bad" ;; *) tb_fail mtp-rejects-missing-node "$bad" ;; esac
tb_check insmod-demeter_balloon insmod /tb/kmod/demeter_balloon.ko
tb_check_eq hetero-mem-negotiated 1 "$(cat $BAL/hetero_mem 2>/dev/null)"
echo 0 >/proc/sys/kernel/numa_balancing
echo false >/sys/kernel/mm/numa/demotion_enabled
tb_fact node1_tier_differs "$([ "$(tb_memory_tier_of 0)" != "$(tb_memory_tier_of 1)" ] && echo 1 || echo 0)"

# ---- one run: run_one TAG WORKLOAD SIZE ROUNDS [workload args...] ----
# Starts the workload and mtp-hotmon on it; sets R_DONE (the workload's
# result JSON) and R_HOT (the hotmon lines taken while the rounds ran),
# returns 1 when it failed.
run_one() {
    r_tag=$1
    r_w=$2
    r_size=$3
    r_rounds=$4
    shift 4
    r_out=/tmp/w-$r_tag.out
    r_mon=/tmp/mon-$r_tag.out
    sync
    echo 3 >/proc/sys/vm/drop_caches
    tb_fact "${r_tag}_node0_free_kb_start" "$(node0_free_kb)"
    # where a crash happened, should the console end here
    tb_log "run $r_tag starts: numa_balancing=$(cat /proc/sys/kernel/numa_balancing) $*"
    r_oops=$(oops_count)
    $PY /mtp/workload.py "$r_w" --size "$r_size" --rounds "$r_rounds" "$@" >"$r_out" 2>&1 &
    r_pid=$!
    # the chroot'ed python is the child of chroot(8): it execs, same pid
    "$HOTMON" -p "$r_pid" -i "$HOTMON_MS" >"$r_mon" 2>&1 &
    r_mon_pid=$!
    wait "$r_pid"
    r_rc=$?
    wait "$r_mon_pid" 2>/dev/null
    # an oops that did not take the kernel down: its report now, not at the end
    if [ "$(oops_count)" -gt "$r_oops" ]; then
        dmesg | tail -n 60 | sed "s/^/dmesg $r_tag: /"
    fi
    R_DONE=$(sed -n 's/^@@MTPW {/{/p' "$r_out" | tail -n 1)
    # hotmon's clock starts with the process: keep the samples from the
    # moment the workload had built its data and began its rounds
    r_ready_ms=$(printf '%s\n' "$R_DONE" | sed -n 's/.*"ready_s": *\([0-9]*\)\.\{0,1\}\([0-9]\{0,3\}\).*/\1 \2/p' |
        awk '{ printf "%d", $1 * 1000 + substr($2 "000", 1, 3) }')
    R_HOT=$(grep '^{"t_ms"' "$r_mon" | awk -F'[:,]' -v r="${r_ready_ms:-0}" '$2 >= r')
    if [ "$r_rc" -ne 0 ] || [ -z "$R_DONE" ]; then
        tb_fail "$r_tag-ran" "rc=$r_rc: $(tail -n 4 "$r_out" | tr '\n' '|')"
        return 1
    fi
    tb_pass "$r_tag-ran" "$(json_num "$R_DONE" rounds_s) s of rounds"
    tb_fact "${r_tag}_result" "$R_DONE"
    grep -v '^{"t_ms"' "$r_mon" | head -n 3 | sed "s/^/hotmon $r_tag: /"
    return 0
}

# mean of KEY over the hotmon lines (all, or the second half with "late")
hot_mean() {
    printf '%s\n' "$R_HOT" | sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | awk -v late="$2" '
        { v[n++] = $1 } END {
            s = 0; c = 0; from = late ? int(n / 2) : 0
            for (i = from; i < n; i++) { s += v[i]; c++ }
            if (c) printf "%.1f", s / c; else print "null" }'
}
# hot pages by mapping kind, summed over the samples: "file H/HF heap H/HF ..."
# (HF of them in FMem): which memory a manager left in SMem
hot_kinds() {
    printf '%s\n' "$R_HOT" | sed -n 's/.*"hot_by_kind":{\([^}]*\)}.*/\1/p' | tr -d '"[]' | tr ',' ' ' | awk '
        { for (i = 1; i <= NF; i += 2) { split($i, a, ":"); k = a[1]; h[k] += a[2]; f[k] += $(i + 1); if (!(k in seen)) { seen[k] = 1; ord[n++] = k } } }
        END { for (i = 0; i < n; i++) printf "%s%s %d/%d", i ? " " : "", ord[i], h[ord[i]], f[ord[i]] }'
}
hot_series() { printf '%s\n' "$R_HOT" | sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | tr '\n' ',' | sed 's/,$//'; }

req=0
for w in $WORKLOADS; do
    case $w in
    nx) size=$NX_SIZE rounds=$ROUNDS ;;
    orm) size=$ORM_SIZE rounds=$ORM_ROUNDS ;;
    *) tb_fail "workload-$w" "unknown workload"; continue ;;
    esac
    # reference run: FMem unlimited (balloon deflated)
    if [ "$req" -gt 0 ]; then
        req=$((req + 1))
        echo "@@MTP balloon $req fmem_bytes=0"
        tb_wait_until 300 sh -c "[ \$(cat $BAL/fmem/size_pages) -eq 0 ]" ||
            tb_fail "$w-balloon-deflated" "fmem balloon still $(cat $BAL/fmem/size_pages) pages"
    fi
    run_one "$w-ref" "$w" "$size" "$rounds" || continue
    LONGEST_MS=0
    ref_digest=$(json_str "$R_DONE" digest)
    rss_kb=$(json_num "$R_DONE" maxrss_kb)
    tb_fact "${w}_rss_kb" "$rss_kb"
    for pct in $PCTS; do
        tag=$w-$pct
        size_t0=$(tb_now_ms)
        left_ms=$((LIMIT_S * 1000 - (size_t0 - START_MS) - 90000))
        if [ "$LONGEST_MS" -gt 0 ] && [ "$left_ms" -lt "$LONGEST_MS" ]; then
            # a failure, not a quiet skip: the checks of this size did not run
            tb_fail "$tag-started-in-time" "$((left_ms / 1000)) s left of tb.timeout, a size may take $((LONGEST_MS / 1000)) s"
            skipped="${skipped:-}${skipped:+ }$tag"
            continue
        fi
        # FMem the workload finds free: pct % of its RSS above the low
        # watermark (below it, allocations fall back to node 1)
        sync
        echo 3 >/proc/sys/vm/drop_caches
        want_kb=$((rss_kb * pct / 100 + $(node0_low_kb)))
        cur_pages=$(cat $BAL/fmem/size_pages)
        # inflate (or deflate, going to a larger size) by the difference
        bal_pages=$((cur_pages + ($(node0_free_kb) - want_kb) / 4))
        [ "$bal_pages" -gt 0 ] || bal_pages=0
        req=$((req + 1))
        t0=$(tb_now_ms)
        echo "@@MTP balloon $req fmem_bytes=$((bal_pages * 4096))"
        if tb_wait_until 300 sh -c "[ \$(cat $BAL/fmem/size_pages) -eq $bal_pages ]"; then
            tb_pass "$tag-fmem-balloon-set" "$bal_pages pages in $(($(tb_now_ms) - t0)) ms; node 0 free $(node0_free_kb) kB, wanted $want_kb"
        else
            tb_fail "$tag-fmem-balloon-set" "balloon at $(cat $BAL/fmem/size_pages) of $bal_pages pages after 300 s"
            continue
        fi
        tb_fact "${tag}_fmem_target_kb" "$want_kb"
        for ph in $PHASES; do
            case $ph in
            none) args="" ;;
            mtp) args="--mtp --mask 1 --interval $INTERVAL --pressure-mb $((want_kb * 2 / 1024 + 16)) --fmem-reserve-mb 2 --samples-per-migration $SAMPLES_PER_MIGRATION --sampling-share $SAMPLING_SHARE --migration-budget-ms $MIGRATION_MS --migration-share $MIGRATION_SHARE" ;;
            # MTP with its own (native) sampling and migration shares: what
            # a user gets without the testbed's settings, throughput first
            mtpdef) args="--mtp --mask 1 --interval $INTERVAL --pressure-mb $((want_kb * 2 / 1024 + 16)) --fmem-reserve-mb 2" ;;
            numab)
                echo 2 >/proc/sys/kernel/numa_balancing
                echo true >/sys/kernel/mm/numa/demotion_enabled
                args=""
                ;;
            *) tb_fail "phase-$ph" "unknown phase"; continue ;;
            esac
            # shellcheck disable=SC2086
            if run_one "$tag-$ph" "$w" "$size" "$rounds" $args; then
                d=$(json_str "$R_DONE" digest)
                tb_check_eq "$tag-$ph-output-identical" "$ref_digest" "$d"
                tb_fact "${tag}_${ph}_hot_fmem_pct_series" "[$(hot_series hot_fast_pct)]"
                tb_fact "${tag}_${ph}_hot_fmem_pct_mean" "$(hot_mean hot_fast_pct)"
                tb_fact "${tag}_${ph}_hot_fmem_pct_late" "$(hot_mean hot_fast_pct late)"
                tb_fact "${tag}_${ph}_acc_fmem_pct_mean" "$(hot_mean acc_fast_pct)"
                tb_fact_str "${tag}_${ph}_hot_by_kind" "$(hot_kinds)"
                # the same on the console at once: the bench reads it when
                # the L2 never gets to its JSON line
                echo "@@MTPRES {\"tag\":\"$tag\",\"phase\":\"$ph\",\"hot_mean\":$(hot_mean hot_fast_pct),\"hot_late\":$(hot_mean hot_fast_pct late),\"acc_mean\":$(hot_mean acc_fast_pct),\"result\":$R_DONE}"
                echo "@@FIGURE $tag $ph: hot pages in FMem mean $(hot_mean hot_fast_pct)%, 2nd half $(hot_mean hot_fast_pct late)%, accesses $(hot_mean acc_fast_pct)%, rounds $(json_num "$R_DONE" rounds_s) s; hot/in FMem by kind: $(hot_kinds)"
                tb_check_ge "$tag-$ph-hotmon-samples-in-rounds" "$(printf '%s\n' "$R_HOT" | grep -c t_ms)" 1
                if [ "$ph" = mtp ] || [ "$ph" = mtpdef ]; then
                    tb_check_ge "$tag-$ph-marked" "$(json_num "$R_DONE" markings)" 1
                    tb_check_ge "$tag-$ph-sampled" "$(json_num "$R_DONE" samples)" 1
                    dem=$(json_num "$R_DONE" pages_demoted)
                    pro=$(json_num "$R_DONE" pages_promoted)
                    moved=$((${dem:-0} + ${pro:-0}))
                    # at its native shares a short TCG run may end before
                    # MTP's first migration round: a figure, not a check
                    if [ "$ph" = mtp ]; then
                        tb_check_ge "$tag-mtp-moved-pages" "$moved" 1
                    else
                        tb_fact "${tag}_${ph}_moved_pages" "$moved"
                    fi
                fi
            fi
            if [ "$ph" = numab ]; then
                echo 0 >/proc/sys/kernel/numa_balancing
                echo false >/sys/kernel/mm/numa/demotion_enabled
            fi
        done
        size_ms=$(($(tb_now_ms) - size_t0))
        [ "$size_ms" -gt "$LONGEST_MS" ] && LONGEST_MS=$size_ms
        tb_fact "${tag}_size_s" "$((size_ms / 1000))"
    done
done
tb_fact_str sizes_skipped "${skipped:-}"

if [ "$(oops_count)" -gt "$oops0" ]; then
    tb_fail no-kernel-oops "$(dmesg | grep -iE 'Oops|BUG:|WARNING:|general protection' | tail -n 2 | tr '\n' '|')"
else
    tb_pass no-kernel-oops
fi
umount "$ROOT/tmp" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" "$ROOT" 2>/dev/null
tb_report
tb_l2_handshake "${TB_ACK_TIMEOUT:-30}"
exit "$TB_RC"

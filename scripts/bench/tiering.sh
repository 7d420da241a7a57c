#!/usr/bin/env bash
# tiering benchmark (issues 6, 14): the tiering-gups scenario's figures as
# one JSON line -- first the workload's own throughput with each manager as
# a fraction of the no-tiering run in the same guest and run (per second,
# after convergence, and the transient before it), then hot-set residency
# in FMem over time and the expected share
# of accesses served from FMem for our guest tiered-memory manager
# (tiering.ko + tiering-agent) beside the baselines a stock kernel offers
# (no tiering; numa_balancing=2 with demotion enabled; DAMON's DAMOS
# migrate_hot/migrate_cold where the guest kernel has them), the manager's CPU
# time, and which sampling source produced it (the accessed-bit fallback
# here: no machine of the project has PEBS).
#
# Environment: BENCH_TIERING_MODE=l2-in-qemu (default; the L2 kernel under
# QEMU TCG, no VMM) or nested (our VMM in the L1 testbed);
# BENCH_TIERING_APPEND (extra L2 command line, l2-in-qemu only, e.g.
# "tb.tier_run_s=60"; "tb.tier_cpu_pct=5" caps the manager's CPU with the
# agent's -c budget); BENCH_TIERING_L1_APPEND (nested only; default
# "TB_TIER_RUN_S=60 TB_TIER_BASE_S=20 TB_TIER_BALLOON=0": a run long enough
# to measure after convergence, without the balloon step that forces
# demotions half-way). TB_L1_NPT=on (nested mode) runs the L1 with nested
# paging, as EPT/NPT hardware would; the default L1 uses shadow paging
# (docs/testbed.md). Progress goes to stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODE=${BENCH_TIERING_MODE:-l2-in-qemu}
OUT=$(mktemp -d /tmp/tiering-bench.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

args=(--out "$OUT/run" -q)
case $MODE in
l2-in-qemu)
    args+=(--l2-in-qemu)
    [[ -n ${BENCH_TIERING_APPEND:-} ]] && args+=(--l2-append "$BENCH_TIERING_APPEND")
    ;;
nested) args+=(--nested --l1-append "${BENCH_TIERING_L1_APPEND-TB_TIER_RUN_S=60 TB_TIER_BASE_S=20 TB_TIER_BALLOON=0}") ;;
*)
    echo "BENCH_TIERING_MODE must be l2-in-qemu or nested" >&2
    exit 2
    ;;
esac
# Nested mode also runs tiering-gups-thp in the same L1 boot: the same
# GUPS on transparent huge pages (THP "always", MADV_HUGEPAGE: Debian's
# default), reported under "thp_on" with the same figures.
scenarios=(tiering-gups)
[[ $MODE == nested ]] && scenarios+=(tiering-gups-thp)
rc=0
# BENCH_TIERING_FROM=RUN_DIR: report on a testbed run made before (e.g.
# `scripts/testbed.sh --out RUN_DIR ... tiering-gups`) instead of running.
run=${BENCH_TIERING_FROM:-$OUT/run}
if [[ -z ${BENCH_TIERING_FROM:-} ]]; then
    "$ROOT/scripts/testbed.sh" "${args[@]}" "${scenarios[@]}" >&2 || rc=$?
fi

python3 - "$run" "$MODE" "$rc" <<'PY'
import json, os, sys

run, mode, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])


def load(scenario):
    """The L2 result of @scenario's run (its l2.sh reports as tiering-gups)
    and the L1's paging mode; (None, None) when it did not run."""
    l2, l1_paging = None, None
    try:
        for line in open(os.path.join(run, scenario, "output.log"), errors="replace"):
            line = line.strip()
            if not line.startswith('{"scenario":'):
                continue
            j = json.loads(line)
            if j.get("side") == "l2" and j.get("scenario") == "tiering-gups":
                l2 = j
            elif j.get("scenario") == scenario and isinstance(j.get("facts", {}).get("l2"), dict):
                l2 = j["facts"]["l2"]
                l1_paging = j["facts"].get("l1_paging")
    except (OSError, ValueError):
        pass
    return l2, l1_paging


l2, l1_paging = load("tiering-gups")
if not l2:
    print(json.dumps({"bench": "tiering", "mode": mode, "error":
                      "no result from the tiering-gups scenario", "testbed_rc": rc}))
    sys.exit(1)


def report(l2, l1_paging):
    """Every figure of one run of the tiering-gups L2 scenario."""
    f = l2["facts"]

    none_series = f.get("none_mups_series") or []
    none_mean = sum(none_series) / len(none_series) if none_series else None


    def throughput(name):
        """The phase's per-second rate as a fraction of the no-tiering mean:
        per tick, after convergence (from 2 s after the first tick with >= 90 %
        of the hot set in FMem) and before it (the transient)."""
        rates = f.get(name + "_mups_series") or []
        hot = f.get(name + "_hot_fmem_pct_series") or []
        if not none_mean or not rates:
            return {"per_tick": None, "after_convergence": None, "transient_mean": None,
                    "transient_min": None, "converged_tick": None}
        frac = [round(r / none_mean, 3) for r in rates]
        conv = next((i for i, h in enumerate(hot) if h >= 90), None)
        after = frac[conv + 2:] if conv is not None else []
        before = frac[:conv + 2] if conv is not None else frac
        return {
            "per_tick": frac,
            "after_convergence": round(sum(after) / len(after), 3) if after else None,
            "transient_mean": round(sum(before) / len(before), 3) if before else None,
            "transient_min": min(before) if before else None,
            "converged_tick": conv + 1 if conv is not None else None,
        }


    def phase(name):
        done = f.get(name + "_done") or {}
        return {
            "hot_fmem_pct_series": f.get(name + "_hot_fmem_pct_series"),
            "fmem_access_pct_series": f.get(name + "_fmem_access_pct_series"),
            "final_hot_fmem_pct": done.get("hot_fmem_pct"),
            "final_fmem_access_pct": done.get("fmem_access_pct"),
            "t60_ms": done.get("t60_ms"),
            "t90_ms": done.get("t90_ms"),
            "mups": done.get("mups"),
            "seconds": done.get("seconds"),
            "mups_series": f.get(name + "_mups_series"),
        }

    ours = phase("ours")
    agent = f.get("agent_done") or {}
    ours.update({
        "sampling_source": f.get("ours_source"),
        "sample_rate_per_s": f.get("ours_sample_rate"),
        "ranges": f.get("ours_ranges"),
        "manager_cpu_pct_of_one_vcpu": f.get("ours_manager_cpu_pct"),
        "manager_cpu_pct_second_half": f.get("ours_manager_cpu_pct_2nd_half"),
        "kernel_worker_cpu_pct": f.get("ours_worker_cpu_pct"),
        "agent_cpu_ns": f.get("ours_agent_cpu_ns"),
        "kernel_worker_cpu_ns": f.get("ours_worker_cpu_ns"),
        "promoted_pages": agent.get("promoted"),
        "demoted_pages": agent.get("demoted"),
        "failed_pages": agent.get("failed"),
        "failed_why": agent.get("failed_why"),
        # pages asked a second time (busy, or left behind by a call that
        # failed in part) and calls whose statuses had to be re-read
        "pages_retried": agent.get("retried"),
        "partial_move_calls": agent.get("partial_calls"),
        "cpu_pct_budget": agent.get("cpu_pct_budget"),
        "throttled_polls": agent.get("throttled_polls"),
        "balloon_holds": agent.get("balloon_holds"),
        "balloon_shed_pages": agent.get("balloon_shed"),
        "short_batches": agent.get("short_batches"),
        "page_move_cpu_ns": agent.get("page_move_ns"),
        "abit_cost_ns": {k: f.get("ours_abit_" + k) for k in
                         ("scan_ns", "arm_ns", "check_ns", "resident_ns", "flush_ns", "epoch_ns")},
        "abit_counts": {k: f.get("ours_abit_" + k) for k in
                        ("scans", "resident_walks", "flushes", "scan_level", "stable_epochs",
                         "epoch_period_ms")},
        "fmem_capacity_pages": {"start": f.get("fmem_capacity_pages_start"),
                                "mid_run": f.get("fmem_capacity_pages_mid")},
    })
    mid = f.get("agent_stats_mid") or {}
    mt = (mid.get("targets") or [{}])[0]
    ours["mid_run_pages"] = {"fmem": mt.get("fmem_pages"), "smem": mt.get("smem_pages"),
                             "sample_rate": mt.get("sample_rate"), "ranges": mt.get("ranges")}
    nb = phase("numab")
    nb_mups = nb["mups"]
    damon = phase("damon")
    damon.update({"kdamond_cpu_pct_of_one_vcpu": f.get("damon_kdamond_cpu_pct"),
                  "migrate_hot_bytes": f.get("damon_scheme0_sz_applied"),
                  "migrate_cold_bytes": f.get("damon_scheme1_sz_applied")})
    nb["vmstat_before"] = f.get("numab_vmstat_before")
    nb["vmstat_after"] = f.get("numab_vmstat_after")
    t90 = ours["t90_ms"]
    cpu = ours["manager_cpu_pct_of_one_vcpu"]
    tp_ours = throughput("ours")
    tp_nb = throughput("numab")
    cpu2 = ours["manager_cpu_pct_second_half"]
    res = {
        "bench": "tiering",
        # first figure: the workload's own rate with each manager as a
        # fraction of the no-tiering run (same guest, same run)
        "throughput_fraction": {
            "ours": tp_ours,
            "numa_balancing_tiering": tp_nb,
            "damon": throughput("damon") if f.get("damon_mups_series")
                     else (f.get("damon") or "not run (phase not in tb.tier_phases)"),
            "target_after_convergence": 0.95,
            # the control: no manager, the hot set first-touched in FMem; its
            # fraction is what placement alone does to the rate here, and
            # ours_vs_static what the manager's work costs beside it
            "static_placement": throughput("static") if f.get("static_mups_series")
                                else "not run (phase not in tb.tier_phases)",
            "ours_vs_static_after_convergence": f.get("ours_vs_static_converged"),
        },
        "gups_mups": {"no_tiering": phase("none")["mups"], "ours": ours["mups"],
                      "numa_balancing_tiering": nb_mups},
        "mode": mode,
        "l1_paging": f.get("l1_paging") or l1_paging,
        "thp": f.get("thp"),
        "warm_up_mups_series": f.get("warm_mups_series"),
        "scenario_result": l2.get("result"),
        "sampling_source": f.get("ours_source"),
        "pebs": f.get("pebs"),
        "workload": {"region_mb": f.get("region_mb"), "hot_mb": f.get("hot_mb"),
                     "hot_density_ratio": f.get("ratio", 10), "run_s": f.get("run_s")},
        "ours": ours,
        "numa_balancing_tiering": nb,
        "damon_tiering": damon,
        "no_tiering": phase("none"),
        "static_placement": phase("static"),
        "issue_targets": {
            "hot90_within_60s": t90 is not None and 0 <= t90 <= 60000,
            "manager_cpu_le_5pct": cpu is not None and cpu <= 5.0,
            "both_at_once": t90 is not None and 0 <= t90 <= 60000 and cpu is not None
                            and cpu <= 5.0,
            "throughput_ge_0.95_after_convergence": tp_ours["after_convergence"] is not None
                                                     and tp_ours["after_convergence"] >= 0.95,
            "manager_cpu_le_5pct_second_half": isinstance(ours["manager_cpu_pct_second_half"], (int, float))
                                                and ours["manager_cpu_pct_second_half"] <= 5.0,
        },
        "note": "residency sampled once a second with move_pages(2) status queries; "
                "QEMU TCG does not emulate the tiers' latency, so mups does not "
                "reflect placement: a fraction below 1 is the manager's overhead",
    }
    return res


res = report(l2, l1_paging)
if mode == "nested":
    thp_l2, thp_paging = load("tiering-gups-thp")
    if thp_l2:
        t = report(thp_l2, thp_paging)
        # the figures that differ with huge entries; the rest is as above
        res["thp_on"] = {k: t[k] for k in ("throughput_fraction", "gups_mups", "thp",
                                           "scenario_result", "issue_targets")}
        res["thp_on"]["ours"] = {k: t["ours"].get(k) for k in (
            "t60_ms", "t90_ms", "final_hot_fmem_pct", "manager_cpu_pct_of_one_vcpu",
            "manager_cpu_pct_second_half", "promoted_pages", "demoted_pages",
            "failed_pages", "failed_why")}
        res["thp_on"]["hot_density_ratio"] = t["workload"]["hot_density_ratio"]
    else:
        res["thp_on"] = "no result from the tiering-gups-thp scenario"
else:
    res["thp_on"] = "not run (nested mode only: BENCH_TIERING_MODE=nested)"
print(json.dumps(res, separators=(",", ":")))
PY

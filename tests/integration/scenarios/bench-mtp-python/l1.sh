# shellcheck shell=sh
# bench-mtp-python (scripts/bench.sh mtp): the mtp-python scenario with both
# workloads (NetworkX, SQLAlchemy ORM) and FMem limited to 25, 50 and 75 %
# of each workload's RSS, every phase (none, mtp, numab) at each size, all
# in one L2 boot. TB_MTP_BENCH_APPEND adds L2 command line keys.
# NetworkX runs 16 rounds (the scenario 10): with 6, a phase got 1-3 DAMON
# samples and a size's verdict swung from run to run (docs/mtp.md); 16 gives
# 7-12 samples a phase. A fourth phase, mtpdef, runs MTP at its native
# sampling and migration shares (the scenario's mtp phase gives it the
# testbed's larger ones). TB_MTP_BENCH_APPEND overrides these keys.
# The L1 has no environment from the host: scripts/bench/mtp.sh passes
# TB_MTP_BENCH_APPEND as L1 kernel command line keys (--l1-append), and
# every tb.mtp_* key there goes after these (the L2 takes the last).
extra=""
# shellcheck disable=SC2013 # words, not lines
for arg in $(cat /proc/cmdline); do
    case $arg in tb.mtp_*) extra="$extra $arg" ;; esac
done
TB_MTP_APPEND="tb.mtp_workloads=nx,orm tb.mtp_pcts=25,50,75 tb.mtp_rounds=16 tb.mtp_phases=none,mtp,numab,mtpdef tb.mtp_nx_size=900 tb.mtp_orm_size=1000$extra"
# shellcheck source=../mtp-python/l1.sh
. "$TB_SCENARIO_DIR/../mtp-python/l1.sh"

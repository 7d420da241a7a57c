# shellcheck shell=sh
# bench-mtp-python (scripts/bench.sh mtp): the mtp-python scenario with both
# workloads (NetworkX, SQLAlchemy ORM) and FMem limited to 25, 50 and 75 %
# of each workload's RSS, every phase (none, mtp, numab) at each size, all
# in one L2 boot. TB_MTP_BENCH_APPEND adds L2 command line keys.
# Smaller runs than the scenario's (20 runs in one L2 boot under nested TCG
# take 15-25 min): TB_MTP_BENCH_APPEND overrides these keys.
TB_MTP_APPEND="tb.mtp_workloads=nx,orm tb.mtp_pcts=25,50,75 tb.mtp_rounds=6 tb.mtp_nx_size=900 tb.mtp_orm_size=1000 ${TB_MTP_BENCH_APPEND:-}"
# shellcheck source=../mtp-python/l1.sh
. "$TB_SCENARIO_DIR/../mtp-python/l1.sh"

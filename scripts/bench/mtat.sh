#!/usr/bin/env bash
# MTAT benchmark (issue 15), in simulation: the static, hotness and mtat
# policies of tier-policy on the same simulated host and load traces
# (LC load 20/50/80 % and three passes of the paper's Fig. 7 pattern;
# every policy with the daemon's early decision on an SLO violation, and
# mtat once more deciding only at the interval and once without its rise
# reserve; the all-FMem floor on Fig. 7 and Fig. 7 scaled to the load
# all-FMem sustains): SLO violation rate,
# LC max sustainable load against the all-FMem case, BE fairness and
# throughput against hotness, SA against brute force, and decision time
# and CPU at 8, 64 and 256 VMs. A calibration check comes first in the
# output: hotness must show the paper's Table 4 violation pattern. Each
# summary has its per-VM mean shares and NP (`vms`); `mtat_lc_only` is the
# paper's "MTAT (LC Only)" (mtat's LC sizing, the rest split by access
# rate), beside Table 3's 80 % figures (`paper_table3_80`) and the best BE
# fairness any split can reach at 80 % with the LC VM at the smallest
# share that meets its SLO (`be_fairness_ceiling_80`).
#
# Uses the pretrained LC model policy/models/lc-sac.safetensors;
# BENCH_MTAT_RETRAIN=1 trains a fresh one first with the command that made
# it (the same seed gives the same file; one thread is the faster, ~1.5 min).
# Prints one JSON line on stdout (progress on stderr).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/tier-policy
cargo build --release --locked -q -p tier-policy >&2
MODEL=$ROOT/policy/models/lc-sac.safetensors
if [[ ${BENCH_MTAT_RETRAIN:-0} == 1 || ! -f $MODEL ]]; then
    mkdir -p "$ROOT/build"
    MODEL=$ROOT/build/lc-sac.safetensors
    echo "training the LC agent in the simulator -> $MODEL" >&2
    RAYON_NUM_THREADS=1 "$BIN" train --out "$MODEL" --episodes 1200 --seed 5 >&2
fi
exec "$BIN" bench --model "$MODEL"

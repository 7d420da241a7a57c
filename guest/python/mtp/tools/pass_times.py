#!/usr/bin/env python3
"""Times MTP's O(tracked objects) passes on a testbed workload's state.

Builds the state of `testbed_workload.py nx|orm` (no rounds), then times
marking passes (the first one creates every entry, later ones find them)
and migration-round folds (`update_pages`: every tracked object's heat,
per-page sums, page location), and prints one JSON line with the minimum
of each and the metadata they leave. Minimums, because other jobs on the
host add noise only upwards.

    python3 tools/pass_times.py orm --size 1000 --repeat 5

Needs the workload's packages (networkx or sqlalchemy) and mtp installed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import testbed_workload as tw

from mtp import _core
from mtp._coefficients import MODEL


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=("nx", "orm"))
    p.add_argument("--size", type=int, default=1000, help="graph nodes / customers")
    p.add_argument("--repeat", type=int, default=5, help="later passes and folds timed")
    args = p.parse_args()
    if args.size < 10 or args.repeat < 1:
        p.error("--size must be >= 10 and --repeat >= 1")

    rng = random.Random(7)
    build = tw.nx_build if args.workload == "nx" else tw.orm_build
    state = build(args.size, rng)
    _core.enable(MODEL)
    try:
        first, r = timed(_core.mark, 0, 0)
        later = min(timed(_core.mark, 0, 0)[0] for _ in range(args.repeat))
        for _ in range(3):
            _core.sample(1 << 16)
        fold = min(timed(_core.update_pages, 0.5, [])[0] for _ in range(args.repeat))
        c = _core.counters()
    finally:
        _core.disable()
    print(json.dumps({
        "workload": args.workload, "size": args.size,
        "objects_added_first_pass": r["added"], "visits": r["visited"],
        "first_pass_ms": round(1000 * first, 1), "later_pass_min_ms": round(1000 * later, 1),
        "fold_min_ms": round(1000 * fold, 1), "objects_tracked": c["objects_tracked"],
        "metadata_bytes": c["metadata_bytes"], "pages_tracked": c["pages_tracked"],
    }))
    del state
    return 0


if __name__ == "__main__":
    sys.exit(main())

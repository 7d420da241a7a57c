#!/usr/bin/env python3
"""How many of a NetworkX graph's pages MTP finds hot, against a known truth.

The workload of the mtp-python scenario (tools/testbed_workload.py, `nx`):
cold records built first and never read again, then a graph every round
walks (BFS, Dijkstra, k-core, Louvain). Truth per page: a page holding the
header of an object reachable from the graph is hot, one holding only cold
records' objects is cold (pages holding both are left out). Runs the rounds
under MTP (one-node host: nothing moves; the page table is what is
measured) and prints one JSON line: the share of each kind of page at
temperature >= 2 (bucket >= 1, what the threshold can promote) and the mean
temperature, with and without the frame sampler. Needs networkx.

    python3 tools/hot_pages_nx.py [--nodes 1200] [--seconds 6]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testbed_workload as tw  # noqa: E402

import mtp  # noqa: E402
from mtp import _core  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def reach(root) -> dict:
    """Objects reachable from root through containers and NetworkX objects
    (not through types, functions or modules: they reach everything)."""
    seen, stack = {}, [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen[id(o)] = o
        if isinstance(o, (dict, list, tuple, set, frozenset)) or \
                type(o).__module__.startswith("networkx"):
            stack.extend(c for c in gc.get_referents(o) if not isinstance(c, type))
    return seen


def header_pages(objs: dict) -> set:
    return {(id(o) - (16 if gc.is_tracked(o) else 0)) & ~(PAGE - 1)
            for o in objs.values() if not isinstance(o, int)}


def run(nodes: int, seconds: float, frame_samples: int) -> dict:
    rng = random.Random(7)
    cold, g = tw.nx_build(nodes, rng)
    hot_objs, cold_objs = reach(g), reach(cold)
    hot, cold_p = header_pages(hot_objs), header_pages(cold_objs)
    hot, cold_p = hot - cold_p, cold_p - hot
    digest = tw.Digest()
    mtp.start(mask=None, mem_pressure=float("inf"), sample_interval=0.1,
              tuning=mtp.Tuning(frame_samples=frame_samples, samples_per_migration=4))
    t, i = time.perf_counter(), 0
    while time.perf_counter() - t < seconds:
        tw.nx_round(g, rng, i, 5, digest)
        i += 1
    for _ in range(4):
        mtp._tick()  # ends with a migration round: the table is current
    temp = {p: t for p, t, _ in _core.page_table()}
    s = mtp.end()

    def summary(pages):
        known = [p for p in pages if p in temp]
        return {"pages": len(known),
                "share_hot": round(sum(temp[p] >= 2 for p in known) / max(1, len(known)), 3),
                "mean_temp": round(sum(temp[p] for p in known) / max(1, len(known)), 3)}

    return {"frame_samples": frame_samples, "rounds": i, "graph": summary(hot),
            "cold_records": summary(cold_p),
            "bytes_per_object": round(s["metadata_bytes"] / max(1, s["objects_tracked"]), 1),
            "objects_tracked": s["objects_tracked"], "sweeps": s["samples"],
            "frame_looks": s["frame_samples"], "time_sampling": round(s["time_sampling"], 3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1200)
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    if args.nodes < 10 or args.seconds <= 0:
        p.error("--nodes must be >= 10 and --seconds > 0")
    print(json.dumps({"refcounts_only": run(args.nodes, args.seconds, 0),
                      "with_frame_sampler": run(args.nodes, args.seconds, 16)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

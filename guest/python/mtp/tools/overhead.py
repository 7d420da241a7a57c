#!/usr/bin/env python3
"""MTP's CPU and memory overhead on NetworkX workloads (the paper's Table 3
graph algorithms), and whether results are identical with and without it.

Each workload runs twice in one process, without and with MTP
(mem_pressure infinite so that MTP always works; sample_interval as
given). Prints one JSON line per workload: runtimes, MTP's marking,
sampling and migration time as a share of the traced runtime (paper Fig. 7:
marking <= 8.3 %), metadata bytes as a share of the process RSS (paper:
<= 6.4 %), objects tracked, and whether both results are equal.

    python3 tools/overhead.py --nodes 20000 --interval 0.25
"""

from __future__ import annotations

import argparse
import json
import random
import time

import networkx as nx

import mtp


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def make_graph(nodes: int, seed: int) -> nx.Graph:
    g = nx.gnm_random_graph(nodes, nodes * 5, seed=seed)
    rng = random.Random(seed)
    for u, v in g.edges():
        g[u][v]["weight"] = rng.randint(1, 10)
    return g


def bfs(g, rng):
    return sum(1 for _ in nx.bfs_edges(g, rng.randrange(len(g))))


def shortest_paths(g, rng):
    src = rng.randrange(len(g))
    return sorted(nx.single_source_dijkstra_path_length(g, src).items())[:1000]


def kcore(g, rng):
    return sorted(nx.k_core(g, k=6).nodes())


def louvain(g, rng):
    return sorted(sorted(c) for c in nx.community.louvain_communities(g, seed=1))


WORKLOADS = {"bfs": bfs, "sp": shortest_paths, "kc": kcore, "lc": louvain}


def run(name, g, seed, reps, traced, interval):
    rng = random.Random(seed)
    if traced:
        mtp.start(mem_pressure=float("inf"), sample_interval=interval)
    t = time.perf_counter()
    result = [WORKLOADS[name](g, rng) for _ in range(reps)]
    took = time.perf_counter() - t
    stats = mtp.end() if traced else None
    return result, took, stats


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=20000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--interval", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = p.parse_args()
    g = make_graph(args.nodes, args.seed)
    for name in args.workloads:
        if name not in WORKLOADS:
            p.error(f"unknown workload {name}; known: {', '.join(WORKLOADS)}")
        plain, t_plain, _ = run(name, g, args.seed, args.reps, False, args.interval)
        rss = rss_bytes()
        traced, t_mtp, s = run(name, g, args.seed, args.reps, True, args.interval)
        print(json.dumps({
            "workload": name, "nodes": args.nodes, "runtime_plain_s": round(t_plain, 3),
            "runtime_mtp_s": round(t_mtp, 3), "slowdown": round(t_mtp / t_plain, 3),
            "marking_share": round(s["time_marking"] / t_mtp, 4),
            "sampling_share": round(s["time_sampling"] / t_mtp, 4),
            "migrating_share": round(s["time_migrating"] / t_mtp, 4),
            "metadata_share_of_rss": round(s["metadata_bytes"] / rss, 4),
            "objects_tracked": s["objects_tracked"], "rss_bytes": rss,
            "markings": s["markings"], "samples": s["samples"],
            "identical": traced == plain, "last_error": s["last_error"],
        }), flush=True)


if __name__ == "__main__":
    main()

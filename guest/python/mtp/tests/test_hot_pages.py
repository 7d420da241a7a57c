"""Hot-page identification against a known truth: a graph that every round
walks (reads through dicts, no reference held across sweeps) beside cold
records never read again. The net refcount change alone finds almost none
of the graph's pages; the frame sampler finds most of them, and neither
heats the cold records."""

import gc
import time

import mtp
from mtp import _core

PAGE = 4096


def build(nodes=2000, degree=4):
    cold = [{"id": i, "name": f"rec-{i}", "tags": [i % 7, i % 11]} for i in range(nodes * 8)]
    adj = {u: {} for u in range(nodes)}
    for u in range(nodes):
        for k in range(1, degree + 1):
            v = (u * 7 + k * 131) % nodes
            adj[u][v] = adj[v][u] = {"w": k}
    return cold, adj


def bfs(adj, s):
    # as NetworkX does: the neighbour dict in a local (an iterator alone sits
    # on the value stack, which the frame sampler cannot read)
    seen, queue, total = {s}, [s], 0
    for u in queue:
        nbrs = adj[u]
        for v, e in nbrs.items():
            total += e["w"]
            if v not in seen:
                seen.add(v)
                queue.append(v)
    return total


def header_pages(objs):
    return {(id(o) - (16 if gc.is_tracked(o) else 0)) & ~(PAGE - 1) for o in objs}


def measure(frame_samples):
    cold, adj = build()
    hot_objs = [adj] + list(adj.values()) + [e for d in adj.values() for e in d.values()]
    cold_objs = cold + [r["tags"] for r in cold]
    hot, cold_pages = header_pages(hot_objs), header_pages(cold_objs)
    hot, cold_pages = hot - cold_pages, cold_pages - hot
    mtp.start(mask=None, mem_pressure=float("inf"), sample_interval=0.05,
              tuning=mtp.Tuning(frame_samples=frame_samples, samples_per_migration=2,
                                max_sampling_share=0.5))
    t, x, s = time.perf_counter(), 0, 0
    while time.perf_counter() - t < 3.0:
        x += bfs(adj, s % len(adj))
        s += 1
    mtp._tick()
    mtp._tick()  # a migration round folds the last histories into the table
    temp = {p: t for p, t, _ in _core.page_table()}
    mtp.end()
    assert x

    def share(pages):
        known = [p for p in pages if p in temp]
        assert len(known) >= len(pages) // 2
        return sum(temp[p] >= 2 for p in known) / len(known)  # bucket >= 1

    return share(hot), share(cold_pages)


def test_frame_sampler_finds_the_walked_graph():
    hot, cold = measure(frame_samples=16)
    # what the stock-interpreter refcount signal sees on its own (docs/mtp.md)
    hot_refcounts, cold_refcounts = measure(frame_samples=0)
    assert hot >= 0.3, f"{hot:.0%} of the graph's pages found hot"
    assert hot >= 3 * hot_refcounts, (hot, hot_refcounts)
    assert cold <= 0.05 and cold_refcounts <= 0.05, (cold, cold_refcounts)

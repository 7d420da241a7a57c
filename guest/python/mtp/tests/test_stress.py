"""Start/end cycles under a multi-threaded allocating workload, and program
results that do not depend on MTP."""

import hashlib
import json
import random
import sys
import threading

import mtp

FAST = 0.01


def churn(stop, seed, out):
    rng = random.Random(seed)
    live = {}
    n = 0
    while not stop.is_set():
        key = rng.randrange(1000)
        if key in live and rng.random() < 0.5:
            del live[key]
        else:
            live[key] = [rng.random() for _ in range(rng.randrange(1, 10))]
        n += 1
    out.append(n)


def test_100_cycles_while_threads_allocate_and_free():
    stop = threading.Event()
    counts = []
    # hand the GIL around 5x more often than the default: more interleaving
    # of MTP's phases with the workers, and less waiting for the main thread
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    workers = [threading.Thread(target=churn, args=(stop, s, counts)) for s in range(3)]
    for w in workers:
        w.start()
    try:
        for i in range(100):
            mtp.start(mem_pressure=float("inf"), sample_interval=FAST)
            for _ in range(1 + i % 5):
                mtp._tick()
            s = mtp.end()
            assert s["last_error"] is None, s["last_error"]
    finally:
        stop.set()
        for w in workers:
            w.join()
        sys.setswitchinterval(old_interval)
    assert len(counts) == 3 and min(counts) > 0


def workload(seed):
    """Deterministic object-heavy work: graph, records, text."""
    rng = random.Random(seed)
    graph = {i: set() for i in range(3000)}
    for _ in range(12000):
        a, b = rng.randrange(3000), rng.randrange(3000)
        graph[a].add(b)
        graph[b].add(a)
    dist = {0: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(graph[u]):
                if v not in dist:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    records = [{"id": i, "name": f"n{rng.random():.6f}", "tags": [rng.randrange(9)] * 3}
               for i in range(20000)]
    records.sort(key=lambda r: (r["name"], r["id"]))
    text = json.dumps([dist, records[:500]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def test_results_identical_with_and_without_mtp():
    plain = [workload(s) for s in range(3)]
    with mtp.tiering(mem_pressure=float("inf"), sample_interval=FAST):
        traced = []
        for s in range(3):
            traced.append(workload(s))
            mtp._tick()
        s = mtp.stats()
    assert traced == plain
    assert s["samples"] > 0 and s["last_error"] is None

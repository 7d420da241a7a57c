"""Runs inside a two-node guest (node 1 memory-only): MTP must demote cold
pages to node 1, then promote pages whose objects turned hot, with
move_pages(2) for real. Prints MTP-CHECK PASS/FAIL and the stats."""

import ctypes
import json
import sys

import mtp
from mtp import _topology


def pages_on(node):
    total = 0
    with open("/proc/self/numa_maps") as f:
        for line in f:
            for field in line.split():
                if field.startswith(f"N{node}="):
                    total += int(field[len(f"N{node}="):])
    return total


def nodes_of(pages):
    """{page: node} for @pages (addresses), from move_pages(2)."""
    pages = sorted(pages)
    libc = ctypes.CDLL(None, use_errno=True)
    arr = (ctypes.c_void_p * len(pages))(*pages)
    status = (ctypes.c_int * len(pages))()
    sys_move_pages = 279  # x86-64
    if libc.syscall(sys_move_pages, 0, len(pages), arr, None, status, 0) != 0:
        raise OSError(ctypes.get_errno(), "move_pages query failed")
    return dict(zip(pages, status))


def fmem_share(pages):
    """Share of @pages on node 0."""
    nodes = nodes_of(pages)
    return sum(n == 0 for n in nodes.values()) / len(nodes)


def heat(objs, rounds):
    """Hold and drop references across samples: a net refcount change."""
    held = []
    for r in range(rounds):
        held = list(objs) * 3 if r % 2 == 0 else []
        mtp._tick()
    return held


def main():
    slow = _topology.slow_nodes(None)
    if slow != {1}:
        print(f"MTP-CHECK FAIL: expected node 1 memory-only, got {slow}")
        return 1
    per_round = mtp.Tuning().samples_per_migration
    cold = [[i, str(i)] for i in range(150_000)]
    # Ticks back to back, no program time between them: the time bounds
    # (per-round budget, migration share) would defer most of the rounds
    # this check is about; test_migration_budget.py covers them.
    # MTP demotes only what promotions (and free FMem below fmem_reserve)
    # need, and node 0 here is mostly free: the first session has a reserve
    # beyond node 0's size, so FMem counts as full and every round demotes
    # what is cold; the second has the default reserve, so the pages that
    # turn hot come back into free FMem.
    tuning = mtp.Tuning(max_migration_ms=None, max_migration_share=1.0, fmem_reserve=1 << 40)
    mtp.start(mask=[1], mem_pressure=float("inf"), sample_interval=3600, tuning=tuning)
    before = pages_on(1)
    for _ in range(3 * per_round):
        mtp._tick()
    s1 = mtp.end()
    after_demote = pages_on(1)
    # Heat objects that were demoted: only promotion brings them back. The
    # bookkeeping holds addresses, not references: a reference held on every
    # object would itself be a refcount change MTP sees.
    ids = [id(o) for o in cold]
    nodes = nodes_of({i & ~4095 for i in ids})
    heated_ids = set([i for i in ids if nodes[i & ~4095] == 1][:30_000])
    heated = [o for o in cold if id(o) in heated_ids]
    heated_pages = {i & ~4095 for i in heated_ids}
    rest_pages = {i & ~4095 for i in ids if i not in heated_ids} - heated_pages
    del ids
    tuning = mtp.Tuning(max_migration_ms=None, max_migration_share=1.0)
    mtp.start(mask=[1], mem_pressure=float("inf"), sample_interval=3600, tuning=tuning)
    held = heat(heated, 4 * per_round)
    s2 = mtp.end()
    hot_share, cold_share = fmem_share(heated_pages), fmem_share(rest_pages)
    del held
    after_promote = pages_on(1)
    print(json.dumps({"numa_maps_N1": [before, after_demote, after_promote],
                      "heated_objects": len(heated),
                      "pages_heated_rest": [len(heated_pages), len(rest_pages)],
                      "fmem_share_heated": round(hot_share, 3),
                      "fmem_share_rest": round(cold_share, 3),
                      "demoted": [s1["pages_demoted"], s2["pages_demoted"]],
                      "promoted": [s1["pages_promoted"], s2["pages_promoted"]],
                      "failures": s2["move_failures_by_errno"],
                      "pages_by_node": s2["pages_by_node"], "threshold": s2["threshold"],
                      "migration": s2["migration"], "last_error": s2["last_error"]}))
    # cold pages left FMem, the pages of objects that turned hot came back
    ok = (s1["pages_demoted"] > 0 and after_demote > before and len(heated) >= 1000
          and s2["pages_promoted"] > 0 and s2["last_error"] is None
          and hot_share >= 0.8 and cold_share <= 0.2)
    print("MTP-CHECK", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

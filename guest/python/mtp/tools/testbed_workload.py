#!/usr/bin/env python3
"""One workload run of the mtp-python testbed scenario, with or without MTP.

Both workloads first build a cold part (records the program keeps but no
longer reads), then a hot part they work on for `--rounds` rounds, so that
under a first-touch policy the cold part fills FMem and the hot part starts
in SMem (as the paper's long-running services after their warm-up):

  nx   NetworkX (paper Table 3): a random graph; each round runs BFS,
       single-source Dijkstra, k-core and (every --louvain-every rounds)
       Louvain communities.
  orm  SQLAlchemy ORM on in-memory SQLite: customers and orders mapped to
       objects in one session; each round queries and updates the orders
       of a hot subset of customers.

Prints "@@MTPW ready" (cold and hot parts built, rounds about to start) and
at the end one JSON line "@@MTPW {...}" with the digest of every result
(must be identical with and without MTP), runtime, CPU time, peak RSS and
MTP's stats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import sys
import time


def status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def since_process_start() -> float:
    """Seconds since this process started (exec), for aligning an outside
    monitor's samples with the rounds."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")


class Digest:
    def __init__(self):
        self.h = hashlib.sha256()

    def add(self, value) -> None:
        self.h.update(repr(value).encode())


# ---- NetworkX -------------------------------------------------------------
def nx_build(size: int, rng: random.Random):
    import networkx as nx

    cold = [{"id": i, "name": f"doc-{i}", "tags": [i % 7, i % 11], "score": i * 0.5}
            for i in range(size * 16)]
    g = nx.gnm_random_graph(size, size * 4, seed=rng.randrange(1 << 30))
    for u, v in g.edges():
        g[u][v]["weight"] = rng.randint(1, 9)
    return cold, g


def nx_round(g, rng: random.Random, i: int, louvain_every: int, digest: Digest) -> None:
    import networkx as nx

    src = rng.randrange(len(g))
    digest.add(sum(1 for _ in nx.bfs_edges(g, src)))
    dist = nx.single_source_dijkstra_path_length(g, src)
    digest.add(sorted(dist.items())[:200])
    digest.add(len(nx.k_core(g, k=4)))
    if louvain_every and i % louvain_every == 0:
        comms = nx.community.louvain_communities(g, seed=i)
        digest.add(sorted(len(c) for c in comms))


# ---- SQLAlchemy -----------------------------------------------------------
def orm_build(size: int, rng: random.Random):
    from sqlalchemy import Column, ForeignKey, Integer, String, create_engine
    from sqlalchemy.orm import Session, declarative_base, relationship

    Base = declarative_base()

    class Customer(Base):
        __tablename__ = "customer"
        id = Column(Integer, primary_key=True)
        name = Column(String(40))
        orders = relationship("Order", back_populates="customer")

    class Order(Base):
        __tablename__ = "orders"
        id = Column(Integer, primary_key=True)
        customer_id = Column(Integer, ForeignKey("customer.id"))
        amount = Column(Integer)
        customer = relationship(Customer, back_populates="orders")

    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    session = Session(engine, expire_on_commit=False)
    customers = [Customer(id=i, name=f"customer-{i}") for i in range(size)]
    session.add_all(customers)
    for c in customers:
        for k in range(4):
            c.orders.append(Order(amount=rng.randint(1, 1000) + k))
    session.commit()
    # the cold part: every customer and order object stays in the
    # session's identity map; the hot part: a tenth of the customers
    hot = rng.sample(customers, max(1, size // 10))
    return (session, Order), hot


def orm_round(state, hot, rng: random.Random, i: int, digest: Digest) -> None:
    from sqlalchemy import func, select

    session, order_cls = state
    total = 0
    for c in hot:
        for o in c.orders:
            o.amount = (o.amount * 31 + i) % 1000
            total += o.amount
    session.flush()
    digest.add(total)
    ids = [c.id for c in rng.sample(hot, min(50, len(hot)))]
    q = select(order_cls.customer_id, func.sum(order_cls.amount)).where(
        order_cls.customer_id.in_(ids)).group_by(order_cls.customer_id).order_by(order_cls.customer_id)
    digest.add(session.execute(q).all())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=("nx", "orm"))
    p.add_argument("--size", type=int, default=3000, help="graph nodes / customers")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--louvain-every", type=int, default=5, help="0 = never")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--mtp", action="store_true", help="run the rounds under MTP")
    p.add_argument("--mask", default="1", help="slow-tier nodes, comma-separated; \"\" = all")
    p.add_argument("--pressure-mb", type=float, default=float("inf"),
                   help="MTP works while FMem free memory is below this")
    p.add_argument("--interval", type=float, default=0.5, help="MTP sample interval (s)")
    p.add_argument("--fmem-reserve-mb", type=float, default=64.0,
                   help="FMem MTP keeps free when promoting without demoting")
    p.add_argument("--samples-per-migration", type=int, default=8)
    p.add_argument("--sampling-share", type=float, default=None,
                   help="max_sampling_share (default: mtp.Tuning's)")
    p.add_argument("--migration-budget-ms", type=float, default=None,
                   help="move_pages time per migration round (default: mtp.Tuning's); "
                        "< 0 = unbounded")
    p.add_argument("--migration-share", type=float, default=None,
                   help="max_migration_share (default: mtp.Tuning's)")
    args = p.parse_args()
    if args.size < 10 or args.rounds < 1:
        p.error("--size must be >= 10 and --rounds >= 1")

    rng = random.Random(args.seed)
    digest = Digest()
    t0 = time.monotonic()
    if args.workload == "nx":
        cold, hot = nx_build(args.size, rng)
    else:
        cold, hot = orm_build(args.size, rng)
    t_built = time.monotonic()
    ready_s = since_process_start()
    print("@@MTPW ready", flush=True)

    stats = None
    cpu0 = time.process_time()
    if args.mtp:
        import mtp

        # "" = every memory-only node (none on a one-node host: MTP then
        # reports that it has nothing to do)
        mask = [int(n) for n in args.mask.split(",")] if args.mask else None
        pressure = args.pressure_mb * (1 << 20)
        knobs = {"fmem_reserve": int(args.fmem_reserve_mb * (1 << 20)),
                 "samples_per_migration": args.samples_per_migration}
        if args.sampling_share is not None:
            knobs["max_sampling_share"] = args.sampling_share
        if args.migration_share is not None:
            knobs["max_migration_share"] = args.migration_share
        if args.migration_budget_ms is not None:
            knobs["max_migration_ms"] = (None if args.migration_budget_ms < 0
                                         else args.migration_budget_ms)
        tuning = mtp.Tuning(**knobs)
        mtp.start(mask=mask, mem_pressure=pressure, sample_interval=args.interval, tuning=tuning)
    try:
        for i in range(args.rounds):
            if args.workload == "nx":
                nx_round(hot, rng, i, args.louvain_every, digest)
            else:
                orm_round(cold, hot, rng, i, digest)
    finally:
        if args.mtp:
            stats = mtp.end()
    t_end = time.monotonic()
    cpu = time.process_time() - cpu0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "workload": args.workload, "size": args.size, "rounds": args.rounds,
        "mtp": args.mtp, "digest": digest.h.hexdigest()[:32],
        "build_s": round(t_built - t0, 3), "rounds_s": round(t_end - t_built, 3),
        "rounds_cpu_s": round(cpu, 3), "maxrss_kb": ru.ru_maxrss,
        "rss_kb": status_kb("VmRSS"), "pid": os.getpid(), "ready_s": round(ready_s, 3),
    }
    if stats is not None:
        keep = ("objects_tracked", "metadata_bytes", "page_table_bytes", "pages_tracked",
                "pages_demoted", "pages_promoted", "move_failures", "markings",
                "markings_skipped", "markings_deferred", "samples", "migrations",
                "time_marking", "time_sampling", "time_migrating", "threshold", "migration",
                "pages_deferred", "migration_budget_hits", "migration_max_s",
                "frame_samples", "frame_hits", "time_frame_sampling", "sweep_wait",
                "last_error", "pages_by_node", "move_failures_by_errno",
                "migrations_deferred", "metadata_node", "metadata_bind_failures",
                "sweep_last_s", "sweep_last_read", "migrations_full", "objects_active")
        out["mtp_stats"] = {k: stats[k] for k in keep if k in stats}
    print("@@MTPW " + json.dumps(out, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

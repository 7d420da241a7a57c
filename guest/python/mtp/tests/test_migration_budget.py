"""The per-round migration time budget (Tuning.max_migration_ms): real
move_pages(2) calls on this host, to node 0 (where the pages already are, so
every call succeeds as a no-op move) or to a node that does not exist."""

import os

import pytest

import mtp
from mtp import _core
from mtp._coefficients import MODEL

NODE0 = "/sys/devices/system/node/node0"


@pytest.fixture
def core():
    _core.enable(MODEL)
    yield _core
    _core.disable()


def tracked_pages(core, n_objects=60000):
    """Tracks enough small objects to fill many more pages than one chunk."""
    data = [[i] for i in range(n_objects)]
    core.mark(0, 0)
    core.sample(1 << 16)
    core.sample(1 << 16)
    r = core.update_pages(1.0, [])
    assert r["query_errno"] == 0
    return data, r


def demote_all(core, budget_ms=None):
    # every page is on a fast node (no slow nodes named): threshold at the
    # top bucket demotes all the others, "to" node 0 where they already are.
    # A move forgets where the pages it moved are: locate them again first.
    assert core.update_pages(1.0, [])["query_errno"] == 0
    args = (_core.BUCKETS - 1, 0, 0, [], 1 << 20)
    return core.move(*args) if budget_ms is None else core.move(*args, budget_ms)


@pytest.mark.skipif(not os.path.isdir(NODE0), reason="no NUMA node 0 in sysfs")
def test_without_budget_every_selected_page_is_tried(core):
    data, _ = tracked_pages(core)
    m = demote_all(core)
    tried = m["demoted"] + m["demote_failed"]
    assert tried > 4 * _core.MOVE_CHUNK
    assert m["demote_deferred"] == 0
    # a negative budget is "no budget" too
    m2 = demote_all(core, -1.0)
    assert m2["demote_deferred"] == 0
    assert m2["demoted"] + m2["demote_failed"] == tried
    assert data


@pytest.mark.skipif(not os.path.isdir(NODE0), reason="no NUMA node 0 in sysfs")
def test_zero_budget_moves_exactly_one_chunk_and_defers_the_rest(core):
    data, _ = tracked_pages(core)
    selected = demote_all(core)
    total = selected["demoted"] + selected["demote_failed"]
    m = demote_all(core, 0.0)
    # progress guarantee: the first chunk always goes; nothing after it
    assert m["demoted"] + m["demote_failed"] == _core.MOVE_CHUNK
    assert m["demote_deferred"] == total - _core.MOVE_CHUNK
    assert m["promoted"] == 0 and m["promote_deferred"] == 0
    assert m["took_ms"] >= 0
    assert data


@pytest.mark.skipif(not os.path.isdir(NODE0), reason="no NUMA node 0 in sysfs")
def test_budget_bounds_the_time_of_a_round(core):
    data, _ = tracked_pages(core, 120000)
    m = demote_all(core, 5.0)
    # the deadline is checked before each chunk: a round overruns it by at
    # most one chunk (a few syscalls natively; generous for a loaded host)
    assert m["took_ms"] < 5.0 + 250.0
    tried = m["demoted"] + m["demote_failed"]
    assert tried >= _core.MOVE_CHUNK
    assert tried % _core.MOVE_CHUNK == 0 or m["demote_deferred"] == 0
    assert data


def test_bad_budget_is_a_clear_error(core):
    with pytest.raises(ValueError, match="budget_ms"):
        core.move(_core.BUCKETS - 1, 0, 0, [], 10, float("nan"))
    with pytest.raises(ValueError, match="budget_ms"):
        core.move(_core.BUCKETS - 1, 0, 0, [], 10, 1e12)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "10"])
def test_tuning_rejects_bad_budgets(bad):
    with pytest.raises(ValueError, match="max_migration_ms"):
        mtp.Tuning(max_migration_ms=bad)


def test_tuning_rejects_bad_max_pages():
    with pytest.raises(ValueError, match="max_pages"):
        mtp.Tuning(max_pages=-1)


def test_tuning_budget_reaches_the_tracer(two_nodes):
    """A whole round through the tracer with a zero budget: pages demoted to
    the fake topology's node 1 (missing on this host: counted failures) stop
    after one chunk and the rest is reported as deferred."""
    data = [[i] for i in range(60000)]
    # a reserve beyond the fake node 0's free memory: FMem counts as full,
    # so a round demotes every cold page (demotion is demand-driven)
    tuning = mtp.Tuning(samples_per_migration=1, max_migration_ms=0, fmem_reserve=1 << 40,
                        max_migration_share=1.0)
    mtp.start(mask=[1], mem_pressure=2 << 30, sample_interval=1e6, tuning=tuning)
    try:
        for _ in range(3):
            mtp._tick()
        s = mtp.stats()
    finally:
        mtp.end()
    assert s["migrations"] == 3
    assert s["pages_deferred"] > 0
    assert s["migration_budget_hits"] >= 1
    assert "left for the next round" in s["migration"] or s["migration_budget_hits"] > 0
    assert s["migration_max_s"] >= s["migration_last_s"] >= 0
    assert data


def test_migration_rounds_are_deferred_beyond_their_share():
    """Back-to-back ticks leave no program time: after the first round,
    every further one would take migration above a 1 % share."""
    data = [[i] for i in range(60000)]
    tuning = mtp.Tuning(samples_per_migration=1, max_migration_share=0.01)
    mtp.start(mem_pressure=float("inf"), sample_interval=1e6, tuning=tuning)
    try:
        for _ in range(4):
            mtp._tick()
        s = mtp.stats()
    finally:
        mtp.end()
    assert s["samples"] == 4
    assert s["migrations"] == 1
    assert s["migrations_deferred"] == 3
    assert data


@pytest.mark.parametrize("bad", [0, -0.1, 1.5])
def test_tuning_rejects_bad_migration_share(bad):
    with pytest.raises(ValueError, match="max_migration_share"):
        mtp.Tuning(max_migration_share=bad)

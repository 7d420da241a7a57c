"""Marking, sampling and the free hook, against the running interpreter."""

import gc
import sys

import pytest

from mtp import _core
from mtp._coefficients import MODEL


@pytest.fixture
def core():
    _core.enable(MODEL)
    yield _core
    _core.disable()


class Plain:
    pass


def test_marking_reaches_non_container_objects(core):
    big = 10**30 + 12345  # a non-GC object only reachable through the list
    holder = [big, "not interned " * 3]
    r = core.mark(0, 0)
    assert r["roots"] > 0 and r["added"] > 0
    assert core.history(holder) is not None
    assert core.history(big) is not None
    assert core.history(holder[1]) is not None


def test_marking_finds_untracked_containers(core):
    inner = {"a": 1}  # atomic-only dict: CPython untracks it
    gc.collect()
    outer = [inner]
    if gc.is_tracked(inner):
        pytest.skip("this interpreter keeps atomic dicts tracked")
    core.mark(0, 0)
    assert core.history(inner) is not None
    assert outer


def test_size_limit_cuts_large_containers(core):
    values = [10**20 + i for i in range(1000)]
    r = core.mark(0, 10)
    assert r["cut_size"] > 0
    tracked = sum(core.history(v) is not None for v in values)
    assert tracked < len(values)
    r = core.mark(0, 0)  # unbounded: everything is reached
    assert sum(core.history(v) is not None for v in values) == len(values)


def test_depth_limit_cuts_nesting(core):
    chain = (10**25,)
    for _ in range(50):
        chain = (chain,)  # tuples of tuples: tracked by the GC lazily
    r = core.mark(1, 0)
    assert r["visited"] > 0
    assert core.mark(0, 0)["cut_depth"] == 0


def test_freed_objects_are_dropped_not_read(core):
    objs = [Plain() for _ in range(500)] + [[i] for i in range(500)] + \
        [float(i) + 0.5 for i in range(500)]
    core.mark(0, 0)
    before = core.counters()
    assert all(core.history(o) is not None for o in objs)
    del objs
    gc.collect()
    after = core.counters()
    # every Plain and list went back to the allocator (floats may be kept
    # on a free list: then their block is still mapped and stays tracked)
    assert after["objects_freed"] - before["objects_freed"] >= 1000
    assert after["objects_tracked"] < before["objects_tracked"]
    core.sample(1000)  # must not touch freed blocks; no crash


def test_sampling_sees_refcount_changes(core):
    hot, cold = [10**22], [10**23]
    core.mark(0, 0)  # the baseline
    refs = []
    for rnd in range(4):
        # the net change between samples is what a stock interpreter shows
        refs = [hot] * 10 if rnd % 2 == 0 else []
        core.sample(1 << 16)
    del refs
    hist_hot, hist_cold = core.history(hot), core.history(cold)
    assert sorted(hist_hot)[-4:] == [10, 10, 10, 10]
    assert sum(hist_cold) == 0
    assert core.hotness(list(hist_hot), MODEL) >= core.hotness(list(hist_cold), MODEL)


def test_marking_sets_the_refcount_baseline(core):
    # a container (its refcount is +1 in gc.get_objects()'s list while the
    # pass runs) and a non-container, each held and quiet
    held_list, quiet_list = [7], [8]
    ints = [10**24 + 1, 10**24 + 2]  # reachable (a frame's locals are not)
    held_int, quiet_int = ints
    core.mark(0, 0)
    refs = [held_list] * 3 + [held_int] * 3
    core.sample(1 << 16)  # the first sweep already measures a change
    assert max(core.history(held_list)) == 3
    assert max(core.history(held_int)) == 3
    assert sum(core.history(quiet_list)) == 0
    assert sum(core.history(quiet_int)) == 0
    del refs


def test_marking_roots_include_frozen_objects(core):
    # gc.freeze() moves objects to the permanent generation, which
    # gc.get_objects() leaves out; a pre-forking server freezes its heap
    frozen = [[10**25 + i] for i in range(100)]  # held only by this frame
    gc.freeze()
    try:
        core.mark(0, 0)
        assert core.history(frozen) is not None
        assert all(core.history(x) is not None for x in frozen)
    finally:
        gc.unfreeze()


def test_update_pages_on_this_host(core):
    data = [[i] for i in range(20000)]
    core.mark(0, 0)
    for _ in range(3):
        core.sample(4096)
    r = core.update_pages(0.5, [])
    assert r["query_errno"] == 0
    assert r["pages"] > 0
    assert sum(r["histograms"]["fast"]) > 0 and sum(r["histograms"]["slow"]) == 0
    assert core.counters()["pages_tracked"] == r["pages"]
    assert data


def test_move_failures_are_counted_per_errno(core):
    data = [[i] for i in range(20000)]
    core.mark(0, 0)
    core.sample(4096)
    core.sample(4096)
    core.update_pages(1.0, [])
    # demote everything below the top bucket to a node that does not exist
    m = core.move(_core.BUCKETS - 1, 0, 63, [], 10)
    assert m["demoted"] == 0
    assert m["demote_failed"] > 0
    assert set(m["demote_errors"]) <= {"ENODEV", "EINVAL", "ENOENT", "EFAULT"}
    assert sum(m["demote_errors"].values()) == m["demote_failed"]
    assert data


def test_enable_twice_and_disable_without_enable():
    _core.enable(MODEL)
    try:
        with pytest.raises(RuntimeError):
            _core.enable(MODEL)
    finally:
        _core.disable()
    with pytest.raises(RuntimeError):
        _core.disable()
    with pytest.raises(RuntimeError):
        _core.mark(0, 0)


def test_allocator_restored_after_disable():
    import tracemalloc
    _core.enable(MODEL)
    _core.disable()
    tracemalloc.start()  # wraps whatever is installed now: must be the original
    x = [object() for _ in range(100)]
    assert tracemalloc.get_traced_memory()[0] > 0
    tracemalloc.stop()
    assert x


def test_tracemalloc_wrapping_us_keeps_working():
    import tracemalloc
    _core.enable(MODEL)
    tracemalloc.start()
    _core.mark(0, 0)
    _core.disable()  # cannot unhook under tracemalloc: stays a pass-through
    x = [object() for _ in range(100)]
    del x
    tracemalloc.stop()
    _core.enable(MODEL)  # and can be enabled again
    _core.mark(0, 0)
    _core.disable()
    assert sys.getrefcount(None) > 0

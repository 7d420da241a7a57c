"""Cheaper sweeps and migration rounds (docs/mtp.md, "Sweeps in slices"):
the active list, the idle objects read one slice per sweep, partial
migration rounds over the active objects, allocation heat, and free FMem
taking warm bucket-0 pages."""

import functools
import threading

import pytest

import mtp
from mtp import _core

MODEL = (0.0, 1.0, 1.0, 1.0, 1.0)  # page heat = median + std + non-zero + range
PAGE = 4096


class Rec:
    pass


@pytest.fixture
def core():
    _core.enable(MODEL)
    yield _core
    _core.disable()


def test_idle_objects_are_read_one_slice_per_sweep(core):
    recs = [Rec() for _ in range(20000)]
    core.mark(0, 0)
    tracked = core.counters()["objects_tracked"]
    for _ in range(_core.HISTORY + 1):  # a whole idle history: nothing active
        core.sample(1 << 16, 4)
    r = core.sample(1 << 16, 4)
    # about a quarter of the table (slices are equal in slots, not objects)
    assert r["sampled"] <= tracked // 4 + tracked // 10, r
    assert r["sampled"] + r["skipped"] == tracked
    # every object is read once over four sweeps
    read = r["sampled"] + sum(core.sample(1 << 16, 4)["sampled"] for _ in range(3))
    assert abs(read - tracked) <= tracked // 20
    del recs


def test_a_change_is_seen_within_a_rotation_and_then_every_sweep(core):
    recs = [Rec() for _ in range(5000)]
    core.mark(0, 0)
    for _ in range(_core.HISTORY + 1):
        core.sample(1 << 16, 4)
    held = [recs[1234]] * 3  # three references more on one idle object
    seen = False
    for _ in range(4):
        core.sample(1 << 16, 4)
        if max(core.history(recs[1234])) >= 3:
            seen = True
            break
    assert seen, "a changed idle object must be read within one rotation"
    active = core.counters()["objects_active"]
    assert active >= 1
    # now on the active list: the next sweep reads it again and records 3
    held.extend([recs[1234]] * 3)
    core.sample(1 << 16, 4)
    assert sorted(core.history(recs[1234]))[-2:] == [3, 3]
    # idle for a whole history: it leaves the list
    for _ in range(_core.HISTORY):
        core.sample(1 << 16, 4)
    assert max(core.history(recs[1234])) == 0
    # (an object off the list is read with its slice again; nothing else
    # here keeps refcounts moving, so the list empties)
    for _ in range(_core.HISTORY):
        core.sample(1 << 16, 4)
    assert core.counters()["objects_active"] <= active
    del held


def test_a_sighting_puts_an_idle_object_on_the_active_list(core):
    ready, go = threading.Event(), threading.Event()
    box = {}

    def work():
        one = Rec()
        box["one"] = one
        ready.set()
        go.wait()

    t = threading.Thread(target=work)
    t.start()
    ready.wait()
    try:
        core.mark(0, 0)
        for _ in range(_core.HISTORY + 1):
            core.sample(1 << 16, 1 << 20)  # slices so thin that no slice reads it
        core.sample_frames(64)
        core.sample(1 << 16, 1 << 20)
        assert max(core.history(box["one"])) >= 1
    finally:
        go.set()
        t.join()


def test_frames_sight_their_code_function_and_globals(core):
    ready, go = threading.Event(), threading.Event()
    ns = {}
    exec("def parked(ready, go):\n    ready.set()\n    go.wait()\n", ns)
    # through a partial, so that no frame's locals reach the function
    # within two references (the Thread's __dict__ would)
    t = threading.Thread(target=functools.partial(ns["parked"], ready, go))
    t.start()
    ready.wait()
    try:
        core.mark(0, 0)
        core.sample(1 << 16)
        for _ in range(4):
            core.sample_frames(64)
        core.sample(1 << 16)
        # read on every call and global lookup, never held across a sweep
        assert max(core.history(ns["parked"])) >= 4
        assert max(core.history(ns["parked"].__code__)) >= 4
        assert max(core.history(ns)) >= 4
    finally:
        go.set()
        t.join()


def test_partial_round_keeps_the_pages_of_idle_objects(core):
    recs = [Rec() for _ in range(5000)]
    core.mark(0, 0)
    for _ in range(_core.HISTORY + 1):
        core.sample(1 << 16, 4)
    full = core.update_pages(0.5, [], True)
    assert full["pages"] >= 10
    held = [recs[100]] * 4
    core.sample(1 << 16, 1)
    part = core.update_pages(0.5, [], False)
    # only the active objects' heat was summed, the table kept every page
    assert part["heat_entries"] < full["heat_entries"] // 10
    assert part["pages"] >= full["pages"]
    temps = {p: t for p, t, _ in core.page_table()}
    page = (id(recs[100]) - 16) & ~(PAGE - 1)
    assert temps[page] > 1.0
    del held


def test_fold_partial_keeps_unseen_pages():
    table = [(0x1000, 0.004), (0x2000, 8.0)]
    assert _core.fold(table, [(0x2000, 0.0)], 0.5, 0.01, True) == [(0x2000, 4.0)]
    assert _core.fold(table, [(0x2000, 0.0)], 0.5, 0.01, False) == \
        [(0x1000, 0.002), (0x2000, 4.0)]


def test_allocation_heat_reaches_pages_without_tracked_objects(core):
    core.mark(0, 0)
    core.set_alloc_every(1)
    core.update_pages(0.5, [], True, 1.0)  # empties the samples of the setup
    fresh = [Rec() for _ in range(2000)]  # allocated after the pass: untracked
    assert core.history(fresh[0]) is None
    assert core.counters()["alloc_samples_pending"] >= 2000
    core.update_pages(0.5, [], False, 1.0)
    assert core.counters()["alloc_samples_pending"] < 100  # the round took them
    temps = {p: t for p, t, _ in core.page_table()}
    pages = {(id(r) - 16) & ~(PAGE - 1) for r in fresh}
    warm = [p for p in pages if temps.get(p, 0) >= 2]
    assert len(warm) >= len(pages) // 2
    core.set_alloc_every(0)
    more = [Rec() for _ in range(100)]
    assert core.counters()["alloc_samples_pending"] == 0
    del more


def test_free_fmem_takes_warm_bucket0_pages():
    temps = [0.0, 0.5, 1.5, 0.1, 4.0, 0.0]
    nodes = [1, 1, 1, 1, 1, 0]
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100)
    assert promote == [4]  # without room: bucket 1 and above only
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100, 10)
    assert promote == [4, 2, 1]  # warmer first; no signal (0.0, 0.1) stays
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100, 2)
    assert promote == [4, 2]  # the room bounds the promotions
    with pytest.raises(ValueError):
        _core.plan(temps, nodes, [1], 1, 100, 1 << 60)


def test_demotion_takes_pages_without_signal_first():
    temps = [1.5, 0.0, 1.0, 0.1, 8.0]
    nodes = [0, 0, 0, 0, 1]
    _, demote, _ = _core.plan(temps, nodes, [1], 1, 100)
    assert demote == [1, 3, 0, 2]
    _, demote, _ = _core.plan(temps, nodes, [1], 1, 2)
    assert demote == [1, 3]


def test_demotion_makes_only_the_room_promotions_need():
    # three FMem pages without signal, one hot SMem page
    temps = [0.0, 0.1, 0.0, 8.0]
    nodes = [0, 0, 0, 1]
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100, 0)
    assert promote == [3] and demote == [0]  # FMem full: one out for one in
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100, 5)
    assert promote == [3] and demote == []  # free FMem takes it: nothing out
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100, -2)
    assert promote == [3] and demote == [0, 1, 2]  # plus the deficit below the reserve
    _, demote, promote = _core.plan(temps, nodes, [1], 1, 100)
    assert demote == [0, 1, 2]  # room unknown: every page below the threshold


def test_tuning_checks_the_new_knobs():
    with pytest.raises(ValueError):
        mtp.Tuning(sweep_slices=0)
    with pytest.raises(ValueError):
        mtp.Tuning(alloc_every=-1)
    with pytest.raises(ValueError):
        mtp.Tuning(alloc_heat=-1.0)
    with pytest.raises(ValueError):
        mtp.Tuning(sweep_slices=True)


def test_tracer_runs_partial_rounds_between_full_ones():
    mtp.start(mem_pressure=float("inf"), sample_interval=3600.0,
              tuning=mtp.Tuning(samples_per_migration=1, sweep_slices=4,
                                max_migration_share=1.0))
    for _ in range(8):
        mtp._tick()
    s = mtp.end()
    assert s["migrations"] == 8
    # the first round, and every fourth after it
    assert s["migrations_full"] == 2
    assert 0 < s["sweep_last_read"] < s["objects_tracked"]

"""The frame sampler (objects held by running frames) and the sampling
overhead bound (adaptive sweep and frame-sample waits)."""

import threading
import time

import pytest

import mtp
from mtp import _core
from mtp._tracer import adaptive_wait

MODEL = (0.0, 0.0, 0.0, 0.0, 0.0)


class Rec:
    pass


@pytest.fixture
def core():
    _core.enable(MODEL)
    yield _core
    _core.disable()


@pytest.fixture
def worker_holding():
    """A thread parked with a small list, a big list and a record in its locals."""
    ready, go = threading.Event(), threading.Event()
    held = {}

    def work():
        small = [Rec() for _ in range(4)]
        big = [Rec() for _ in range(1000)]
        one = Rec()
        held.update(small=small, big=big, one=one)
        ready.set()
        go.wait()
        return small, big, one

    t = threading.Thread(target=work)
    t.start()
    ready.wait()
    yield held
    go.set()
    t.join()


def test_frame_locals_are_seen_where_refcounts_do_not_move(core, worker_holding):
    held = worker_holding
    untouched = [Rec() for _ in range(4)]
    core.mark(0, 0)
    core.sample(1 << 16)  # the refcount baseline
    for _ in range(5):
        r = core.sample_frames(64)
        assert r["frames"] >= 1 and r["hits"] >= 1
    core.sample(1 << 16)
    # the worker's refcounts did not change: every change below is a sighting
    # (some objects are reached twice: as a local and through the closure cell)
    assert max(core.history(held["one"])) >= 5
    assert max(core.history(held["small"])) >= 5
    # a small container's items are looked at (two levels)
    assert all(max(core.history(x)) >= 5 for x in held["small"])
    # of a big container only the container itself: not all its items are hot
    assert max(core.history(held["big"])) >= 5
    assert all(max(core.history(x)) == 0 for x in held["big"])
    # objects no frame of another thread holds
    assert all(max(core.history(x)) == 0 for x in untouched)


def test_frame_sampler_skips_the_calling_thread(core):
    mine = Rec()
    core.mark(0, 0)
    core.sample(1 << 16)
    core.sample_frames(64)
    core.sample(1 << 16)
    assert max(core.history(mine)) == 0


def test_sighting_cancels_the_skip_of_an_idle_object(core, worker_holding):
    one = worker_holding["one"]
    core.mark(0, 0)
    for _ in range(_core.HISTORY + 1):  # a full idle history: it is skipped next
        core.sample(1 << 16)
    core.sample_frames(64)
    core.sample(1 << 16)
    assert max(core.history(one)) >= 1


def test_frame_sample_through_the_tracer(worker_holding):
    mtp.start(mem_pressure=float("inf"), sample_interval=3600.0)
    mtp._tick()  # marks
    mtp._sample_frames()
    s = mtp.end()
    assert s["frame_samples"] == 1 and s["frame_hits"] >= 1


@pytest.mark.parametrize("took,share", [(0.001, 0.05), (0.2, 0.05), (3.0, 0.1), (0.5, 0.5)])
def test_adaptive_wait_bounds_the_share(took, share):
    wait = adaptive_wait(0.5, took, share)
    assert wait >= 0.5
    assert took / (took + wait) <= share + 1e-12


def test_adaptive_wait_keeps_the_interval_when_cheap():
    assert adaptive_wait(0.5, 0.0, 0.05) == 0.5
    assert adaptive_wait(0.5, 0.01, 0.05) == 0.5


def test_bad_sampling_tuning():
    with pytest.raises(ValueError):
        mtp.Tuning(max_sampling_share=0)
    with pytest.raises(ValueError):
        mtp.Tuning(frame_samples=-1)


def test_sampling_share_is_bounded_in_a_real_run():
    # 10 ms interval, 400 000 tracked objects: an unbounded sweep every
    # interval would take most of the time
    data = [(i,) for i in range(200_000)]
    share = 0.04
    mtp.start(mem_pressure=float("inf"), sample_interval=0.01,
              tuning=mtp.Tuning(max_sampling_share=share, max_marking_share=1.0))
    t = time.perf_counter()
    x = 0
    while time.perf_counter() - t < 2.0:  # the program's own work
        x += sum(v[0] for v in data[:2000])
    elapsed = time.perf_counter() - t
    s = mtp.end()
    assert x
    assert s["samples"] >= 1 and s["frame_samples"] >= 1
    assert s["sweep_wait"] > 0.01  # the sweep wait stretched
    # the first sweep is paid before the bound applies; sweeps cost alike
    assert s["time_sampling"] <= share * elapsed + 2 * s["sweep_last_s"] + 0.02


def test_storage_of_dicts_and_lists():
    d = {i: i for i in range(100)}
    lst = list(range(100))
    assert _core.storage(d) not in (0, id(d))
    assert _core.storage(lst) not in (0, id(lst))
    assert _core.storage({}) == 0  # the shared empty table is not the dict's
    assert _core.storage(Rec()) == 0 and _core.storage(1.5) == 0


def test_a_hot_lists_item_array_page_is_heated(worker_holding):
    # the worker holds `big`, a list whose item array (8 KB) is a block of
    # its own: the reads through the list go there, not to its header
    big = worker_holding["big"]
    table_page = _core.storage(big) & ~4095
    header_page = (id(big) - 16) & ~4095
    assert table_page != header_page
    mtp.start(mask=None, mem_pressure=float("inf"), sample_interval=3600.0,
              tuning=mtp.Tuning(samples_per_migration=4))
    try:
        mtp._tick()  # marks, baseline sweep
        for _ in range(3):
            for _ in range(4):
                mtp._sample_frames()
            mtp._tick()  # the third sweep ends with a migration round
        temp = {p: t for p, t, _ in _core.page_table()}
    finally:
        mtp.end()
    assert temp.get(header_page, 0) > 0
    assert temp.get(table_page, 0) > 0


def test_frame_sampler_under_churning_threads_and_frames(core):
    """Threads start and end, recurse, run generators and raise while the
    sampler reads their frames: no crash, no change to their results."""
    stop = threading.Event()
    results = []

    def gen(n):
        acc = [Rec() for _ in range(3)]
        for i in range(n):
            yield i + len(acc)

    def rec(n):
        local = {"n": n, "items": [n] * 5}
        if n == 0:
            try:
                raise ValueError(local["items"][0])
            except ValueError as e:
                return e.args[0]
        return rec(n - 1) + local["n"]

    def churn():
        total = 0
        while not stop.is_set():
            total += sum(gen(20)) + rec(30)
            t = threading.Thread(target=lambda: sum(gen(5)))  # short-lived threads
            t.start()
            t.join()
        results.append(total >= 0)

    workers = [threading.Thread(target=churn) for _ in range(3)]
    for w in workers:
        w.start()
    core.mark(0, 0)
    deadline = time.perf_counter() + 2.0
    looks = 0
    while time.perf_counter() < deadline:
        core.sample_frames(64)
        looks += 1
        if looks % 50 == 0:
            core.sample(1 << 12)
            core.mark(0, 0)
    stop.set()
    for w in workers:
        w.join()
    assert results == [True] * 3 and looks > 100
    assert sum(gen(20)) == sum(range(20)) + 60 and rec(30) == sum(range(31))


def test_unaligned_static_objects_are_not_tracked_and_do_not_stop_marking(core):
    # small ints and the empty tuple live in the interpreter's data, some
    # only 8-byte aligned: no key for them, but what holds them is walked
    static = [o for o in (0, 1, 255, ()) if id(o) % 16]
    if not static:
        pytest.skip("every static object is 16-byte aligned in this build")
    holder = [[o, Rec()] for o in static]
    r = core.mark(0, 0)
    assert r["added"] > 0
    assert all(core.history(o) is None for o in static)
    assert all(core.history(h[1]) is not None for h in holder)

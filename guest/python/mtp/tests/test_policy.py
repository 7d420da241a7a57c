"""The decision arithmetic of policy.c and pages.c, through mtp._core."""

import math

import pytest

from mtp import _core

B = _core.BUCKETS


def test_features_are_median_std_nonzero_range():
    med, std, nonzero, rng = _core.features([0, 0, 4, 4, 8, 8, 0, 0])
    assert med == 2.0  # sorted 0 0 0 0 4 4 8 8
    assert std == pytest.approx(math.sqrt(((4 - 3) ** 2 * 2 + (8 - 3) ** 2 * 2 + 9 * 4) / 8))
    assert nonzero == 4
    assert rng == 8
    assert _core.features([3, 1, 2, 5, 4, 7, 6, 8])[0] == 4.5


def test_features_reject_bad_history():
    with pytest.raises(ValueError):
        _core.features([1, 2, 3])
    with pytest.raises(ValueError):
        _core.features([256] + [0] * 7)


def test_hotness_is_the_linear_model_and_never_negative():
    model = (1.0, 0.5, 0.25, 2.0, -0.125)
    f = _core.features([2, 2, 2, 2, 0, 0, 0, 8])
    expected = 1.0 + 0.5 * f[0] + 0.25 * f[1] + 2.0 * f[2] - 0.125 * f[3]
    assert _core.hotness([2, 2, 2, 2, 0, 0, 0, 8], model) == pytest.approx(expected)
    assert _core.hotness([0, 0, 0, 0, 0, 0, 0, 1], (-5.0, 0, 0, 0, 0)) == 0.0
    assert _core.hotness([0] * 8, (3.0, 1, 1, 1, 1)) == 3.0


def test_page_heat_is_the_model_without_its_intercept():
    model = (5.0, 0.5, 0.25, 2.0, -0.125)
    changes = [2, 2, 2, 2, 0, 0, 0, 8]
    assert _core.page_heat(changes, model) == pytest.approx(
        _core.hotness(changes, model) - 5.0)
    # an untouched object adds nothing to its page, whatever the prior
    assert _core.page_heat([0] * 8, model) == 0.0
    assert _core.page_heat([0, 0, 0, 0, 0, 0, 0, 9], (0, 0, 0, 0, -1.0)) == 0.0


@pytest.mark.parametrize("temp,bucket", [
    (0, 0), (1.99, 0), (2, 1), (3.9, 1), (4, 2), (511, 8), (512, 9), (1 << 40, 9),
    (-3, 0), (float("nan"), 0), (float("inf"), 9),
])
def test_histogram_buckets_are_exponential(temp, bucket):
    assert _core.bucket(temp) == bucket


def test_cooling_is_eq1():
    assert _core.cool(10.0, 2.0, 0.25) == pytest.approx(0.25 * 2 + 0.75 * 10)
    assert _core.cool(10.0, 2.0, 1.0) == 2.0


def test_page_table_folds_heat_with_cooling():
    page = 1 << 12
    table = [(page, 8.0), (3 * page, 1.0)]
    heat = [(page, 1.0), (page, 3.0), (2 * page, 5.0)]
    out = _core.fold(table, heat, 0.5, 0.75)
    # page 1: cooled with the summed heat 4; page 2: new, taken as is;
    # page 3: no objects this round, cools to 0.5 < 0.75 and is dropped
    assert out == [(page, 0.5 * 4 + 0.5 * 8), (2 * page, 5.0)]
    # repeated rounds without heat decay geometrically
    t = [(page, 64.0)]
    for _ in range(3):
        t = _core.fold(t, [], 0.5, 0.0)
    assert t == [(page, 8.0)]


@pytest.mark.parametrize("distinct", [1, 600, 5000])
def test_page_table_fold_sums_many_objects_per_page(distinct):
    """The per-page sums (a hash table that grows past its first 1 024
    slots, then a sort of the distinct pages) against a plain reference;
    page 0 and unaligned values too, as fold() accepts any page key."""
    import random
    rng = random.Random(distinct)
    pages = [0] + [rng.randrange(1, 1 << 47) for _ in range(distinct - 1)]
    heat = [(rng.choice(pages), float(rng.randrange(0, 8))) for _ in range(8 * distinct)]
    heat += [(p, 1.0) for p in pages]
    want = {}
    for p, h in heat:
        want[p] = want.get(p, 0.0) + h
    out = _core.fold([], heat, 0.5, 0.0)
    assert [p for p, _ in out] == sorted(want)
    assert all(t == pytest.approx(want[p]) for p, t in out)


def test_threshold_where_cold_fmem_outnumbers_hot_smem():
    fast = [5, 5, 0, 0, 0, 0, 0, 0, 0, 0]  # cold pages in FMem
    slow = [0, 0, 0, 3, 3, 0, 0, 0, 0, 0]  # hot pages in SMem
    # h=1: cold fast 5 < hot slow 6; h=2: 10 > 6
    assert _core.threshold(fast, slow) == 2
    # nothing in SMem: demote the coldest bucket only
    assert _core.threshold([4] + [0] * 9, [0] * B) == 1
    # nothing anywhere: no threshold
    assert _core.threshold([0] * B, [0] * B) == B
    # all hot pages already in FMem and none cold: nothing crosses
    assert _core.threshold([0] * 9 + [7], [0] * B) == B
    # everything in SMem, some of it hot: only room in FMem lets it back
    slow = [100, 0, 0, 5, 0, 0, 0, 0, 0, 0]
    assert _core.threshold([0] * B, slow) == B
    assert _core.threshold([0] * B, slow, 6) == 1  # promote buckets >= 1 only
    assert _core.threshold([0] * B, slow, 3) == 4  # too little room: nothing hot enough
    # room adds to the demotable pages
    assert _core.threshold(fast, slow_hot := [0, 0, 0, 3, 3, 0, 0, 0, 0, 0], 2) == 1
    assert slow_hot


def test_eagerness_and_threshold_adjustment():
    assert _core.zscore([1.0], 5.0) == 0.0  # too little history
    assert _core.zscore([2.0, 2.0, 2.0], 9.0) == 0.0  # flat history
    assert _core.zscore([1.0, 3.0], 4.0) == pytest.approx(2.0)
    assert _core.eagerness(0.5, 2.0, 3.0) == pytest.approx(3.0)
    assert _core.adjust_threshold(3, 1.0, 2.0, True) == 4  # less eager: fewer moves
    assert _core.adjust_threshold(3, 3.0, 2.0, True) == 3
    assert _core.adjust_threshold(3, 1.0, 2.0, False) == 3
    assert _core.adjust_threshold(B, 1.0, 2.0, True) == B


def test_marking_limits_tighten_when_marking_runs_long():
    limit = 0
    assert _core.next_limit(limit, 0.01, 0.1) == 0  # short: stays unbounded
    limit = _core.next_limit(limit, 0.5, 0.1)
    assert limit == 10  # first long pass
    limit = _core.next_limit(limit, 0.5, 0.1)
    assert limit == 5
    for _ in range(10):
        limit = _core.next_limit(limit, 0.5, 0.1)
    assert limit == 1  # never zero (which would mean unbounded)
    assert _core.next_limit(1, 0.07, 0.1) == 1  # between half and full budget
    limit = 1
    for _ in range(25):
        limit = _core.next_limit(limit, 0.001, 0.1)
    assert limit == 0  # relaxed back to unbounded


def test_marking_skipped_when_few_collections():
    assert _core.should_mark(10, 0, 4, 3)
    assert not _core.should_mark(1, 0, 4, 3)
    assert _core.should_mark(1, 3, 4, 3)  # moderate GC for several passes
    assert not _core.should_mark(0, 9, 4, 3)  # no GC at all: nothing new


def test_plan_on_an_injected_two_node_table():
    temps = [0.5, 700.0, 1.0, 40.0, 300.0, 0.0]
    nodes = [0, 0, 0, 1, 1, -1]  # last page unknown (not present)
    hist, demote, promote = _core.plan(temps, nodes, [1], 3, 100)
    assert hist["fast"][0] == 2 and hist["fast"][9] == 1
    assert hist["slow"][5] == 1 and hist["slow"][8] == 1
    assert hist["nodes"] == {0: hist["fast"], 1: hist["slow"]}
    assert sorted(demote) == [0, 2]  # FMem pages below bucket 3
    assert promote == [4, 3]  # SMem pages, hottest bucket first
    _, demote, promote = _core.plan(temps, nodes, [1], 3, 1)
    assert len(demote) == 1 and promote == [4]
    _, demote, promote = _core.plan(temps, nodes, [1], B, 100)
    assert demote == [] and promote == []
    with pytest.raises(ValueError):
        _core.plan(temps, nodes[:2], [1], 3, 100)
    with pytest.raises(ValueError):
        _core.plan(temps, nodes, [64], 3, 100)

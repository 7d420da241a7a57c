"""MTP's own tables prefer the slow tier: they must not take FMem from the
program (in the testbed they had taken up to 11 MB of it)."""

import pytest

import mtp
from mtp import _core
from mtp._coefficients import MODEL

MANUAL = 3600.0  # the thread never ticks: the test drives mtp._tick()


@pytest.fixture
def core():
    _core.enable(MODEL)
    yield _core
    _core.disable()
    _core.set_metadata_node(-1)


def preferred_mappings(node):
    """Lines of /proc/self/numa_maps whose policy prefers @node."""
    with open("/proc/self/numa_maps") as f:
        return [line for line in f if f" prefer:{node} " in line]


def test_table_mapping_prefers_the_metadata_node(core):
    assert not preferred_mappings(0)  # the process's default policy
    core.set_metadata_node(0)
    data = [[i] for i in range(50000)]
    core.mark(0, 0)
    c = core.counters()
    assert c["metadata_node"] == 0 and c["metadata_bind_failures"] == 0
    # the table (100 000 entries or more) is in a mapping bound to node 0
    assert any("anon=" in line for line in preferred_mappings(0))
    assert data


def test_bind_failure_is_counted_not_fatal(core):
    core.set_metadata_node(62)  # no such node here: mbind fails with EINVAL
    data = [[i] for i in range(20000)]
    core.mark(0, 0)
    c = core.counters()
    assert c["metadata_bind_failures"] >= 1
    assert c["objects_tracked"] > 20000  # placed by the default policy instead
    assert data


def test_metadata_node_range():
    for bad in (-2, 64, 1 << 40):
        with pytest.raises((ValueError, OverflowError)):
            _core.set_metadata_node(bad)
    with pytest.raises(TypeError):
        _core.set_metadata_node("1")
    _core.set_metadata_node(-1)


def test_tracer_picks_the_slow_node(two_nodes):
    mtp.start(mask=[1], mem_pressure=2 << 30, sample_interval=MANUAL)
    mtp._tick()
    s = mtp.stats()
    mtp.end()
    assert s["metadata_node"] == 1
    # node 1 exists only in the fake sysfs: mbind fails, tracing goes on
    assert s["samples"] == 1 and s["last_error"] is None
    _core.set_metadata_node(-1)


def test_tracer_keeps_default_policy_when_asked(two_nodes):
    mtp.start(mask=[1], mem_pressure=2 << 30, sample_interval=MANUAL,
              tuning=mtp.Tuning(metadata_on_slow=False))
    mtp._tick()
    s = mtp.stats()
    mtp.end()
    assert s["metadata_node"] == -1 and s["metadata_bind_failures"] == 0

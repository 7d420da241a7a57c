import os

import pytest

import mtp
from mtp import _topology


@pytest.fixture(autouse=True)
def no_tracer_left():
    """Every test starts and ends without a running tracer."""
    assert not mtp.running()
    yield
    if mtp.running():
        mtp.end()
        pytest.fail("test left mtp running")


def write_node_tree(root, nodes):
    """A fake /sys/devices/system/node: {id: (has_cpu, free_kib)}."""
    def fmt(ids):
        return ",".join(str(i) for i in sorted(ids)) + "\n"

    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "has_memory"), "w") as f:
        f.write(fmt(nodes))
    with open(os.path.join(root, "has_cpu"), "w") as f:
        f.write(fmt(i for i, (cpu, _) in nodes.items() if cpu))
    for i, (_, free_kib) in nodes.items():
        os.makedirs(os.path.join(root, f"node{i}"), exist_ok=True)
        with open(os.path.join(root, f"node{i}", "meminfo"), "w") as f:
            f.write(f"Node {i} MemTotal:  {free_kib * 2} kB\nNode {i} MemFree:  {free_kib} kB\n")


@pytest.fixture
def two_nodes(tmp_path, monkeypatch):
    """Node 0 with CPUs and 1 GiB free, node 1 memory-only with 4 GiB free."""
    root = str(tmp_path / "node")
    write_node_tree(root, {0: (True, 1 << 20), 1: (False, 4 << 20)})
    monkeypatch.setattr(_topology, "node_root", root)
    return root

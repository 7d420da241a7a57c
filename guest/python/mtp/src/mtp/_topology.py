"""NUMA topology from sysfs: which nodes have memory, which have CPUs, how
much memory each has free; and the validation of the user's node mask."""

from __future__ import annotations

import os
from collections.abc import Iterable

# Tests point this at a fake tree to exercise multi-node hosts.
node_root = "/sys/devices/system/node"

MAX_NODES = 64


def parse_node_list(text: str) -> set[int]:
    """Parses the kernel's list format, e.g. ``0-2,4``."""
    nodes: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first, last = int(lo), int(hi) if sep else int(lo)
        if first > last or first < 0:
            raise ValueError(f"bad node list {text!r}")
        nodes.update(range(first, last + 1))
    return nodes


def _read_list(name: str) -> set[int]:
    try:
        with open(os.path.join(node_root, name)) as f:
            return parse_node_list(f.read())
    except FileNotFoundError:
        return set()


def memory_nodes() -> set[int]:
    """Online nodes with memory (N_MEMORY)."""
    return _read_list("has_memory") or {0}


def cpu_nodes() -> set[int]:
    return _read_list("has_cpu")


def free_bytes(node: int) -> int:
    """MemFree of one node; 0 when the node has no meminfo."""
    try:
        with open(os.path.join(node_root, f"node{node}", "meminfo")) as f:
            for line in f:
                fields = line.split()
                # "Node 0 MemFree:  123456 kB"
                if len(fields) >= 4 and fields[2] == "MemFree:":
                    return int(fields[3]) * 1024
    except FileNotFoundError:
        pass
    return 0


def mask_to_nodes(mask: int | Iterable[int]) -> set[int]:
    """A node mask as a set: an int bitmask or an iterable of node ids."""
    if isinstance(mask, bool):
        raise TypeError("mask must be an int bitmask or an iterable of node ids, not bool")
    if isinstance(mask, int):
        if mask < 0:
            raise ValueError("mask must not be negative")
        if mask >> MAX_NODES:
            raise ValueError(f"mask names a node above {MAX_NODES - 1}")
        return {i for i in range(MAX_NODES) if mask >> i & 1}
    try:
        ids = list(mask)
    except TypeError:
        raise TypeError("mask must be an int bitmask or an iterable of node ids") from None
    nodes = set()
    for node in ids:
        if isinstance(node, bool) or not isinstance(node, int):
            raise TypeError(f"node id {node!r} is not an int")
        if not 0 <= node < MAX_NODES:
            raise ValueError(f"node {node} out of range 0..{MAX_NODES - 1}")
        nodes.add(node)
    return nodes


def slow_nodes(mask: int | Iterable[int] | None) -> set[int]:
    """The demotion nodes the mask names, checked against this host.

    ``None`` means every memory node without CPUs (possibly none).
    """
    memory, cpus = memory_nodes(), cpu_nodes()
    if mask is None:
        return memory - cpus
    nodes = mask_to_nodes(mask)
    if not nodes:
        raise ValueError("mask is empty: name at least one slow-tier node")
    for node in sorted(nodes):
        if node not in memory:
            raise ValueError(f"node {node} does not exist or has no memory")
        if node in cpus:
            raise ValueError(
                f"node {node} has CPUs: the mask names slow-tier (memory-only) nodes"
            )
    return nodes


def fast_nodes(slow: set[int]) -> set[int]:
    return memory_nodes() - slow

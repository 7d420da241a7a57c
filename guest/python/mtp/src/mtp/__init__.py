"""MTP: keeps a CPython program's hot objects in fast memory (FMem).

    import mtp
    mtp.start(mask=0b10, mem_pressure=1 << 30, sample_interval=0.25)
    ...               # the code to tier
    mtp.end()

``mask`` names the slow-tier (memory-only) NUMA nodes cold pages go to, as an
int bitmask or an iterable of node ids; ``None`` takes every memory-only
node. MTP acts only while free memory on the fast nodes is below
``mem_pressure`` bytes. ``sample_interval`` is in seconds (at least 10 ms).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from . import _core, _topology
from ._tracer import NOTHING_TO_DO, Tracer, Tuning, check_interval, check_pressure

__all__ = ["NOTHING_TO_DO", "Tuning", "end", "running", "start", "stats", "tiering"]

_lock = threading.Lock()
_tracer: Tracer | None = None
_last_stats: dict | None = None


def start(mask: int | Iterable[int] | None = None, mem_pressure: float = 1 << 30,
          sample_interval: float = 0.25, tuning: Tuning | None = None) -> None:
    """Starts tiering this process; raises on bad arguments or when running."""
    global _tracer
    interval = check_interval(sample_interval)
    pressure = check_pressure(mem_pressure)
    slow = _topology.slow_nodes(mask)
    fast = _topology.fast_nodes(slow)
    with _lock:
        if _tracer is not None:
            raise RuntimeError("mtp is already running: call mtp.end() first")
        tracer = Tracer(slow, fast, pressure, interval, tuning or Tuning())
        tracer.start()
        _tracer = tracer


def end() -> dict:
    """Stops tiering, frees all metadata, returns the final stats()."""
    global _tracer, _last_stats
    with _lock:
        if _tracer is None:
            raise RuntimeError("mtp is not running: call mtp.start() first")
        tracer, _tracer = _tracer, None
        final = tracer.stats()
        tracer.stop()
        final["state"] = "stopped"
        _last_stats = final
        return final


def running() -> bool:
    return _tracer is not None


def stats() -> dict:
    """Counters of the running tracer (or of the last one after end())."""
    tracer = _tracer
    if tracer is not None:
        return tracer.stats()
    if _last_stats is not None:
        return dict(_last_stats)
    raise RuntimeError("mtp has not run in this process")


@contextmanager
def tiering(mask: int | Iterable[int] | None = None, mem_pressure: float = 1 << 30,
            sample_interval: float = 0.25, tuning: Tuning | None = None) -> Iterator[None]:
    """``with mtp.tiering(...):`` runs the block under MTP."""
    start(mask, mem_pressure, sample_interval, tuning)
    try:
        yield
    finally:
        end()


def _tick() -> None:
    """Runs one interval of the pipeline now (tests and benchmarks)."""
    tracer = _tracer
    if tracer is None:
        raise RuntimeError("mtp is not running")
    tracer.tick()


def _sample_frames() -> None:
    """Runs one frame-sampler look now (tests)."""
    tracer = _tracer
    if tracer is None:
        raise RuntimeError("mtp is not running")
    tracer.sample_frames()


def _end_at_exit() -> None:
    if _tracer is not None:
        end()


def _forget_in_child() -> None:
    # The tracer thread does not exist in a forked child: drop its state.
    global _tracer
    if _tracer is not None:
        _tracer = None
        _core.disable()


atexit.register(_end_at_exit)
os.register_at_fork(after_in_child=_forget_in_child)

"""The MTP pipeline (paper Fig. 1) on its own thread: marking when it pays,
a sampling phase every interval, a migration round every few samples; all of
it only while FMem free memory is below the pressure threshold."""

from __future__ import annotations

import gc
import math
import os
import threading
import time
import traceback
from dataclasses import dataclass

from . import _core, _topology
from ._coefficients import MODEL

NOTHING_TO_DO = "nothing to do: no slow-tier (memory-only) node on this host"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Tuning:
    """Knobs beyond the paper's three; the defaults follow the paper."""

    k: float = 0.5  # eq. 1 weight of the current round
    samples_per_migration: int = 8  # sampling phases between migration rounds (one history)
    batch: int = 65536  # objects sampled per GIL hold
    max_pages: int = 65536  # pages demoted (and promoted) per round at most
    # move_pages time per migration round (ms; None = unbounded): no chunk of
    # MOVE_CHUNK pages starts after it; the rest waits for the next round
    max_migration_ms: float | None = 200.0
    # a migration round (locating pages included, which no ms budget cuts)
    # is deferred while another like the last would take migration above
    # this share of the traced time (1: no bound)
    max_migration_share: float = 0.1
    marking_budget: float = 0.5  # share of the sample interval a marking may take
    min_collections: int = 4  # Fig. 2: fewer GC runs since the last pass skip it
    max_skips: int = 4  # ...unless this many passes were skipped with some GC
    max_marking_share: float = 0.05  # marking may take at most this share of traced time
    # FMem bytes kept free: promotions beyond the free memory above it need
    # demotions, and free memory below it is a deficit MTP demotes
    fmem_reserve: int = 64 << 20
    history: int = 8  # eagerness z-score window
    frame_samples: int = 16  # frame-sampler looks per sample interval (0: off)
    frame_depth: int = 64  # frames per thread the frame sampler reads
    max_sampling_share: float = 0.1  # sweeps plus frame samples: at most this share of time
    # A sweep reads the active objects (a change in their history or a
    # sighting) and one of this many slices of the idle ones, in turn: an
    # idle object is read every sweep_slices sweeps (1: every sweep; odd, so
    # that a pattern of period 2 does not alias with it). A
    # migration round sums the heat of every object every sweep_slices
    # rounds, of the active ones (the only ones with heat) in between.
    sweep_slices: int = 5
    # every alloc_every-th allocation heats its page by alloc_heat (0: off)
    alloc_every: int = 32
    alloc_heat: float = 1.0
    # MTP's own tables prefer the slow node with the most free memory, so
    # that they do not take FMem from the program (False: default policy)
    metadata_on_slow: bool = True

    def __post_init__(self) -> None:
        if self.frame_samples < 0 or self.frame_depth < 1:
            raise ValueError("frame_samples must be >= 0 and frame_depth >= 1")
        if not 0 < self.max_sampling_share < 1:
            raise ValueError("max_sampling_share must be in (0, 1)")
        for name in ("sweep_slices", "alloc_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 20:
                raise ValueError(f"{name} must be an int in [0, 2^20]")
        if self.sweep_slices < 1:
            raise ValueError("sweep_slices must be at least 1")
        if not 0 <= self.alloc_heat < 1e6:
            raise ValueError("alloc_heat must be in [0, 1e6)")
        if isinstance(self.max_pages, bool) or not isinstance(self.max_pages, int) \
                or self.max_pages < 0:
            raise ValueError("max_pages must be a non-negative int")
        if not 0 < self.max_migration_share <= 1:
            raise ValueError("max_migration_share must be in (0, 1]")
        budget = self.max_migration_ms
        if budget is not None and (isinstance(budget, bool)
                                   or not isinstance(budget, (int, float))
                                   or not 0 <= budget < 1e9):
            raise ValueError("max_migration_ms must be None or a number of ms in [0, 1e9)")


def adaptive_wait(base: float, took: float, share: float) -> float:
    """The wait after a phase that took ``took`` seconds: ``base``, stretched
    so that the phase takes at most ``share`` of the time (took / (took +
    wait) <= share). The sampling overhead bound: a sweep over many objects
    on a slow CPU (TCG) spaces the sweeps out instead of eating the program."""
    if not took > 0:
        return base
    return max(base, took * (1.0 - share) / share)


class Tracer:
    def __init__(self, slow: set[int], fast: set[int], mem_pressure: float,
                 interval: float, tuning: Tuning) -> None:
        self.slow = sorted(slow)
        self.fast = sorted(fast)
        self.mem_pressure = mem_pressure
        self.interval = interval
        self.tuning = tuning
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one phase at a time
        self._thread: threading.Thread | None = None
        self.depth_limit = 0
        self.size_limit = 0
        self.marked_once = False
        self.gc_seen = self._collections()
        self.skipped_in_row = 0
        self.last_mark_took = 0.0
        self.started = time.perf_counter()
        self.samples_since_migration = 0
        self.partial_rounds = 0  # migration rounds since the last full one
        self.full_round_due = True
        self.llc_history: list[float] = []
        self.bw_history: list[float] = []
        self.previous_eager: float | None = None
        self.s = {
            "state": "starting",
            "slow_nodes": list(self.slow),
            "fast_nodes": list(self.fast),
            "markings": 0,
            "markings_skipped": 0,
            "markings_deferred": 0,
            "samples": 0,
            "migrations": 0,
            "objects_marked_last": 0,
            "depth_limit": 0,
            "size_limit": 0,
            "threshold": None,
            "eagerness": None,
            "llc_miss_ratio": None,
            "pages_demoted": 0,
            "pages_promoted": 0,
            "move_failures": 0,
            "move_failures_by_errno": {},
            "pages_deferred": 0,
            "migrations_deferred": 0,
            "migration_budget_hits": 0,
            "migration_last_s": 0.0,
            "migration_max_s": 0.0,
            "pages_by_node": {},
            "migration": "not run yet",
            "time_marking": 0.0,
            "time_sampling": 0.0,
            "time_frame_sampling": 0.0,
            "frame_samples": 0,
            "frame_hits": 0,
            "sweep_wait": interval,
            "sweep_last_s": 0.0,
            "sweep_last_read": 0,
            "migrations_full": 0,
            "time_migrating": 0.0,
            "last_error": None,
        }

    @staticmethod
    def _collections() -> int:
        return sum(g["collections"] for g in gc.get_stats())

    def start(self) -> None:
        node = -1
        if self.tuning.metadata_on_slow and self.slow:
            node = max(self.slow, key=_topology.free_bytes)
        _core.set_metadata_node(node)
        _core.enable(MODEL)
        _core.set_alloc_every(self.tuning.alloc_every)
        self._thread = threading.Thread(target=self._run, name="mtp", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            _core.disable()
            self.s["state"] = "stopped"

    def _run(self) -> None:
        # Half the sampling budget each for the refcount sweeps and for the
        # frame samples between them; both waits stretch to keep to it.
        share = self.tuning.max_sampling_share / 2
        frames = self.tuning.frame_samples
        sweep_wait = self.interval
        frame_wait = self.interval / frames if frames else math.inf
        next_sweep = time.monotonic() + sweep_wait
        while True:
            now = time.monotonic()
            wait = next_sweep - now
            if frames and self.s["state"] == "tracing":
                wait = min(wait, frame_wait)
            if self._stop.wait(max(0.0, wait)):
                return
            try:
                if time.monotonic() >= next_sweep:
                    took = self.tick()
                    sweep_wait = adaptive_wait(self.interval, took, share)
                    self.s["sweep_wait"] = sweep_wait
                    next_sweep = time.monotonic() + sweep_wait
                elif frames:
                    took = self.sample_frames()
                    frame_wait = adaptive_wait(self.interval / frames, took, share)
            except Exception:  # never take the program down; say what happened
                self.s["last_error"] = traceback.format_exc(limit=3)
                self.s["state"] = "failed"
                return

    def sample_frames(self) -> float:
        """One look at the other threads' frames; returns the time it took."""
        with self._lock:
            if self._stop.is_set() or not self.marked_once:
                return 0.0
            t = time.perf_counter()
            r = _core.sample_frames(self.tuning.frame_depth)
            took = time.perf_counter() - t
            self.s["frame_samples"] += 1
            self.s["frame_hits"] += r["hits"]
            self.s["time_frame_sampling"] += took
            self.s["time_sampling"] += took
            return took

    def fmem_free(self) -> int:
        return sum(_topology.free_bytes(n) for n in self.fast)

    def tick(self) -> float:
        """One interval of the pipeline; returns the time the sweep took."""
        with self._lock:
            if self._stop.is_set():
                return 0.0
            if self.fmem_free() >= self.mem_pressure:
                self.s["state"] = "idle (FMem free above mem_pressure)"
                return 0.0
            self.s["state"] = "tracing"
            self._maybe_mark()
            t = time.perf_counter()
            r = _core.sample(self.tuning.batch, self.tuning.sweep_slices)
            took = time.perf_counter() - t
            self.s["sweep_last_read"] = r["sampled"]
            self.s["time_sampling"] += took
            self.s["sweep_last_s"] = took
            self.s["samples"] += 1
            self.samples_since_migration += 1
            if self.samples_since_migration >= self.tuning.samples_per_migration \
                    and not self._defer_migration():
                self.samples_since_migration = 0
                t = time.perf_counter()
                self._migrate()
                took_migrating = time.perf_counter() - t
                self.s["time_migrating"] += took_migrating
                self.s["migration_last_s"] = took_migrating
                self.s["migration_max_s"] = max(self.s["migration_max_s"], took_migrating)
            return took

    def _defer_migration(self) -> bool:
        """The migration overhead bound: a round like the last must fit in
        max_migration_share of the time since start()."""
        if self.tuning.max_migration_share >= 1:
            return False  # no bound
        elapsed = time.perf_counter() - self.started
        if self.s["time_migrating"] + self.s["migration_last_s"] <= \
                self.tuning.max_migration_share * elapsed:
            return False
        self.s["migrations_deferred"] += 1
        return True

    def _maybe_mark(self) -> None:
        now = self._collections()
        since = now - self.gc_seen
        if self.marked_once and not _core.should_mark(
            since, self.skipped_in_row, self.tuning.min_collections, self.tuning.max_skips
        ):
            self.skipped_in_row += since > 0
            self.s["markings_skipped"] += 1
            return
        # the overhead bound: a pass like the last one must fit in the share
        elapsed = time.perf_counter() - self.started
        if self.marked_once and self.s["time_marking"] + self.last_mark_took > \
                self.tuning.max_marking_share * elapsed:
            self.s["markings_deferred"] += 1
            return
        t = time.perf_counter()
        r = _core.mark(self.depth_limit, self.size_limit)
        took = time.perf_counter() - t
        self.last_mark_took = took
        self.gc_seen = now
        self.skipped_in_row = 0
        self.marked_once = True
        budget = self.tuning.marking_budget * self.interval
        self.depth_limit = _core.next_limit(self.depth_limit, took, budget)
        self.size_limit = _core.next_limit(self.size_limit, took, budget)
        self.s["markings"] += 1
        self.full_round_due = True  # new objects' pages enter the page table
        self.s["objects_marked_last"] = r["added"]
        self.s["depth_limit"] = self.depth_limit
        self.s["size_limit"] = self.size_limit
        self.s["time_marking"] += took

    def _zscore(self, history: list[float], value: float | None) -> float:
        if value is None:
            return 1.0  # signal unavailable: neutral factor
        z = _core.zscore(history, value)
        history.append(value)
        del history[: -self.tuning.history]
        return z

    def _migrate(self) -> None:
        self.s["migrations"] += 1
        # every sweep_slices rounds (and first) every object: pages of idle
        # objects enter the table and pages left without objects leave it
        full = self.full_round_due or self.partial_rounds + 1 >= self.tuning.sweep_slices
        if full:
            self.partial_rounds = 0
            self.full_round_due = False
            self.s["migrations_full"] += 1
        else:
            self.partial_rounds += 1
        r = _core.update_pages(self.tuning.k, self.slow, full, self.tuning.alloc_heat)
        hist = r["histograms"]
        if r["query_errno"]:
            self.s["migration"] = f"cannot locate pages (move_pages errno {r['query_errno']})"
            return
        # FMem free memory above the reserve takes promotions without
        # demotions; below it, the deficit is to be demoted
        room = (self.fmem_free() - self.tuning.fmem_reserve) // PAGE_SIZE
        h = _core.threshold(hist["fast"], hist["slow"], max(0, room))
        if self.slow:
            fast_pages, slow_pages = sum(hist["fast"]), sum(hist["slow"])
            total = fast_pages + slow_pages
            temp = hist["temp_fast"] + hist["temp_slow"]
            llc = _core.llc_ratio()
            self.s["llc_miss_ratio"] = llc
            # No uncore counters for SMem bandwidth here: the share of page
            # temperature sitting in SMem stands in for it.
            bw = hist["temp_slow"] / temp if temp > 0 else 0.0
            eager = _core.eagerness(fast_pages / total if total else 0.0,
                                    self._zscore(self.llc_history, llc),
                                    self._zscore(self.bw_history, bw))
            h = _core.adjust_threshold(h, eager, self.previous_eager or 0.0,
                                       self.previous_eager is not None)
            self.previous_eager = eager
            self.s["eagerness"] = eager
        self.s["threshold"] = h
        self.s["pages_by_node"] = {
            node: {"hot": sum(b[h:]), "cold": sum(b[:h])} for node, b in hist["nodes"].items()
        }
        if not self.slow:
            self.s["migration"] = NOTHING_TO_DO
            return
        if h >= _core.BUCKETS:
            self.s["migration"] = "nothing to do: no page crosses the threshold"
            return
        fast_target = max(self.fast, key=_topology.free_bytes) if self.fast else -1
        slow_target = max(self.slow, key=_topology.free_bytes)
        if fast_target < 0:
            self.s["migration"] = "nothing to do: no fast-tier node"
            return
        budget = self.tuning.max_migration_ms
        m = _core.move(h, fast_target, slow_target, self.slow, self.tuning.max_pages,
                       -1.0 if budget is None else float(budget), room)
        self.s["pages_demoted"] += m["demoted"]
        self.s["pages_promoted"] += m["promoted"]
        deferred = m["demote_deferred"] + m["promote_deferred"]
        self.s["pages_deferred"] += deferred
        self.s["migration_budget_hits"] += deferred > 0
        self.s["move_failures"] += m["demote_failed"] + m["promote_failed"]
        errs = self.s["move_failures_by_errno"]
        for d in (m["demote_errors"], m["promote_errors"]):
            for name, count in d.items():
                errs[name] = errs.get(name, 0) + count
        self.s["migration"] = (
            f"demoted {m['demoted']}, promoted {m['promoted']} pages at bucket {h}"
            + (f"; {deferred} left for the next round (time budget)" if deferred else "")
        )

    def stats(self) -> dict:
        with self._lock:
            out = dict(self.s)
            out["move_failures_by_errno"] = dict(self.s["move_failures_by_errno"])
            out.update(_core.counters() if self.s["state"] != "stopped" else {})
        return out


def check_interval(sample_interval: float) -> float:
    if isinstance(sample_interval, bool) or not isinstance(sample_interval, (int, float)):
        raise TypeError("sample_interval must be a number of seconds")
    if math.isnan(sample_interval) or sample_interval < 0.010:
        raise ValueError("sample_interval must be at least 0.010 s (10 ms)")
    if math.isinf(sample_interval):
        raise ValueError("sample_interval must be finite")
    return float(sample_interval)


def check_pressure(mem_pressure: float) -> float:
    if isinstance(mem_pressure, bool) or not isinstance(mem_pressure, (int, float)):
        raise TypeError("mem_pressure must be a number of bytes")
    if math.isnan(mem_pressure) or mem_pressure < 0:
        raise ValueError("mem_pressure must be a non-negative number of bytes")
    return mem_pressure

#!/usr/bin/env python3
"""Refits MTP's hotness model (multiple linear regression on the median,
standard deviation, non-zero count and range of an object's refcount
changes) against a ground truth, and writes the coefficients to
src/mtp/_coefficients.py.

Ground truth: a workload whose accesses are counted exactly. Worker threads
serve "requests" that each pick objects by a Zipf law, hold references to
them while processing (as real code holds them in locals, argument tuples
and result lists) and drop them; every access increments the object's
counter. MTP samples the real refcounts from its own thread at the sample
interval, as it does in production. Label of an object in a window of
eight samples: log2(1 + accesses per sample interval). The hot set is
reshuffled between windows, so the model must follow changes.

This measures what the stock-interpreter signal (net refcount change
between two samples) can see; it is not DAMON or accessed-bit ground truth
(this machine has neither idle page tracking nor a tiering module).

    python3 tools/refit_model.py            # fit, print figures, write coefficients
    python3 tools/refit_model.py --dry-run  # fit and print only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time

import numpy as np

from mtp import _core

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "src", "mtp", "_coefficients.py")


class Record:
    __slots__ = ("key", "payload")

    def __init__(self, key: int) -> None:
        self.key = key
        self.payload = [key] * 4


def serve(objs, counts, order, stop, seed):
    """Requests of 32 Zipf-chosen objects each, held while processed."""
    rng = random.Random(seed)
    n = len(order[0])
    cum = [0.0] * n
    total = 0.0
    for rank in range(n):
        total += 1.0 / (rank + 1) ** 1.1
        cum[rank] = total
    while not stop.is_set():
        ranks = rng.choices(range(n), cum_weights=cum, k=32)
        held = []
        for r in ranks:
            i = order[0][r]
            held.append(objs[i])
            counts[i] += 1
        acc = 0
        for rec in held:
            acc += rec.payload[0] + rec.key
        held.clear()


def collect(n_objects, windows, interval, threads, seed, frame_samples=16):
    rng = random.Random(seed)
    objs = [Record(i) for i in range(n_objects)]
    counts = [0] * n_objects
    # only 40 % of the objects are ever used; the rank order is reshuffled per window
    used = list(range(n_objects))
    order = [rng.sample(used, int(0.4 * n_objects))]
    stop = threading.Event()
    _core.enable((0.0, 1.0, 0.0, 0.0, 0.0))
    rows, labels, pages = [], [], []
    workers = [threading.Thread(target=serve, args=(objs, counts, order, stop, seed + t))
               for t in range(threads)]
    try:
        _core.mark(0, 0)
        _core.sample(1 << 16)  # baseline
        for w in workers:
            w.start()
        for window in range(windows):
            before = list(counts)
            for _ in range(_core.HISTORY):
                # the program runs; MTP's clock: frame samples, then a sweep
                for _ in range(frame_samples):
                    time.sleep(interval / frame_samples)
                    _core.sample_frames(64)
                if not frame_samples:
                    time.sleep(interval)
                _core.sample(1 << 16)
            for i, o in enumerate(objs):
                h = _core.history(o)
                if h is None:
                    continue
                rows.append(_core.features(list(h)))
                per_interval = (counts[i] - before[i]) / _core.HISTORY
                labels.append(math.log2(1 + per_interval))
                pages.append((window, id(o) // 4096))
            order[0] = rng.sample(used, int(0.4 * n_objects))
    finally:
        stop.set()
        for w in workers:
            w.join()
        _core.disable()
    return np.array(rows), np.array(labels), pages


def predict(x, coef):
    """mtp_hotness() of policy.c over feature rows."""
    return np.maximum(np.column_stack([np.ones(len(x)), x]) @ coef, 0.0)


def page_figures(x, y, pages, coef):
    """Pearson of the summed true labels per page against the model summed
    per page as the page temperature table does (mtp_page_heat: without the
    intercept), and with the intercept for comparison. No R^2 here: page
    heat without the intercept is not on the labels' scale."""
    keys = {}
    index = np.array([keys.setdefault(p, len(keys)) for p in pages])
    true_sum = np.bincount(index, weights=y)
    out = {"pages": len(keys)}
    for name, pred in (("page_pearson", np.maximum(x @ coef[1:], 0.0)),
                       ("page_pearson_with_intercept", predict(x, coef))):
        pred_sum = np.bincount(index, weights=pred)
        out[name] = float(np.corrcoef(pred_sum, true_sum)[0, 1]) if pred_sum.std() > 0 else 0.0
    return out


def fit(x, y, seed):
    idx = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = idx[:cut], idx[cut:]
    a = np.column_stack([np.ones(len(y)), x])
    coef, *_ = np.linalg.lstsq(a[train], y[train], rcond=None)
    pred = predict(x[test], coef)
    resid = y[test] - pred
    r2 = 1.0 - float(resid @ resid) / float(((y[test] - y[test].mean()) ** 2).sum())
    pearson = float(np.corrcoef(pred, y[test])[0, 1]) if pred.std() > 0 else 0.0
    return coef, {"r2": r2, "pearson": pearson, "mse": float((resid ** 2).mean()),
                  "mae": float(np.abs(resid).mean()), "train": int(cut),
                  "test": int(len(y) - cut)}


def write(coef, figures, args):
    values = ", ".join(f"{c:.6g}" for c in coef)
    text = f'''"""Hotness model coefficients (intercept, median, std, non-zero count, range).

Written by tools/refit_model.py ({" ".join(sys.argv[1:]) or "defaults"}) on
Python {sys.version.split()[0]}: held-out R^2 {figures["r2"]:.3f}, Pearson
{figures["pearson"]:.3f} over {figures["test"]} objects. Signal: net refcount
change per sweep plus frame-sampler sightings ({figures.get("frame_samples", 16)} looks per
interval). Ground truth: exactly counted accesses of a Zipf request workload
(see docs/mtp.md); the label is log2(1 + accesses per sample interval).
"""

MODEL = ({values})
'''
    with open(OUT, "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=20000)
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--interval", type=float, default=0.05, help="sample interval, s")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--frame-samples", type=int, default=16,
                   help="frame-sampler looks per interval, as mtp.Tuning (0: refcounts only)")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args()
    if args.objects < 100 or args.windows < 1 or args.interval < 0.01 or args.threads < 1 \
            or args.frame_samples < 0:
        p.error("need --objects >= 100, --windows >= 1, --interval >= 0.01, --threads >= 1, "
                "--frame-samples >= 0")
    x, y, pages = collect(args.objects, args.windows, args.interval, args.threads, args.seed,
                          args.frame_samples)
    coef, figures = fit(x, y, args.seed)
    figures.update(page_figures(x, y, pages, coef))
    figures["coefficients"] = [float(c) for c in coef]
    figures["samples_per_object"] = _core.HISTORY
    figures["frame_samples"] = args.frame_samples
    print(json.dumps(figures))
    if not args.dry_run:
        write(coef, figures, args)


if __name__ == "__main__":
    main()

"""The model refit script end to end, on a small workload."""

import importlib.util
import math
import os
import runpy

import pytest

np = pytest.importorskip("numpy")

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "refit_model.py")


@pytest.fixture
def refit():
    if not os.path.exists(TOOL):
        pytest.skip("tools/ not next to the tests (installed elsewhere)")
    spec = importlib.util.spec_from_file_location("refit_model", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_refit_collects_fits_and_writes(refit, tmp_path, monkeypatch):
    x, y, pages = refit.collect(n_objects=600, windows=2, interval=0.01, threads=1, seed=3)
    assert x.shape == (len(y), 4) and len(pages) == len(y)
    assert len(y) >= 1000  # both windows, nearly every object tracked
    assert (y >= 0).all() and y.max() > 0  # the workload did access objects
    coef, figures = refit.fit(x, y, 3)
    assert len(coef) == 5 and all(math.isfinite(c) for c in coef)
    assert -1.0 <= figures["pearson"] <= 1.0
    out = tmp_path / "_coefficients.py"
    monkeypatch.setattr(refit, "OUT", str(out))
    refit.write(coef, figures, None)
    ns = runpy.run_path(str(out))
    assert ns["MODEL"] == pytest.approx(tuple(coef), rel=1e-5)


def test_shipped_coefficients_are_a_model():
    from mtp._coefficients import MODEL
    assert len(MODEL) == 5 and all(math.isfinite(c) for c in MODEL)

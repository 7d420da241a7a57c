"""Hotness model coefficients (intercept, median, std, non-zero count, range).

Written by tools/refit_model.py (defaults) on
Python 3.11.2: held-out R^2 0.043, Pearson
0.207 over 24000 objects. Ground truth: exactly
counted accesses of a Zipf request workload (see docs/mtp.md); the label is
log2(1 + accesses per sample interval).
"""

MODEL = (0.646074, -0.0744379, 6.70494, 1.71635, -2.20767)

"""Comparing a run's outputs with expected values, element by element.

Where NaN is expected a NaN is right, and an infinity is right where the same infinity is
expected; anywhere else a NaN or an infinity in the output is an infinite error. Used by the
checks of saved programs (``hwsim.workloads.saved``) and of ``FILE.py`` kernels against their
reference (``hwsim.workloads.file_workload``).
"""

from __future__ import annotations

import math

import numpy as np


def abs_errors(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| as float64, 0 where both are the same NaN or infinity, inf where they
    differ and either is not finite. Same shapes."""
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (np.isnan(a) & np.isnan(e)) | (a == e)
        diff = np.where(same, 0.0, np.abs(a - e))
    return np.nan_to_num(diff, nan=math.inf, posinf=math.inf)

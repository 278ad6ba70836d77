"""Shared by the library tests: run a kernel with the race checker on and compare with a
reference at a tolerance that follows the compute dtype."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from hwsim.lang import Kernel

BF16 = ml_dtypes.bfloat16
#: max |error| allowed, as a share of max |reference|: fp32 accumulation plus a few fp32 ulps
#: of the activation functions; bf16 keeps 8 significant bits (2^-8 per rounding).
RELATIVE_TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(BF16): 3e-2}


def normal(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0
) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def f64(value: Any) -> Any:
    return value.astype(np.float64) if isinstance(value, np.ndarray) else value


def run_and_compare(
    kernel: Kernel, args: tuple[Any, ...], expected: np.ndarray, config: str, **kwargs: Any
) -> Any:
    """Run with race_check=True (raises on a race) and assert numerics; returns the result."""
    result = kernel(*args, config=config, race_check=True, **kwargs)
    got = result.output.astype(np.float64)
    assert got.shape == expected.shape
    assert result.output.dtype == args[0].dtype
    tolerance = RELATIVE_TOLERANCE[np.dtype(args[0].dtype)] * float(np.max(np.abs(expected)))
    err = float(np.max(np.abs(got - expected)))
    assert err <= tolerance, f"max |error| {err:.3g} > {tolerance:.3g}"
    return result

"""Helpers of the kernels tests: ulp distance, exact/ulp/sum-bound assertions, seeded operands."""

from __future__ import annotations

import numpy as np

SHAPES = [(p, n) for p in (1, 3, 128) for n in (1, 7, 512)]
"""[P, N] shapes every kernel is checked on: 1, a few and all 128 partitions; N = 1, odd, 512."""

FP32_EPS = float(np.finfo(np.float32).eps)
_NAN_DISTANCE = np.iinfo(np.int64).max


def _ordered(x: np.ndarray) -> np.ndarray:
    # fp32 bit patterns mapped to integers that are monotonic in the float value, with -0 == +0:
    # positive floats keep their pattern, negative ones become minus their magnitude's pattern.
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance in fp32 ulps (representable floats between a and b).

    -0 and +0 are 0 apart; NaN vs NaN is 0; NaN vs a number is int64 max; ±inf is one ulp past
    ±FLT_MAX. Returns int64 with the broadcast shape of a and b.
    """
    a, b = np.broadcast_arrays(np.asarray(a, np.float32), np.asarray(b, np.float32))
    distance = np.abs(_ordered(a) - _ordered(b))
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    distance = np.where(a_nan & b_nan, 0, distance)
    return np.where(a_nan ^ b_nan, _NAN_DISTANCE, distance)


def assert_ulp(actual: np.ndarray, expected: np.ndarray, max_ulp: int, what: str = "") -> None:
    """Assert fp32 arrays of equal shape agree within ``max_ulp`` ulps (0 = bit-exact up to ±0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == np.float32, f"{what}: dtype {actual.dtype}, expected float32"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if actual.size == 0:
        return
    distance = ulp_distance(actual, expected)
    worst = int(np.argmax(distance))
    assert distance.flat[worst] <= max_ulp, (
        f"{what}: {int(distance.flat[worst])} ulp apart (max {max_ulp}) at flat index {worst}: "
        f"got {actual.flat[worst]!r}, expected {expected.flat[worst]!r}; "
        f"{int(np.count_nonzero(distance > max_ulp))} of {distance.size} elements off"
    )


def assert_exact(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Assert equal dtype, shape and values (NaN matches NaN; -0 matches +0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} vs {expected.dtype}"
    if actual.dtype == np.float32:
        assert_ulp(actual, expected, 0, what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def assert_within_sum_bound(
    actual: np.ndarray, exact: np.ndarray, abs_sum: np.ndarray, terms: int, what: str = ""
) -> None:
    """Assert an fp32 sum of ``terms`` terms is within the accumulation error bound of ``exact``.

    ``exact`` is the float64 value and ``abs_sum`` the float64 sum of the terms' magnitudes
    (Σ|a_k b_k| for a dot product). Every fp32 addition errs by at most eps/2 of its partial sum
    and every partial sum is at most ``abs_sum``; the worst case grows like ``terms * eps``, but
    rounding errors of random data cancel like a random walk, so ``sqrt(terms) * eps`` is the
    realistic scale (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2). We allow
    4 * eps * sqrt(terms) * abs_sum, plus one rounding of the result itself.
    """
    actual = np.asarray(actual, dtype=np.float64)
    bound = 4.0 * FP32_EPS * np.sqrt(max(terms, 1)) * abs_sum + FP32_EPS * np.abs(exact)
    with np.errstate(invalid="ignore"):
        excess = np.abs(actual - exact) - bound
    # Equal values (including equal infinities) and NaN in both pass.
    agree = (actual == exact) | (np.isnan(actual) & np.isnan(exact))
    excess = np.where(agree, -np.inf, np.nan_to_num(excess, nan=np.inf))
    worst = int(np.argmax(excess)) if excess.size else 0
    assert excess.size == 0 or excess.flat[worst] <= 0.0, (
        f"{what}: error {abs(actual.flat[worst] - exact.flat[worst]):.3g} exceeds bound "
        f"{bound.flat[worst]:.3g} at flat index {worst} (terms={terms})"
    )


def mixed_f32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Seeded fp32 data: both signs, magnitudes 1e-20 to 1e20, exact zeros and small integers.

    Products of such values overflow to inf and underflow to subnormals or zero in fp32.
    """
    magnitude = 10.0 ** rng.uniform(-20.0, 20.0, size=shape)
    values = rng.standard_normal(shape) * magnitude
    kind = rng.integers(0, 8, size=shape)
    values = np.where(kind == 0, 0.0, values)
    values = np.where(kind == 1, rng.integers(-4, 5, size=shape), values)
    values = np.where(kind == 2, rng.standard_normal(shape), values)
    return values.astype(np.float32)


def moderate_f32(
    rng: np.random.Generator, shape: tuple[int, ...], scale: float = 4.0
) -> np.ndarray:
    """Seeded fp32 data of both signs around ``scale``, with a few exact zeros (no extremes)."""
    values = rng.standard_normal(shape) * scale
    values[rng.random(shape) < 0.05] = 0.0
    return values.astype(np.float32)


def int32_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Seeded int64 data holding int32 values: full range, small values, zeros, ±1 and extremes."""
    full = rng.integers(-(2**31), 2**31, size=shape)
    small = rng.integers(-40, 41, size=shape)
    edges = rng.choice(np.array([0, 1, -1, 2**31 - 1, -(2**31), 31, 32, 33]), size=shape)
    kind = rng.integers(0, 3, size=shape)
    return np.where(kind == 0, full, np.where(kind == 1, small, edges)).astype(np.int64)

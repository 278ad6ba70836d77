"""Tests of the eight-lane fp32 intrinsics the matmul kernel keeps its sums in."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from hwsim.kernels.lanes import LANES, add8, broadcast8, load8, mul_add8, store8, zeros8


@numba.njit
def _lane_ops(values: np.ndarray, weights: np.ndarray, out: np.ndarray) -> None:
    """out[0:8] = values[3:11] + 0; out[8:16] = values[3:11] + weights[2] * values[11:19];
    out[16:24] = weights[2] everywhere; out[24:32] = values[3:11] + values[11:19]."""
    first, second = load8(values, 3), load8(values, 3 + LANES)
    weight = broadcast8(weights, 2)
    store8(out, 0, add8(first, zeros8()))
    store8(out, LANES, mul_add8(first, weight, second))
    store8(out, 2 * LANES, weight)
    store8(out, 3 * LANES, add8(first, second))


def test_lane_ops_act_lane_by_lane_on_the_elements_they_name() -> None:
    rng = np.random.default_rng(11)
    values = rng.standard_normal(24).astype(np.float32)
    weights = rng.standard_normal(4).astype(np.float32)
    out = np.full(4 * LANES, np.nan, np.float32)
    _lane_ops(values, weights, out)
    first, second = values[3:11], values[11:19]
    np.testing.assert_array_equal(out[:8], first)
    np.testing.assert_array_equal(out[8:16], first + weights[2] * second)
    np.testing.assert_array_equal(out[16:24], np.full(LANES, weights[2]))
    np.testing.assert_array_equal(out[24:32], first + second)


def test_mul_add8_rounds_the_product_before_the_sum() -> None:
    # first = -fl(a*b): rounded separately, first + a*b is exactly 0 in every lane; fused it
    # would be the product's rounding error, which is not 0 for these operands.
    rng = np.random.default_rng(12)
    a = np.float32(1.0 + rng.uniform())
    b = rng.uniform(1.0, 2.0, LANES).astype(np.float32)
    exact = np.float64(a) * b.astype(np.float64)
    assert np.all(exact != exact.astype(np.float32)), "every product must be inexact in fp32"
    values = np.concatenate([np.zeros(3), -(a * b), b, np.zeros(5)]).astype(np.float32)
    out = np.empty(4 * LANES, np.float32)
    _lane_ops(values, np.full(4, a, np.float32), out)
    np.testing.assert_array_equal(out[LANES : 2 * LANES], np.zeros(LANES, np.float32))


@numba.njit
def _load_from_2d(x: np.ndarray) -> None:
    load8(x, 0)


def test_lane_loads_take_only_flat_contiguous_float32_arrays() -> None:
    with pytest.raises(numba.core.errors.TypingError):
        _load_from_2d(np.zeros((2, 8), np.float32))

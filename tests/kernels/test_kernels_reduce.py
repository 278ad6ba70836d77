"""Tests of tensor_reduce, tensor_partition_reduce, bn_stats and bn_aggr."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    FP32_EPS,
    SHAPES,
    assert_exact,
    assert_ulp,
    assert_within_sum_bound,
    int32_values,
    mixed_f32,
    moderate_f32,
)

from hwsim import kernels as K
from hwsim.kernels import ReduceOp

FLOAT_REDUCE_OPS = [op for op in ReduceOp if op not in K.INTEGER_ONLY_REDUCE_OPS]
GROUPINGS = [(1, 1), (1, 7), (4, 5), (2, 256), (512, 1)]  # (G, R) splits of the free axis


def _float_data(op: ReduceOp, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if op == ReduceOp.multiply:
        # Factors near ±1 so that products of up to 512 of them stay finite and normal.
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return (sign * np.exp(rng.normal(0.0, 0.05, shape))).astype(np.float32)
    return mixed_f32(rng, shape) if op != ReduceOp.add else moderate_f32(rng, shape)


def _check_float_reduction(
    got: np.ndarray, x: np.ndarray, axis: int, op: ReduceOp, what: str
) -> None:
    wide = x.astype(np.float64)
    terms = x.shape[axis]
    if op == ReduceOp.add:
        # fp32 accumulation: error bound proportional to Σ|x| * eps * sqrt(terms) (see helper).
        assert_within_sum_bound(got, wide.sum(axis), np.abs(wide).sum(axis), terms, what)
    elif op == ReduceOp.multiply:
        # Each fp32 multiply adds a relative error of at most eps/2: |rel err| <= terms * eps/2.
        exact = wide.prod(axis)
        assert np.all(np.abs(got - exact) <= terms * FP32_EPS * np.abs(exact)), what
    else:
        expected = (np.max if op == ReduceOp.max else np.min)(x, axis=axis)
        assert_exact(got, expected, what)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", FLOAT_REDUCE_OPS, ids=lambda op: op.name)
def test_tensor_reduce_float(op: ReduceOp, shape: tuple[int, int]) -> None:
    p, n = shape
    x2 = _float_data(op, shape, seed=int(op) * 100 + p + n)
    for g, r in [(1, n), (n, 1)] + [(g, r) for g, r in GROUPINGS if g * r == n]:
        x = x2.reshape(p, g, r)
        got = K.tensor_reduce(x, op)
        assert got.shape == (p, g) and got.dtype == np.float32
        ref = K.tensor_reduce_ref(x, op)
        _check_float_reduction(got, x, 2, op, f"{op.name} {x.shape}")
        _check_float_reduction(ref, x, 2, op, f"reference {op.name} {x.shape}")
        assert_exact(K.tensor_reduce(x, op, negate=True), -got, "negate")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda op: op.name)
def test_tensor_reduce_int(op: ReduceOp, shape: tuple[int, int]) -> None:
    x = int32_values(np.random.default_rng(int(op) + shape[0] * 7 + shape[1]), shape)
    for x3 in (x.reshape(shape[0], 1, shape[1]), x.reshape(shape[0], shape[1], 1)):
        got = K.tensor_reduce(x3, op)
        assert_exact(got, K.tensor_reduce_ref(x3, op), f"{op.name} {x3.shape}")
        ufunc = {
            ReduceOp.add: np.add,
            ReduceOp.multiply: np.multiply,
            ReduceOp.max: np.maximum,
            ReduceOp.min: np.minimum,
            ReduceOp.bitwise_or: np.bitwise_or,
            ReduceOp.bitwise_and: np.bitwise_and,
        }[op]
        assert_exact(got, ufunc.reduce(x3, axis=2), f"numpy {op.name}")


def test_tensor_reduce_nan_and_errors() -> None:
    x = np.array([[[1.0, np.nan, 3.0]]], np.float32)
    assert np.isnan(K.tensor_reduce(x, ReduceOp.max)[0, 0])
    assert np.isnan(K.tensor_reduce(x, ReduceOp.min)[0, 0])
    with pytest.raises(ValueError, match="op=bitwise_or needs integer data"):
        K.tensor_reduce(x, ReduceOp.bitwise_or)
    with pytest.raises(ValueError, match="x must be 3-D"):
        K.tensor_reduce(x[0], ReduceOp.add)
    with pytest.raises(ValueError, match="empty reduction axis"):
        K.tensor_reduce(np.zeros((1, 1, 0), np.float32), ReduceOp.add)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", list(ReduceOp), ids=lambda op: op.name)
def test_tensor_partition_reduce(op: ReduceOp, shape: tuple[int, int]) -> None:
    seed = int(op) * 13 + shape[0] + shape[1]
    xi = int32_values(np.random.default_rng(seed), shape)
    got_i = K.tensor_partition_reduce(xi, op)
    assert got_i.shape == (1, shape[1])
    assert_exact(got_i, K.tensor_partition_reduce_ref(xi, op), f"int {op.name}")
    if op in K.INTEGER_ONLY_REDUCE_OPS:
        return
    x = _float_data(op, shape, seed)
    got = K.tensor_partition_reduce(x, op)
    assert got.shape == (1, shape[1]) and got.dtype == np.float32
    _check_float_reduction(got[0], x, 0, op, f"{op.name} {shape}")
    _check_float_reduction(K.tensor_partition_reduce_ref(x, op)[0], x, 0, op, "reference")


# --- bn_stats / bn_aggr -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_bn_stats_matches_reference_and_layout(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[0] * 3 + shape[1])
    x = (moderate_f32(rng, shape) + np.float32(3.0)).astype(np.float32)
    got = K.bn_stats(x)
    assert got.shape == (shape[0], K.BN_STATS_WIDTH) and got.dtype == np.float32
    assert_ulp(got, K.bn_stats_ref(x), 1, "bn_stats")
    even, odd = x[:, 0::2].astype(np.float64), x[:, 1::2].astype(np.float64)
    assert np.all(got[:, 0] == even.shape[1]) and np.all(got[:, 3] == odd.shape[1])
    np.testing.assert_allclose(got[:, 1], even.mean(axis=1), rtol=2e-7)
    np.testing.assert_allclose(got[:, 2], even.var(axis=1) * even.shape[1], rtol=1e-6)
    if odd.shape[1]:
        np.testing.assert_allclose(got[:, 4], odd.mean(axis=1), rtol=2e-7)
        np.testing.assert_allclose(got[:, 5], odd.var(axis=1) * odd.shape[1], rtol=1e-6)
    else:
        assert np.all(got[:, 3:] == 0.0)
    assert_ulp(K.bn_aggr(got), K.bn_aggr_ref(got), 1, "bn_aggr")


@pytest.mark.parametrize("seed", range(6))
def test_bn_stats_then_bn_aggr_equals_mean_and_variance_over_random_splits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    partitions, size = int(rng.integers(1, 129)), int(rng.integers(1, 2000))
    offset = rng.normal(0.0, 3.0, (partitions, 1))
    x = (rng.normal(0.0, 1.0, (partitions, size)) * 2.0 + offset).astype(np.float32)
    # Split the free axis into random chunks of at most bn_stats_fmax = 512 elements.
    cuts = np.sort(
        rng.choice(np.arange(1, size), size=min(size - 1, size // 300 + 2), replace=False)
    )
    chunks = [c for c in np.split(x, cuts, axis=1) if c.shape[1]]
    chunks = [piece for c in chunks for piece in np.array_split(c, -(-c.shape[1] // 512), axis=1)]
    stats = np.concatenate([K.bn_stats(c) for c in chunks], axis=1)
    got = K.bn_aggr(stats)
    assert_ulp(got, K.bn_aggr_ref(stats), 1, "bn_aggr vs reference")
    wide = x.astype(np.float64)
    mean, var = wide.mean(axis=1), wide.var(axis=1)
    std = np.sqrt(var)
    # Stats pass through fp32 once (mean, M2 rounded): errors of a few eps relative to the data.
    assert np.all(np.abs(got[:, 0] - mean) <= 4 * FP32_EPS * (np.abs(mean) + std)), "mean"
    assert np.all(np.abs(got[:, 1] - var) <= 8 * FP32_EPS * (var + mean**2)), "variance"


def test_bn_aggr_skips_empty_groups_and_checks_width() -> None:
    stats = np.array([[0.0, 123.0, 456.0, 2.0, 1.0, 2.0, 2.0, 3.0, 2.0]], np.float32)
    # Groups (2, mean 1, M2 2) and (2, mean 3, M2 2): mean 2, variance (2 + 2 + 4*1) / 4 = 2.
    assert K.bn_aggr(stats).tolist() == [[2.0, 2.0]]
    assert np.isnan(K.bn_aggr(np.zeros((1, 6), np.float32))).all()
    with pytest.raises(ValueError, match="positive multiple of 3"):
        K.bn_aggr(np.zeros((1, 4), np.float32))

"""Tests of matmul_accumulate (its fixed summation order, bit for bit) and transpose."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import assert_exact, assert_within_sum_bound, mixed_f32, moderate_f32

from hwsim import kernels as K

MATMUL_SHAPES = [  # (K, M, N): contraction (partitions), stationary free size, moving free size
    (1, 1, 1),
    (3, 1, 7),
    (1, 128, 512),
    (128, 128, 512),
    (128, 3, 1),
    (7, 128, 7),
    (64, 96, 300),
]


def _check_against_float64(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray, start: np.ndarray | None
) -> None:
    # Each element is a K-term fp32 dot product (plus the previous accumulator value), so its
    # error is bounded by the summation bound: eps * sqrt(K) * Σ_k |s_km| |v_kn| (times a small
    # constant; see assert_within_sum_bound), measured against the float64 value.
    s64, v64 = stationary.astype(np.float64), moving.astype(np.float64)
    exact = s64.T @ v64
    abs_sum = np.abs(s64).T @ np.abs(v64)
    if start is not None:
        exact = exact + start
        abs_sum = abs_sum + np.abs(start)
    assert_within_sum_bound(acc, exact, abs_sum, stationary.shape[0] + 1, "matmul")


@pytest.mark.parametrize("shape", MATMUL_SHAPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul_accumulate(shape: tuple[int, int, int], accumulate: bool) -> None:
    k, m, n = shape
    rng = np.random.default_rng(k * 10000 + m * 100 + n)
    stationary, moving = moderate_f32(rng, (k, m)), moderate_f32(rng, (k, n))
    start = moderate_f32(rng, (m, n), scale=50.0)
    for kernel in (K.matmul_accumulate, K.matmul_accumulate_ref):
        acc = start.copy()
        assert kernel(acc, stationary, moving, accumulate) is None  # in place
        _check_against_float64(
            acc, stationary, moving, start.astype(np.float64) if accumulate else None
        )


def test_matmul_reference_is_rounded_float64() -> None:
    rng = np.random.default_rng(1)
    stationary, moving = mixed_f32(rng, (16, 8)), mixed_f32(rng, (16, 4))
    acc = np.full((8, 4), np.nan, np.float32)
    K.matmul_accumulate_ref(acc, stationary, moving, False)
    with np.errstate(all="ignore"):
        expected = (stationary.astype(np.float64).T @ moving.astype(np.float64)).astype(np.float32)
    assert_exact(acc, expected, "reference")


def test_matmul_sums_each_column_in_partition_order_in_fp32() -> None:
    # A PE column adds its K products one after another; the kernel must give exactly that
    # order's fp32 result (BLAS's blocked order differs in the last bit for many elements).
    rng = np.random.default_rng(3)
    stationary, moving = mixed_f32(rng, (128, 16)), mixed_f32(rng, (128, 64))
    expected = np.zeros((16, 64), np.float32)
    with np.errstate(all="ignore"):
        for k in range(128):
            expected += stationary[k][:, None] * moving[k][None, :]
    acc = np.empty((16, 64), np.float32)
    K.matmul_accumulate(acc, stationary, moving, False)
    assert_exact(acc, expected, "partition-order fp32 sum")


def _partition_order_sum(
    start: np.ndarray, stationary: np.ndarray, moving: np.ndarray, accumulate: bool
) -> np.ndarray:
    """The specification, one NumPy step per partition: every product rounded to fp32, then
    added to its element's running fp32 sum (from +0.0); the sum then added to PSUM once."""
    total = np.zeros(start.shape, np.float32)
    with np.errstate(all="ignore"):
        for k in range(stationary.shape[0]):
            total = total + stationary[k][:, None] * moving[k][None, :]
        return start + total if accumulate else total


def _assert_same_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Every bit the same (-0.0 is not +0.0), except that any NaN matches any NaN."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype == np.float32
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), f"{what}: NaN in different places"
    differ = actual.view(np.uint32)[~nan] != expected.view(np.uint32)[~nan]
    assert not differ.any(), (
        f"{what}: {int(differ.sum())} of {differ.size} elements differ in their bits, first "
        f"{actual[~nan][differ][0]!r} vs {expected[~nan][differ][0]!r}"
    )


def _operands_of_kind(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    """fp32 arrays holding values of one operand dtype (or fp32 with infinities and -0.0)."""
    if kind == "fp32":
        return mixed_f32(rng, shape)
    if kind == "fp32_specials":
        values = mixed_f32(rng, shape)
        pick = rng.integers(0, 16, size=shape)
        values[pick == 0] = np.inf
        values[pick == 1] = -np.inf
        values[pick == 2] = -0.0
        values[pick == 3] = np.float32(1e-40)  # subnormal
        return values
    narrow = {"bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn}[kind]
    return (rng.standard_normal(shape) * 3.0).astype(narrow).astype(np.float32)


# Shapes around the kernel's register blocks (4 output rows x 16 columns): whole blocks, partial
# blocks of rows and columns, one element, and K = 0 (nothing summed: PSUM gets +0.0).
BLOCK_EDGE_SHAPES = [(128, 128, 512), (5, 7, 37), (3, 4, 16), (2, 3, 15), (1, 1, 1), (17, 9, 33)]


@pytest.mark.parametrize("shape", [*BLOCK_EDGE_SHAPES, (0, 5, 17)])
@pytest.mark.parametrize("kind", ["fp32", "fp32_specials", "bf16", "fp8_e4m3"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul_is_the_partition_order_sum_bit_for_bit(
    shape: tuple[int, int, int], kind: str, accumulate: bool
) -> None:
    k, m, n = shape
    rng = np.random.default_rng([k, m, n, len(kind)])
    stationary = _operands_of_kind(rng, (k, m), kind)
    moving = _operands_of_kind(rng, (k, n), kind)
    start = mixed_f32(rng, (m, n))
    start[0, 0] = -0.0  # -0.0 + +0.0 is +0.0: the add into PSUM happens even for a zero sum
    acc = start.copy()
    K.matmul_accumulate(acc, stationary, moving, accumulate)
    expected = _partition_order_sum(start, stationary, moving, accumulate)
    _assert_same_bits(acc, expected, f"{kind} {shape} accumulate={accumulate}")


def test_matmul_rounds_each_product_before_adding_it() -> None:
    # Element (m, n) sums -a_m*b_n and then +a_m*b_n. Rounded separately (as specified) the two
    # products are exact negatives and the sum is +0.0; a fused multiply-add would add the exact
    # second product to the rounded first and leave the rounding error of a_m*b_n, which is not
    # zero for any of these operands. Shapes leave partial register blocks in both directions.
    rng = np.random.default_rng(7)
    m, n = 7, 37
    a = rng.uniform(1.0, 2.0, m).astype(np.float32)
    b = rng.uniform(1.0, 2.0, n).astype(np.float32)
    exact = a.astype(np.float64)[:, None] * b.astype(np.float64)[None, :]  # fp32 products fit
    assert np.all(exact != exact.astype(np.float32)), "every product must be inexact in fp32"
    stationary, moving = np.stack([-a, a]), np.stack([b, b])
    acc = np.full((m, n), np.nan, np.float32)
    K.matmul_accumulate(acc, stationary, moving, False)
    _assert_same_bits(acc, np.zeros((m, n), np.float32), "unfused product-then-sum")
    start = mixed_f32(rng, (m, n))
    acc = start.copy()
    K.matmul_accumulate(acc, stationary, moving, True)
    _assert_same_bits(acc, start + np.float32(0.0), "unfused, accumulated")


@pytest.mark.parametrize("n_chunk", [1, 3, 64, 100, 128])
def test_matmul_values_do_not_depend_on_how_the_free_dims_are_split(n_chunk: int) -> None:
    # The same product computed as one [128 x 512] matmul and as column or row chunks (two
    # lowerings tiling one op differently) must agree to the bit, on any host.
    rng = np.random.default_rng(4)
    stationary, moving = moderate_f32(rng, (128, 128)), moderate_f32(rng, (128, 512))
    whole = np.empty((128, 512), np.float32)
    K.matmul_accumulate(whole, stationary, moving, False)
    by_columns = np.empty_like(whole)
    for start in range(0, 512, n_chunk):
        cols = slice(start, min(start + n_chunk, 512))
        chunk = np.empty((128, cols.stop - start), np.float32)
        K.matmul_accumulate(chunk, stationary, moving[:, cols], False)
        by_columns[:, cols] = chunk
    assert_exact(by_columns, whole, f"columns in chunks of {n_chunk}")
    by_rows = np.empty_like(whole)
    for start in range(0, 128, 32):
        rows = slice(start, start + 32)
        chunk = np.empty((32, 512), np.float32)
        K.matmul_accumulate(chunk, stationary[:, rows], moving, False)
        by_rows[rows] = chunk
    assert_exact(by_rows, whole, "rows in chunks of 32")


def test_matmul_accumulates_over_contraction_tiles() -> None:
    # How TensorE builds a K = 512 product: four K = 128 matmuls into one PSUM accumulator.
    rng = np.random.default_rng(2)
    stationary, moving = moderate_f32(rng, (512, 128)), moderate_f32(rng, (512, 512))
    acc = np.full((128, 512), 99.0, np.float32)  # overwritten by the first (accumulate=False)
    for t in range(4):
        rows = slice(128 * t, 128 * (t + 1))
        K.matmul_accumulate(acc, stationary[rows], moving[rows], accumulate=t > 0)
    _check_against_float64(acc, stationary, moving, None)


def test_matmul_views_and_errors() -> None:
    rng = np.random.default_rng(3)
    big = moderate_f32(rng, (32, 64))
    stationary, moving = big[:, ::4], big.T[::2, :].T  # strided views: [32, 16] and [32, 32]
    psum = np.zeros((32, 64), np.float32)
    acc = psum[::2, ::2]  # writing in place through a strided view
    K.matmul_accumulate(acc, stationary, moving, False)
    _check_against_float64(psum[::2, ::2], stationary, moving, None)
    assert np.all(psum[1::2] == 0.0)
    with pytest.raises(ValueError, match="contraction"):
        K.matmul_accumulate(np.zeros((16, 32), np.float32), stationary[:8], moving, False)
    with pytest.raises(ValueError, match=r"acc must be \[M=16, N=32\]"):
        K.matmul_accumulate(np.zeros((32, 16), np.float32), stationary, moving, False)
    with pytest.raises(TypeError, match="acc must be a 2-D float32 ndarray"):
        K.matmul_accumulate(np.zeros((16, 32)), stationary, moving, False)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (128, 512), (128, 128)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint16])
def test_transpose(shape: tuple[int, int], dtype: type) -> None:
    x = np.random.default_rng(shape[1]).integers(0, 1000, size=shape).astype(dtype)
    got = K.transpose(x)
    assert got.flags.c_contiguous
    assert_exact(got, K.transpose_ref(x), "transpose")
    assert_exact(got, x.T.copy(), "x.T")

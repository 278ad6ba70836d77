"""TensorE kernels (nc_matmul into PSUM, nc_transpose) with NumPy twins.

A matmul's products are summed as a PE column sums them: each output element adds its K products
one after another, in partition order, in fp32 (a Numba loop that keeps a block of sums in vector
registers, each lane one element's running sum). BLAS (``np.matmul``) is about 20% faster, but
its summation order depends on the host's BLAS kernel, on the call's N and M and on the element's
place in the call: the same math tiled two ways, or run on two machines, gave results that differ
in the last bit. With a fixed order the simulated values depend only on what the program computes,
never on the host or on how a lowering split the free dimensions (as on the hardware, where a
column's sum does not depend on its neighbours). Every product is rounded to fp32 before it is
added, never fused with the add, so hosts with and without fused multiply-add agree as well.
"""

from __future__ import annotations

import numba
import numpy as np

from .lanes import LANES, add8, broadcast8, load8, mul_add8, store8, zeros8


def _matmul_operands(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(acc, np.ndarray) or acc.dtype != np.float32 or acc.ndim != 2:
        raise TypeError(
            f"acc must be a 2-D float32 ndarray (a PSUM accumulator [M, N]), got "
            f"{type(acc).__name__} {getattr(acc, 'dtype', '')} {getattr(acc, 'shape', '')}"
        )
    if not acc.flags.writeable:
        raise ValueError("acc is read-only; matmul_accumulate writes it in place")
    stationary = np.asarray(stationary)
    moving = np.asarray(moving)
    for name, arr in (("stationary", stationary), ("moving", moving)):
        if arr.dtype != np.float32 or arr.ndim != 2:
            raise TypeError(f"{name} must be 2-D float32, got {arr.dtype} {arr.shape}")
    k_stationary, m = stationary.shape
    k_moving, n = moving.shape
    if k_stationary != k_moving:
        raise ValueError(
            f"contraction (partition) sizes differ: stationary [K={k_stationary}, M={m}] vs "
            f"moving [K={k_moving}, N={n}]"
        )
    if acc.shape != (m, n):
        raise ValueError(
            f"acc must be [M={m}, N={n}] (stationary free size x moving free size), got {acc.shape}"
        )
    return stationary, moving


def matmul_accumulate(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray, accumulate: bool
) -> None:
    """TensorE ``nc_matmul`` into PSUM, in place: ``acc = (acc if accumulate else 0) + S.T @ V``.

    acc: f32[M, N] (written in place); stationary S: f32[K, M]; moving V: f32[K, N]; K is the
    partition (contraction) axis. Each element's K products are summed in partition order in
    fp32 (the module docstring says why), then added to ``acc`` with one fp32 rounding.
    """
    stationary, moving = _matmul_operands(acc, stationary, moving)
    out = acc if acc.flags.c_contiguous else np.ascontiguousarray(acc)
    _column_sums(
        out, np.ascontiguousarray(stationary), np.ascontiguousarray(moving), bool(accumulate)
    )
    if out is not acc:
        acc[...] = out


# The loop keeps a block of ROWS_PER_BLOCK output rows x COLUMNS_PER_STRIP output columns in
# registers (8 vectors of 8 lanes: with the two moving vectors, the broadcast weight and a
# product, 12 of AVX2's 16) while k runs over the whole contraction, so each step costs two
# vector loads and four broadcasts for 64 multiply-adds; a loop that keeps its sums in memory
# spends a load and a store per vector of sums per step, which bounds it at about half the speed.
# _block_sums names its eight sums one by one, so ROWS_PER_BLOCK and the two vectors per row are
# fixed by its code.
ROWS_PER_BLOCK = 4
COLUMNS_PER_STRIP = 2 * LANES


@numba.njit(cache=True, boundscheck=False)
def _column_sums(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray, accumulate: bool
) -> None:
    """``acc[m, n] (+)= sum over k in order of stationary[k, m] * moving[k, n]``, in fp32.

    All arrays C-contiguous. Each output element is one lane of one register, which starts at
    +0.0 and adds its K products in partition order (``mul_add8``: product rounded, then sum
    rounded), exactly as a scalar loop per element does; which block or lane an element falls
    in changes nothing in its sum. The operands are copied into layouts that the block loop
    reads contiguously, padded with zeros to whole blocks (padding lanes are never written out):
    the stationary operand once, the moving operand one strip of columns at a time into a
    buffer that stays in the L1 cache while every block of rows uses it.
    """
    k_size, m_size = stationary.shape
    n_size = moving.shape[1]
    weights = _pack_stationary(stationary)
    values = np.empty(k_size * COLUMNS_PER_STRIP, np.float32)
    sums = np.empty(ROWS_PER_BLOCK * COLUMNS_PER_STRIP, np.float32)
    out = acc.reshape(m_size * n_size)
    for n_start in range(0, n_size, COLUMNS_PER_STRIP):
        _pack_strip(values, moving, n_start)
        for block in range(_blocks(m_size, ROWS_PER_BLOCK)):
            _block_sums(sums, weights, block * k_size * ROWS_PER_BLOCK, values, k_size)
            _store_block(out, m_size, n_size, block * ROWS_PER_BLOCK, n_start, sums, accumulate)


@numba.njit(cache=True, inline="always")
def _blocks(size: int, per_block: int) -> int:
    return (size + per_block - 1) // per_block


@numba.njit(cache=True, inline="always")
def _block_sums(
    sums: np.ndarray, weights: np.ndarray, weights_start: int, values: np.ndarray, k_size: int
) -> None:
    """One block's sums over all K, into ``sums`` [ROWS_PER_BLOCK, COLUMNS_PER_STRIP] (flat).

    ``weights`` holds the block's [K, ROWS_PER_BLOCK] stationary values from ``weights_start``,
    ``values`` the strip's [K, COLUMNS_PER_STRIP] moving values.
    """
    row0_low, row0_high = zeros8(), zeros8()
    row1_low, row1_high = zeros8(), zeros8()
    row2_low, row2_high = zeros8(), zeros8()
    row3_low, row3_high = zeros8(), zeros8()
    weight_at, value_at = weights_start, 0
    for _ in range(k_size):
        low = load8(values, value_at)
        high = load8(values, value_at + LANES)
        weight = broadcast8(weights, weight_at)
        row0_low, row0_high = mul_add8(row0_low, weight, low), mul_add8(row0_high, weight, high)
        weight = broadcast8(weights, weight_at + 1)
        row1_low, row1_high = mul_add8(row1_low, weight, low), mul_add8(row1_high, weight, high)
        weight = broadcast8(weights, weight_at + 2)
        row2_low, row2_high = mul_add8(row2_low, weight, low), mul_add8(row2_high, weight, high)
        weight = broadcast8(weights, weight_at + 3)
        row3_low, row3_high = mul_add8(row3_low, weight, low), mul_add8(row3_high, weight, high)
        weight_at += ROWS_PER_BLOCK
        value_at += COLUMNS_PER_STRIP
    store8(sums, 0 * COLUMNS_PER_STRIP, row0_low)
    store8(sums, 0 * COLUMNS_PER_STRIP + LANES, row0_high)
    store8(sums, 1 * COLUMNS_PER_STRIP, row1_low)
    store8(sums, 1 * COLUMNS_PER_STRIP + LANES, row1_high)
    store8(sums, 2 * COLUMNS_PER_STRIP, row2_low)
    store8(sums, 2 * COLUMNS_PER_STRIP + LANES, row2_high)
    store8(sums, 3 * COLUMNS_PER_STRIP, row3_low)
    store8(sums, 3 * COLUMNS_PER_STRIP + LANES, row3_high)


@numba.njit(cache=True, inline="always")
def _store_block(
    out: np.ndarray,
    m_size: int,
    n_size: int,
    m_start: int,
    n_start: int,
    sums: np.ndarray,
    accumulate: bool,
) -> None:
    """``out[m, n] (+)= sums`` over the block's rows and columns that lie inside [M, N].

    ``out`` is the [M, N] accumulator, flat; ``acc + sum`` is one fp32 rounding per element.
    """
    rows = min(ROWS_PER_BLOCK, m_size - m_start)
    columns = min(COLUMNS_PER_STRIP, n_size - n_start)
    for row in range(rows):
        out_at = (m_start + row) * n_size + n_start
        sums_at = row * COLUMNS_PER_STRIP
        if columns == COLUMNS_PER_STRIP:
            for half in range(0, COLUMNS_PER_STRIP, LANES):
                total = load8(sums, sums_at + half)
                if accumulate:
                    total = add8(load8(out, out_at + half), total)
                store8(out, out_at + half, total)
        elif accumulate:
            for column in range(columns):
                out[out_at + column] += sums[sums_at + column]
        else:
            for column in range(columns):
                out[out_at + column] = sums[sums_at + column]


@numba.njit(cache=True, inline="always")
def _pack_stationary(stationary: np.ndarray) -> np.ndarray:
    """[K, M] -> [M blocks][K][ROWS_PER_BLOCK] (flat), the last block padded with zeros."""
    k_size, m_size = stationary.shape
    packed = np.empty(_blocks(m_size, ROWS_PER_BLOCK) * k_size * ROWS_PER_BLOCK, np.float32)
    to_at = 0
    for m_start in range(0, m_size, ROWS_PER_BLOCK):
        rows = min(ROWS_PER_BLOCK, m_size - m_start)
        for k in range(k_size):
            row = stationary[k]
            for lane in range(ROWS_PER_BLOCK):
                packed[to_at + lane] = row[m_start + lane] if lane < rows else np.float32(0.0)
            to_at += ROWS_PER_BLOCK
    return packed


@numba.njit(cache=True, inline="always")
def _pack_strip(values: np.ndarray, moving: np.ndarray, n_start: int) -> None:
    """``values`` [K, COLUMNS_PER_STRIP] (flat) = moving[:, n_start:] padded with zeros."""
    k_size, n_size = moving.shape
    columns = min(COLUMNS_PER_STRIP, n_size - n_start)
    source = moving.reshape(k_size * n_size)
    from_at, to_at = n_start, 0
    for _ in range(k_size):
        if columns == COLUMNS_PER_STRIP:
            store8(values, to_at, load8(source, from_at))
            store8(values, to_at + LANES, load8(source, from_at + LANES))
        else:
            for lane in range(COLUMNS_PER_STRIP):
                values[to_at + lane] = source[from_at + lane] if lane < columns else np.float32(0.0)
        from_at += n_size
        to_at += COLUMNS_PER_STRIP


def matmul_accumulate_ref(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray, accumulate: bool
) -> None:
    """Reference for ``matmul_accumulate``: float64 accumulation (products of fp32 values are
    exact in float64) of the whole expression, rounded once to fp32 into ``acc``."""
    stationary, moving = _matmul_operands(acc, stationary, moving)
    total = stationary.astype(np.float64).T @ moving.astype(np.float64)
    if accumulate:
        total += acc.astype(np.float64)
    with np.errstate(over="ignore"):
        acc[...] = total.astype(np.float32)


def transpose(x: np.ndarray) -> np.ndarray:
    """``nc_transpose``: [P, F] -> [F, P], bit-exact for any dtype (a new C-contiguous array)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"transpose needs a 2-D [P, F] tile, got shape {x.shape}")
    return np.ascontiguousarray(x.T)


def transpose_ref(x: np.ndarray) -> np.ndarray:
    """Reference for ``transpose``."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"transpose needs a 2-D [P, F] tile, got shape {x.shape}")
    out = np.empty((x.shape[1], x.shape[0]), dtype=x.dtype)
    for p in range(x.shape[0]):
        out[:, p] = x[p, :]
    return out

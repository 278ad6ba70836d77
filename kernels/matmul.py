"""TensorE kernels (nc_matmul into PSUM, nc_transpose) with NumPy twins.

A matmul's products are summed as a PE column sums them: each output element adds its K products
one after another, in partition order, in fp32 (a Numba loop). BLAS (``np.matmul``) would be about
2.5x faster, but its summation order depends on the host's BLAS kernel, on the call's N and M and
on the element's place in the call: the same math tiled two ways, or run on two machines, gave
results that differ in the last bit. With a fixed order the simulated values depend only on what
the program computes, never on the host or on how a lowering split the free dimensions (as on the
hardware, where a column's sum does not depend on its neighbours). Products of bf16 operands are
exact in fp32, so for them no host's fused multiply-add can change a bit either.
"""

from __future__ import annotations

import numba
import numpy as np


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
    _column_sums(
        acc, np.ascontiguousarray(stationary), np.ascontiguousarray(moving), bool(accumulate)
    )


@numba.njit(cache=True, boundscheck=False)
def _column_sums(
    acc: np.ndarray, stationary: np.ndarray, moving: np.ndarray, accumulate: bool
) -> None:
    """``acc[m, n] (+)= sum over k in order of stationary[k, m] * moving[k, n]``, in fp32.

    k runs outside n so that the inner loop walks a moving row and two column buffers
    contiguously (it vectorises across n, each element's sum keeping its own order); two output
    rows at a time read each moving row once for both.
    """
    k_size, m_size = stationary.shape
    n_size = moving.shape[1]
    columns = np.empty((2, n_size), np.float32)
    first, second = columns[0], columns[1]
    for m in range(0, m_size, 2):
        pair = m + 1 < m_size
        for n in range(n_size):
            first[n] = np.float32(0.0)
            second[n] = np.float32(0.0)
        for k in range(k_size):
            weight_first = stationary[k, m]
            weight_second = stationary[k, m + 1] if pair else np.float32(0.0)
            row = moving[k]
            for n in range(n_size):
                value = row[n]
                first[n] += weight_first * value
                second[n] += weight_second * value
        _store_column(acc[m], first, accumulate)
        if pair:
            _store_column(acc[m + 1], second, accumulate)


@numba.njit(cache=True, inline="always")
def _store_column(out: np.ndarray, column: np.ndarray, accumulate: bool) -> None:
    if accumulate:
        for n in range(out.shape[0]):
            out[n] += column[n]
    else:
        for n in range(out.shape[0]):
            out[n] = column[n]


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

"""TensorE kernels (nc_matmul into PSUM, nc_transpose) with NumPy twins.

The fast path calls NumPy's BLAS sgemm directly rather than a Numba loop: a 128x128x512 tile is
~17 MFLOP and BLAS runs it at full speed, so a tiled simulated matmul costs about what one big
``np.matmul`` costs. (Numba's own ``np.dot`` would need SciPy, which ``kernels`` does not use.)
"""

from __future__ import annotations

import threading

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
    partition (contraction) axis. The product is accumulated in fp32 by sgemm (its summation
    order and FMA use are BLAS's), then added to ``acc`` with one fp32 rounding.
    """
    stationary, moving = _matmul_operands(acc, stationary, moving)
    if accumulate:
        product = _scratch(acc.shape)
        np.matmul(stationary.T, moving, out=product)
        np.add(acc, product, out=acc)
    else:
        np.matmul(stationary.T, moving, out=acc)


_local = threading.local()
_MAX_SCRATCH_SHAPES = 8


def _scratch(shape: tuple[int, ...]) -> np.ndarray:
    """A reusable fp32 buffer of ``shape`` for this thread: saves a 256 KiB allocation per call."""
    buffers: dict[tuple[int, ...], np.ndarray] = _local.__dict__.setdefault("buffers", {})
    buffer = buffers.get(shape)
    if buffer is None:
        if len(buffers) >= _MAX_SCRATCH_SHAPES:
            buffers.clear()  # bound the memory held when tile shapes vary a lot
        buffer = buffers[shape] = np.empty(shape, np.float32)
    return buffer


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

"""A weight matrix copied into its prepared block layout (``bridge.values.PreparedLayout``).

The bridge rearranges every prepared weight on every call (weights are bound per call, never
cached: they may change between calls). A transposed weight (nn.Linear's [N, K]) is a gather
whose reads or writes stride across rows whichever loop is inner; done by torch or NumPy it
costs 10-30 ns per element, most of a BERT-large call. This copies it in square tiles that stay
in cache. It moves element bits only (any dtype, viewed as unsigned ints of its size), so the
result is the same bytes as the plain copy.
"""

from __future__ import annotations

import numba
import numpy as np

#: The side of the square tiles the transposing copy works in (elements).
_TILE = 32


@numba.njit(cache=True)
def _arrange(
    src: np.ndarray, out: np.ndarray, k: int, n: int, rows: int, block: int, transposed: bool
) -> None:
    tiles = (k + rows - 1) // rows
    for n0 in range(0, n, block):
        width = min(block, n - n0)
        start = rows * tiles * n0
        for k0 in range(0, tiles * rows, _TILE):
            for c0 in range(0, width, _TILE):
                c1 = min(c0 + _TILE, width)
                for kk in range(k0, min(k0 + _TILE, tiles * rows)):
                    base = start + ((kk % rows) * tiles + kk // rows) * width
                    if kk >= k:
                        out[base + c0 : base + c1] = 0
                    elif transposed:
                        for c in range(c0, c1):
                            out[base + c] = src[n0 + c, kk]
                    else:
                        out[base + c0 : base + c1] = src[kk, n0 + c0 : n0 + c1]


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def arrange_blocks(
    matrix: np.ndarray, k: int, n: int, rows: int, block: int, transposed: bool
) -> np.ndarray:
    """``matrix`` ([K, N], or [N, K] when ``transposed``) in blocks of ``block`` columns, each
    [rows, tiles, width] with row k of a block at ``(k % rows) * tiles * width + (k // rows) *
    width`` (rows past K are zeros): a new 1-D array of ``matrix``'s dtype."""
    expected = (n, k) if transposed else (k, n)
    if matrix.ndim != 2 or matrix.shape != expected:
        raise ValueError(f"expected a matrix of shape {expected}, got {matrix.shape}")
    bits = _BITS[matrix.dtype.itemsize]
    source = np.ascontiguousarray(matrix).view(bits)
    tiles = -(-k // rows)
    out = np.empty(rows * tiles * n, bits)
    _arrange(source, out, k, n, rows, block, transposed)
    return out.view(matrix.dtype)

"""GpSimdE and VectorE data-movement kernels (gather_rows, local_gather, n_gather, topk,
nonzero_with_count, sequence_bounds) with NumPy twins.

Moved values are int64 bit patterns (the instructions copy elements without conversion) or fp32
where a value is compared (topk). Index operands are int64; an index outside its table is the
caller's error to report, so the kernels check every index before moving anything.
"""

from __future__ import annotations

import numba
import numpy as np

from . import _checks

GPSIMD_GROUP = 16
"""Partitions one GpSimd core is wired to (core i: partitions 16i .. 16i + 15) [S1]."""


def _index_problem(index: np.ndarray, limit: int, what: str) -> None:
    bad = np.flatnonzero((index < 0) | (index >= limit))
    if bad.size:
        raise IndexError(
            f"{what}: index {int(index.flat[bad[0]])} at flat position {int(bad[0])} is outside "
            f"[0, {limit})"
        )


# ---------------------------------------------------------------------------------------------
# gather_rows (nc_stream_shuffle)


@numba.njit(cache=True)
def _gather_rows_jit(x: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    for r in range(rows.shape[0]):
        for i in range(x.shape[1]):
            out[r, i] = x[rows[r], i]


def gather_rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]``: int64[P, N] partitions picked by rows int64[M] -> int64[M, N]."""
    x = _checks.i64(x, "x", 2)
    rows = _checks.i64(rows, "rows", 1)
    _index_problem(rows, x.shape[0], "gather_rows")
    out = np.empty((rows.shape[0], x.shape[1]), dtype=np.int64)
    _gather_rows_jit(x, rows, out)
    return out


def gather_rows_ref(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Reference for ``gather_rows``."""
    x = _checks.i64(x, "x", 2)
    rows = _checks.i64(rows, "rows", 1)
    _index_problem(rows, x.shape[0], "gather_rows")
    return x[rows]


# ---------------------------------------------------------------------------------------------
# local_gather


def _core_indices(index: np.ndarray, valid: int) -> np.ndarray:
    """Each core's indices [cores, valid]: its 16 partitions' indices flattened partition first
    (column-major, nki.isa's ``flatten(order='F')`` [S16]), the first ``valid`` of them."""
    cores = index.shape[0] // GPSIMD_GROUP
    per_core = index.reshape(cores, GPSIMD_GROUP, index.shape[1])
    return np.ascontiguousarray(per_core.transpose(0, 2, 1).reshape(cores, -1)[:, :valid])


def _local_gather_operands(
    x: np.ndarray, index: np.ndarray, elements: int, valid: int
) -> tuple[np.ndarray, np.ndarray]:
    x = _checks.i64(x, "x", 2)
    index = _checks.i64(index, "index", 2)
    if x.shape[0] != index.shape[0] or x.shape[0] % GPSIMD_GROUP:
        raise ValueError(
            f"x and index need the same partitions, a multiple of {GPSIMD_GROUP}; got "
            f"{x.shape} and {index.shape}"
        )
    if not 1 <= valid <= GPSIMD_GROUP * index.shape[1] or elements < 1:
        raise ValueError(f"valid={valid} and elements={elements} do not fit index {index.shape}")
    starts = _core_indices(index, valid)
    _index_problem(starts, x.shape[1] - elements + 1, "local_gather")
    return x, starts


@numba.njit(cache=True)
def _local_gather_jit(x: np.ndarray, starts: np.ndarray, elements: int, out: np.ndarray) -> None:
    for p in range(x.shape[0]):
        core = p // GPSIMD_GROUP
        for k in range(starts.shape[1]):
            first = starts[core, k]
            for j in range(elements):
                out[p, k * elements + j] = x[p, first + j]


def local_gather(x: np.ndarray, index: np.ndarray, elements: int, valid: int) -> np.ndarray:
    """GpSimdE ``local_gather``: every partition of a 16-partition core group gathers, from its
    own row of x, ``elements`` contiguous elements at each of the group's first ``valid``
    indices (the group's index partitions flattened partition first) [S15][S16].

    x: int64[P, F] bit patterns; index: int64[P, I] element offsets into a row (the hardware
    index; nki.isa's reference multiplies row numbers by ``elements``). Returns
    int64[P, valid * elements]. An index whose elements leave the row is an IndexError (the
    hardware's behaviour is undefined).
    """
    x, starts = _local_gather_operands(x, index, int(elements), int(valid))
    out = np.empty((x.shape[0], starts.shape[1] * int(elements)), dtype=np.int64)
    _local_gather_jit(x, starts, int(elements), out)
    return out


def local_gather_ref(x: np.ndarray, index: np.ndarray, elements: int, valid: int) -> np.ndarray:
    """Reference for ``local_gather``."""
    x, starts = _local_gather_operands(x, index, int(elements), int(valid))
    columns = starts[:, :, None] + np.arange(int(elements))  # [cores, valid, elements]
    per_partition = np.repeat(columns.reshape(columns.shape[0], -1), GPSIMD_GROUP, axis=0)
    return np.take_along_axis(x, per_partition, axis=1)


# ---------------------------------------------------------------------------------------------
# n_gather


@numba.njit(cache=True)
def _n_gather_jit(x: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    for p in range(x.shape[0]):
        for i in range(index.shape[1]):
            out[p, i] = x[p, index[p, i]]


def _n_gather_operands(x: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = _checks.i64(x, "x", 2)
    index = _checks.i64(index, "index", 2)
    if index.shape[0] != x.shape[0]:
        raise ValueError(f"x {x.shape} and index {index.shape} need the same partitions")
    _index_problem(index, x.shape[1], "n_gather")
    return x, index


def n_gather(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """GpSimdE ``nc_n_gather``: out[p, i] = x[p, index[p, i]] within each partition [S15].
    x int64[P, F] bit patterns, index int64[P, M] in [0, F); returns int64[P, M]."""
    x, index = _n_gather_operands(x, index)
    out = np.empty(index.shape, dtype=np.int64)
    _n_gather_jit(x, index, out)
    return out


def n_gather_ref(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Reference for ``n_gather``."""
    x, index = _n_gather_operands(x, index)
    return np.take_along_axis(x, index, axis=1)


# ---------------------------------------------------------------------------------------------
# topk


def _snake_operands(x: np.ndarray, n: int, k: int) -> np.ndarray:
    x = _checks.f32(x, "x", 2)
    if x.shape[0] % GPSIMD_GROUP or not 1 <= k <= n <= x.shape[1] * GPSIMD_GROUP:
        raise ValueError(
            f"topk needs partitions a multiple of {GPSIMD_GROUP} and 1 <= k <= n <= 16 * "
            f"columns; got x {x.shape}, n={n}, k={k}"
        )
    return x


def _snakes(x: np.ndarray, n: int) -> np.ndarray:
    """Each group's snake as a row: element s = x[16g + s % 16, s // 16], s < n: f32[G, n]."""
    groups = x.shape[0] // GPSIMD_GROUP
    per_group = x.reshape(groups, GPSIMD_GROUP, x.shape[1]).transpose(0, 2, 1)
    return np.ascontiguousarray(per_group.reshape(groups, -1)[:, :n])


@numba.njit(cache=True)
def _topk_jit(snakes: np.ndarray, k: int, values: np.ndarray, indices: np.ndarray) -> None:
    for g in range(snakes.shape[0]):
        # Stable descending order: by value, ties to the lower index (NaN ranks lowest).
        order = np.argsort(-snakes[g], kind="mergesort")
        for j in range(k):
            rank = k - 1 - j  # written in ascending order of value
            values[g, j] = snakes[g, order[rank]]
            indices[g, j] = order[rank]


def _unsnake(values: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Results [G, k] in snake layout: result j at partition 16g + j % 16, column j // 16;
    slots past k in the last column hold -inf and index -1."""
    groups = values.shape[0]
    columns = -(-k // GPSIMD_GROUP)
    slots = columns * GPSIMD_GROUP
    v = np.full((groups, slots), -np.inf, dtype=np.float32)
    i = np.full((groups, slots), -1, dtype=np.int64)
    v[:, :k], i[:, :k] = values, indices
    rows = groups * GPSIMD_GROUP
    v_snake = v.reshape(groups, columns, GPSIMD_GROUP).transpose(0, 2, 1).reshape(rows, columns)
    i_snake = i.reshape(groups, columns, GPSIMD_GROUP).transpose(0, 2, 1).reshape(rows, columns)
    return np.ascontiguousarray(v_snake), np.ascontiguousarray(i_snake)


def topk(x: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """GpSimdE ``topk`` over 16-partition snakes [S15]: each group of 16 partitions of x
    f32[P, X] holds one snake of n elements (element s at partition s % 16, column s // 16);
    its k largest values and their snake indices are written in the same snake layout, in
    ascending order of value (result j at partition j % 16, column j // 16).

    Returns (values f32[P, ceil(k/16)], indices int64[P, ceil(k/16)]); the slots of the last
    column past k hold -inf and -1. Equal values rank by lower index; NaN ranks lowest.
    """
    x = _snake_operands(x, int(n), int(k))
    snakes = _snakes(x, int(n))
    values = np.empty((snakes.shape[0], int(k)), dtype=np.float32)
    indices = np.empty((snakes.shape[0], int(k)), dtype=np.int64)
    _topk_jit(snakes, int(k), values, indices)
    return _unsnake(values, indices, int(k))


def topk_ref(x: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``topk``."""
    x = _snake_operands(x, int(n), int(k))
    snakes = _snakes(x, int(n))
    order = np.argsort(-snakes, axis=1, kind="stable")[:, : int(k)][:, ::-1]
    values = np.take_along_axis(snakes, order, axis=1)
    return _unsnake(values, order.astype(np.int64), int(k))


# ---------------------------------------------------------------------------------------------
# nonzero_with_count


@numba.njit(cache=True)
def _nonzero_jit(x: np.ndarray, offset: int, padding: int, out: np.ndarray) -> None:
    for p in range(x.shape[0]):
        count = 0
        for i in range(x.shape[1]):
            if x[p, i] != 0:
                out[p, count] = i + offset
                count += 1
        for i in range(count, x.shape[1]):
            out[p, i] = padding
        out[p, x.shape[1]] = count


def nonzero_with_count(x: np.ndarray, offset: int, padding: int) -> np.ndarray:
    """GpSimdE ``nonzero_with_count`` per row of x (f32 or int64 [R, T]): the indices (plus
    ``offset``) of its nonzero elements, then ``padding`` up to T, then their count:
    int64[R, T + 1] [S15]."""
    x = _checks.numeric(x, "x", 2)
    out = np.empty((x.shape[0], x.shape[1] + 1), dtype=np.int64)
    _nonzero_jit(x, int(offset), int(padding), out)
    return out


def nonzero_with_count_ref(x: np.ndarray, offset: int, padding: int) -> np.ndarray:
    """Reference for ``nonzero_with_count`` (nki.isa's pseudo code [S15])."""
    x = _checks.numeric(x, "x", 2)
    out = np.full((x.shape[0], x.shape[1] + 1), int(padding), dtype=np.int64)
    for r in range(x.shape[0]):
        found = np.flatnonzero(x[r] != 0)
        out[r, : found.size] = found + int(offset)
        out[r, -1] = found.size
    return out


# ---------------------------------------------------------------------------------------------
# sequence_bounds


@numba.njit(cache=True)
def _bounds_jit(ids: np.ndarray, out: np.ndarray) -> None:
    n = ids.shape[0]
    for i in range(n):
        if ids[i] == 0:
            out[0, i] = n
        elif i > 0 and ids[i] == ids[i - 1]:
            out[0, i] = out[0, i - 1]
        else:
            out[0, i] = i
    for i in range(n - 1, -1, -1):
        if ids[i] == 0:
            out[1, i] = -1
        elif i < n - 1 and ids[i] == ids[i + 1]:
            out[1, i] = out[1, i + 1]
        else:
            out[1, i] = i + 1


def _bounds_operand(ids: np.ndarray) -> np.ndarray:
    ids = _checks.numeric(ids, "ids", 1)
    if ids.size and ids.min() < 0:
        raise ValueError(f"segment ids must be non-negative, got {ids.min()}")
    return ids


def sequence_bounds(ids: np.ndarray) -> np.ndarray:
    """GpSimdE ``sequence_bounds`` of one row of segment ids (f32 or int64 [N], non-negative):
    int64[2, N], row 0 the start index of each element's segment, row 1 its end (exclusive);
    padding elements (id 0) get start N and end -1 (nki.isa's NumPy equivalent [S16])."""
    ids = _bounds_operand(ids)
    out = np.empty((2, ids.shape[0]), dtype=np.int64)
    _bounds_jit(ids, out)
    return out


def sequence_bounds_ref(ids: np.ndarray) -> np.ndarray:
    """Reference for ``sequence_bounds``, vectorised: a segment starts where the id changes."""
    ids = _bounds_operand(ids)
    n = ids.shape[0]
    index = np.arange(n)
    starts_here = np.ones(n, dtype=bool)
    starts_here[1:] = ids[1:] != ids[:-1]
    ends_here = np.ones(n, dtype=bool)
    ends_here[:-1] = ids[:-1] != ids[1:]
    start = np.maximum.accumulate(np.where(starts_here, index, 0))
    end = np.minimum.accumulate(np.where(ends_here, index + 1, n)[::-1])[::-1]
    padding = ids == 0
    return np.vstack((np.where(padding, n, start), np.where(padding, -1, end))).astype(np.int64)

"""Reduction kernels (tensor_reduce, tensor_partition_reduce, bn_stats, bn_aggr) with NumPy twins.

Float reductions run an fp32 accumulator in index order (element 0 first), as a hardware
accumulator does; their references compute the exact-then-rounded value (float64, rounded once),
so add and multiply differ from them by at most the usual summation/product error bounds while max
and min agree exactly (NaN-propagating). Integer reductions take int64 carrying 32-bit values and
are exact in int64 (multiply wraps modulo 2^64; the low 32 bits are the hardware result).
"""

from __future__ import annotations

import numba
import numpy as np

from . import _checks
from .alu import alu_i64
from .ops import INTEGER_ONLY_REDUCE_OPS, ReduceOp
from .rows import reduce_row

BN_STATS_WIDTH = 6
"""Elements per partition written by ``bn_stats``: (count, mean, M2) of even, then odd elements."""

BN_GROUP_WIDTH = 3
"""Elements of one (count, mean, M2) group; ``bn_aggr`` reads any number of such groups."""

# ---------------------------------------------------------------------------------------------
# tensor_reduce / tensor_partition_reduce


@numba.njit(cache=True, error_model="numpy")
def _reduce_f32_jit(x: np.ndarray, op: int, negate: bool, out: np.ndarray) -> None:
    parts, groups, _ = x.shape
    for p in range(parts):
        for g in range(groups):
            acc = reduce_row(x[p, g], op)
            out[p, g] = -acc if negate else acc


@numba.njit(cache=True)
def _reduce_i64_jit(x: np.ndarray, op: int, negate: bool, out: np.ndarray) -> None:
    parts, groups, size = x.shape
    for p in range(parts):
        for g in range(groups):
            acc = x[p, g, 0]
            for r in range(1, size):
                acc = alu_i64(acc, x[p, g, r], op)
            out[p, g] = -acc if negate else acc


def _reduce_operands(x: np.ndarray, op: int, name: str) -> tuple[np.ndarray, int]:
    x = _checks.numeric(x, name, 3)
    if x.shape[2] == 0:
        raise ValueError(f"{name} has an empty reduction axis (shape {x.shape})")
    op = _checks.op_id(op, ReduceOp, "op")
    if x.dtype == np.float32 and ReduceOp(op) in INTEGER_ONLY_REDUCE_OPS:
        raise ValueError(f"op={ReduceOp(op).name} needs integer data, got float32")
    return x, op


def _reduce_innermost(x: np.ndarray, op: int, negate: bool) -> np.ndarray:
    out = np.empty(x.shape[:2], dtype=x.dtype)
    if x.dtype == np.float32:
        _reduce_f32_jit(x, op, bool(negate), out)
    else:
        _reduce_i64_jit(x, op, bool(negate), out)
    return out


def _reduce_innermost_ref(x: np.ndarray, op: int, negate: bool) -> np.ndarray:
    rop = ReduceOp(op)
    with np.errstate(all="ignore"):
        if x.dtype == np.float32:
            wide = x.astype(np.float64)
            if rop == ReduceOp.add:
                out = wide.sum(axis=2).astype(np.float32)
            elif rop == ReduceOp.multiply:
                out = wide.prod(axis=2).astype(np.float32)
            else:
                out = (np.max if rop == ReduceOp.max else np.min)(x, axis=2)
        else:
            reducers = {
                ReduceOp.add: np.add,
                ReduceOp.multiply: np.multiply,
                ReduceOp.max: np.maximum,
                ReduceOp.min: np.minimum,
                ReduceOp.bitwise_or: np.bitwise_or,
                ReduceOp.bitwise_and: np.bitwise_and,
            }
            out = reducers[rop].reduce(x, axis=2)
        return -out if negate else out


def tensor_reduce(x: np.ndarray, op: int, negate: bool = False) -> np.ndarray:
    """VectorE ``tensor_reduce``: reduce the innermost axis of ``x[P, G, R]`` to ``[P, G]``.

    hwsim reshapes the free axes so the reduced ones are R (innermost) and the kept ones G.
    x is f32 (ops add, max, min, multiply) or an integer array (also bitwise_or/bitwise_and);
    the result has x's working dtype (f32 or int64). ``negate`` multiplies the result by -1.
    """
    x, op = _reduce_operands(x, op, "x")
    return _reduce_innermost(x, op, negate)


def tensor_reduce_ref(x: np.ndarray, op: int, negate: bool = False) -> np.ndarray:
    """Reference for ``tensor_reduce`` (add/multiply exact-then-rounded for f32)."""
    x, op = _reduce_operands(x, op, "x")
    return _reduce_innermost_ref(x, op, negate)


def _partition_major(x: np.ndarray) -> np.ndarray:
    # [P, N] -> [1, N, P]: the partition axis becomes the innermost (reduced) axis.
    x = _checks.numeric(x, "x", 2)
    return np.ascontiguousarray(x.T)[None, :, :]


def tensor_partition_reduce(x: np.ndarray, op: int) -> np.ndarray:
    """GpSimdE ``tensor_partition_reduce``: reduce ``x[P, N]`` across partitions to ``[1, N]``.

    Accumulates partition 0 first. f32 data: add, max, min, multiply; integer data: also
    bitwise_or and bitwise_and (int64 out).
    """
    x, op = _reduce_operands(_partition_major(x), op, "x")
    return _reduce_innermost(x, op, False)


def tensor_partition_reduce_ref(x: np.ndarray, op: int) -> np.ndarray:
    """Reference for ``tensor_partition_reduce``."""
    x, op = _reduce_operands(_partition_major(x), op, "x")
    return _reduce_innermost_ref(x, op, False)


# ---------------------------------------------------------------------------------------------
# bn_stats / bn_aggr


@numba.njit(cache=True, error_model="numpy")
def _bn_stats_jit(x: np.ndarray, out: np.ndarray) -> None:
    parts, size = x.shape
    for p in range(parts):
        for parity in range(2):
            count = (size - parity + 1) // 2
            mean = 0.0
            m2 = 0.0
            if count > 0:
                total = 0.0
                for i in range(parity, size, 2):
                    total += np.float64(x[p, i])
                mean = total / count
                for i in range(parity, size, 2):
                    d = np.float64(x[p, i]) - mean
                    m2 += d * d
            out[p, 3 * parity] = np.float32(count)
            out[p, 3 * parity + 1] = np.float32(mean)
            out[p, 3 * parity + 2] = np.float32(m2)


def bn_stats(x: np.ndarray) -> np.ndarray:
    """VectorE ``bn_stats``: per-partition statistics of ``x`` f32[P, N] as f32[P, 6].

    Layout per partition (as nki.isa documents it): ``[count_even, mean_even, M2_even,
    count_odd, mean_odd, M2_odd]`` where "even" are the elements at free index 0, 2, 4, … and
    "odd" those at 1, 3, 5, …; M2 is variance * count (sum of squared deviations). An empty group
    (odd, when N = 1) is (0, 0, 0). Computed in float64 and rounded once to fp32. The hardware
    limits N to 512 (``bn_stats_fmax``); that limit is hwsim's legality check, not enforced here.
    """
    x = _checks.f32(x, "x", 2)
    if x.shape[1] == 0:
        raise ValueError(f"bn_stats needs at least one element per partition, got shape {x.shape}")
    out = np.empty((x.shape[0], BN_STATS_WIDTH), np.float32)
    _bn_stats_jit(x, out)
    return out


def bn_stats_ref(x: np.ndarray) -> np.ndarray:
    """Reference for ``bn_stats``."""
    x = _checks.f32(x, "x", 2)
    if x.shape[1] == 0:
        raise ValueError(f"bn_stats needs at least one element per partition, got shape {x.shape}")
    columns = []
    for parity in range(2):
        part = x[:, parity::2].astype(np.float64)
        count = part.shape[1]
        mean = part.mean(axis=1) if count else np.zeros(x.shape[0])
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1)
        columns += [np.full(x.shape[0], float(count)), mean, m2]
    return np.stack(columns, axis=1).astype(np.float32)


@numba.njit(cache=True, error_model="numpy")
def _bn_aggr_jit(stats: np.ndarray, out: np.ndarray) -> None:
    parts, width = stats.shape
    for p in range(parts):
        count = 0.0
        mean = 0.0
        m2 = 0.0
        for g in range(width // 3):
            n_b = np.float64(stats[p, 3 * g])
            if n_b == 0.0:
                continue
            mean_b = np.float64(stats[p, 3 * g + 1])
            m2_b = np.float64(stats[p, 3 * g + 2])
            n_ab = count + n_b
            delta = mean_b - mean
            # Chan et al. parallel update of (count, mean, M2).
            mean += delta * (n_b / n_ab)
            m2 += m2_b + delta * delta * (count * n_b / n_ab)
            count = n_ab
        if count == 0.0:
            out[p, 0] = np.float32(np.nan)
            out[p, 1] = np.float32(np.nan)
        else:
            out[p, 0] = np.float32(mean)
            out[p, 1] = np.float32(m2 / count)


def _bn_aggr_operand(stats: np.ndarray) -> np.ndarray:
    stats = _checks.f32(stats, "stats", 2)
    if stats.shape[1] == 0 or stats.shape[1] % BN_GROUP_WIDTH:
        raise ValueError(
            "bn_aggr stats must hold whole (count, mean, M2) groups: free size a positive "
            f"multiple of {BN_GROUP_WIDTH} (6 per bn_stats output), got shape {stats.shape}"
        )
    return stats


def bn_aggr(stats: np.ndarray) -> np.ndarray:
    """VectorE ``bn_aggr``: combine (count, mean, M2) groups into f32[P, 2] = (mean, variance).

    ``stats`` is f32[P, 3k], e.g. several ``bn_stats`` outputs side by side (6 values each);
    groups with count 0 are skipped. Groups are merged left to right with Chan's parallel formula
    in float64 and rounded once to fp32; the variance is the population variance M2 / count.
    All-empty partitions give (NaN, NaN).
    """
    stats = _bn_aggr_operand(stats)
    out = np.empty((stats.shape[0], 2), np.float32)
    _bn_aggr_jit(stats, out)
    return out


def bn_aggr_ref(stats: np.ndarray) -> np.ndarray:
    """Reference for ``bn_aggr`` in closed form: mean = Σn·m / Σn, M2 = ΣM2 + Σn·(m - mean)²."""
    stats = _bn_aggr_operand(stats).astype(np.float64)
    counts = stats[:, 0::3]
    means = np.where(counts == 0.0, 0.0, stats[:, 1::3])
    m2s = np.where(counts == 0.0, 0.0, stats[:, 2::3])
    total = counts.sum(axis=1)
    with np.errstate(all="ignore"):
        mean = (counts * means).sum(axis=1) / total
        m2 = m2s.sum(axis=1) + (counts * (means - mean[:, None]) ** 2).sum(axis=1)
        return np.stack([mean, m2 / total], axis=1).astype(np.float32)

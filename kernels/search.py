"""VectorE search and select kernels (max8, find_index8, match_replace8, range_select,
select_reduce, copy_predicated, accumulate) with NumPy twins.

Operands follow ``elementwise``'s conventions: ``[P, N]`` fp32 (or int64 bit patterns for the
bit-exact copy), reductions per partition. Comparisons are fp32 comparisons (NaN equals nothing).
"""

from __future__ import annotations

import numba
import numpy as np

from . import _checks
from ._checks import Scalar
from .alu import alu_f32, alu_f32_ref
from .ops import COMPARISON_OPS, AluOp

TOP8 = 8
"""Values per partition max8 / nc_find_index8 / nc_match_replace8 work with [S15]."""
#: Ops the VectorE accumulator registers reduce with (activate2's set [S15]; exponential, range
#: and select reductions use add or max of it).
ACCUMULATE_OPS: frozenset[AluOp] = frozenset(
    {AluOp.add, AluOp.max, AluOp.min, AluOp.abs_max, AluOp.abs_min}
)
#: Start value of an accumulator reset for each op (reduce_cmd reset / reset_reduce).
ACCUMULATE_IDENTITY: dict[AluOp, float] = {
    AluOp.add: 0.0,
    AluOp.max: float("-inf"),
    AluOp.min: float("inf"),
    AluOp.abs_max: 0.0,
    AluOp.abs_min: float("inf"),
}
NOT_FOUND = -1
"""Index the search kernels return for a value that does not occur."""

# ---------------------------------------------------------------------------------------------
# max8


def _sort_descending_ref(x: np.ndarray) -> np.ndarray:
    # Sorting the negated values puts NaN last: NaN ranks below -inf.
    return -np.sort(-x, axis=1)


@numba.njit(cache=True)
def _max8_jit(x: np.ndarray, out: np.ndarray) -> None:
    for p in range(x.shape[0]):
        row = np.sort(-x[p])
        for j in range(TOP8):
            out[p, j] = -row[j]


def _max8_operand(x: np.ndarray) -> np.ndarray:
    x = _checks.f32(x, "x", 2)
    if x.shape[1] < TOP8:
        raise ValueError(f"max8 needs at least {TOP8} elements per partition, got {x.shape[1]}")
    return x


def max8(x: np.ndarray) -> np.ndarray:
    """The 8 largest values of each partition of f32[P, N] (N >= 8), descending: f32[P, 8].

    NaN ranks below -inf (the simulator's choice; nki.isa does not say)."""
    x = _max8_operand(x)
    out = np.empty((x.shape[0], TOP8), dtype=np.float32)
    _max8_jit(x, out)
    return out


def max8_ref(x: np.ndarray) -> np.ndarray:
    """Reference for ``max8``."""
    return np.ascontiguousarray(_sort_descending_ref(_max8_operand(x))[:, :TOP8])


# ---------------------------------------------------------------------------------------------
# find_index8 / match_replace8


@numba.njit(cache=True)
def _find_jit(
    x: np.ndarray, vals: np.ndarray, replace: bool, imm: np.float32, out: np.ndarray
) -> None:
    for p in range(x.shape[0]):
        for j in range(vals.shape[1]):
            out[p, j] = NOT_FOUND
            for i in range(x.shape[1]):
                if x[p, i] == vals[p, j]:
                    out[p, j] = i
                    if replace:
                        x[p, i] = imm
                    break


def _search_operands(x: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = _checks.f32(x, "x", 2)
    vals = _checks.f32(vals, "vals", 2)
    if vals.shape != (x.shape[0], TOP8):
        raise ValueError(f"vals must be [{x.shape[0]}, {TOP8}], got shape {vals.shape}")
    return x, vals


def find_index8(x: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Per partition, the index of the first element of x f32[P, N] equal to each of the 8
    values vals f32[P, 8]: int64[P, 8], ``NOT_FOUND`` (-1) where a value does not occur."""
    x, vals = _search_operands(x, vals)
    out = np.empty(vals.shape, dtype=np.int64)
    _find_jit(x, vals, False, np.float32(0), out)
    return out


def find_index8_ref(x: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Reference for ``find_index8``."""
    x, vals = _search_operands(x, vals)
    hit = x[:, None, :] == vals[:, :, None]  # [P, 8, N]
    first = np.argmax(hit, axis=2)
    return np.where(hit.any(axis=2), first, NOT_FOUND).astype(np.int64)


def match_replace8(x: np.ndarray, vals: np.ndarray, imm: float) -> tuple[np.ndarray, np.ndarray]:
    """nc_match_replace8: for each of the 8 values in order, replace its first occurrence in x
    (f32[P, N]) with ``imm``; a later equal value finds the next occurrence, the first one being
    replaced already (the nki.isa NumPy equivalent [S16]). Returns (x replaced f32[P, N], the
    indices int64[P, 8], ``NOT_FOUND`` where a value was not matched)."""
    x, vals = _search_operands(x, vals)
    x = x.copy()
    out = np.empty(vals.shape, dtype=np.int64)
    _find_jit(x, vals, True, np.float32(imm), out)
    return x, out


def match_replace8_ref(
    x: np.ndarray, vals: np.ndarray, imm: float
) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``match_replace8`` (the loop of nki.isa's NumPy equivalent)."""
    x, vals = _search_operands(x, vals)
    x = x.copy()
    out = np.full(vals.shape, NOT_FOUND, dtype=np.int64)
    for p in range(x.shape[0]):
        for j in range(vals.shape[1]):
            matches = np.flatnonzero(x[p] == vals[p, j])
            if matches.size:
                out[p, j] = matches[0]
                x[p, matches[0]] = np.float32(imm)
    return x, out


# ---------------------------------------------------------------------------------------------
# range_select / select_reduce / copy_predicated


@numba.njit(cache=True, error_model="numpy")
def _range_select_jit(
    x: np.ndarray,
    bound0: np.ndarray,
    bound1: np.ndarray,
    op0: int,
    op1: int,
    start: int,
    on_false: np.float32,
    out: np.ndarray,
) -> None:
    for p in range(x.shape[0]):
        for i in range(x.shape[1]):
            index = np.float32(start + i)
            keep = alu_f32(index, bound0[p], op0) != 0 and alu_f32(index, bound1[p], op1) != 0
            out[p, i] = x[p, i] if keep else on_false


def _range_operands(
    x: np.ndarray, bound0: np.ndarray | Scalar, bound1: np.ndarray | Scalar, op0: int, op1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    x = _checks.f32(x, "x", 2)
    ops = []
    for name, op in (("op0", op0), ("op1", op1)):
        value = _checks.op_id(op, AluOp, name)
        if AluOp(value) not in COMPARISON_OPS:
            raise ValueError(f"{name}={AluOp(value).name} is not a comparison")
        ops.append(value)
    b0 = _checks.per_partition(bound0, x.shape[0], "bound0")
    b1 = _checks.per_partition(bound1, x.shape[0], "bound1")
    return x, b0, b1, ops[0], ops[1]


def range_select(
    x: np.ndarray,
    bound0: np.ndarray | Scalar,
    bound1: np.ndarray | Scalar,
    op0: int,
    op1: int,
    range_start: int,
    on_false: float,
) -> np.ndarray:
    """range_select: x[p, i] where ``op0(start + i, bound0[p])`` and ``op1(start + i,
    bound1[p])`` hold, else on_false; the index ``start + i`` is compared in fp32 [S15].
    x f32[P, N]; bounds f32[P]; ops comparisons. Returns f32[P, N]."""
    x, b0, b1, op0, op1 = _range_operands(x, bound0, bound1, op0, op1)
    out = np.empty_like(x)
    _range_select_jit(x, b0, b1, op0, op1, int(range_start), np.float32(on_false), out)
    return out


def range_select_ref(x, bound0, bound1, op0, op1, range_start, on_false):
    """Reference for ``range_select`` (nki.isa's NumPy equivalent [S15])."""
    x, b0, b1, op0, op1 = _range_operands(x, bound0, bound1, op0, op1)
    index = np.broadcast_to((int(range_start) + np.arange(x.shape[1])).astype(np.float32), x.shape)
    mask = (alu_f32_ref(index, b0[:, None], op0) != 0) & (alu_f32_ref(index, b1[:, None], op1) != 0)
    return np.where(mask, x, np.float32(on_false))


@numba.njit(cache=True)
def _select_jit(
    pred: np.ndarray, on_true: np.ndarray, otherwise: np.ndarray, reverse: bool, out: np.ndarray
) -> None:
    # out = on_true where pred is nonzero (zero if reverse), else otherwise; all [P, N]
    for p in range(out.shape[0]):
        for i in range(out.shape[1]):
            out[p, i] = on_true[p, i] if (pred[p, i] != 0) != reverse else otherwise[p, i]


def _select_operands(
    pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray | Scalar
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pred = _checks.i64(pred, "pred", 2)
    on_true = _checks.f32(on_true, "on_true", 2)
    _checks.same_shape(pred, on_true, "pred and on_true")
    return pred, on_true, _checks.per_partition(on_false, on_true.shape[0], "on_false")


def select_reduce(
    pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray | Scalar, reverse: bool = False
) -> np.ndarray:
    """select_reduce's select: on_true[p, i] where pred[p, i] is nonzero (zero if ``reverse``),
    else on_false[p]. pred int64[P, N]; on_true f32[P, N]; on_false f32[P] or a scalar."""
    pred, on_true, on_false = _select_operands(pred, on_true, on_false)
    out = np.empty_like(on_true)
    otherwise = np.broadcast_to(on_false[:, None], on_true.shape)
    _select_jit(pred, on_true, otherwise, bool(reverse), out)
    return out


def select_reduce_ref(
    pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray | Scalar, reverse: bool = False
) -> np.ndarray:
    """Reference for ``select_reduce``."""
    pred, on_true, on_false = _select_operands(pred, on_true, on_false)
    take = (pred != 0) != bool(reverse)
    return np.where(take, on_true, on_false[:, None])


def _copy_operands(
    old: np.ndarray, src: np.ndarray, pred: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    old = _checks.i64(old, "old", 2)
    src = _checks.i64(src, "src", 2)
    pred = _checks.i64(pred, "pred", 2)
    _checks.same_shape(old, src, "old and src")
    _checks.same_shape(old, pred, "old and pred")
    return old, src, pred


def copy_predicated(
    old: np.ndarray, src: np.ndarray, pred: np.ndarray, reverse: bool = False
) -> np.ndarray:
    """tensor_copy_predicated on bit patterns: src where pred is nonzero (zero if ``reverse``),
    else the destination's old bits. All int64[P, N] (the elements' bits as unsigned integers)."""
    old, src, pred = _copy_operands(old, src, pred)
    out = np.empty_like(old)
    _select_jit(pred, src, old, bool(reverse), out)
    return out


def copy_predicated_ref(
    old: np.ndarray, src: np.ndarray, pred: np.ndarray, reverse: bool = False
) -> np.ndarray:
    """Reference for ``copy_predicated``."""
    old, src, pred = _copy_operands(old, src, pred)
    return np.where((pred != 0) != bool(reverse), src, old)


# ---------------------------------------------------------------------------------------------
# accumulator reductions


@numba.njit(cache=True, error_model="numpy")
def _accumulate_jit(x: np.ndarray, op: int, initial: np.ndarray, out: np.ndarray) -> None:
    for p in range(x.shape[0]):
        acc = initial[p]
        for i in range(x.shape[1]):
            acc = alu_f32(acc, x[p, i], op)
        out[p] = acc


def _accumulate_operands(
    x: np.ndarray, op: int, initial: np.ndarray | Scalar
) -> tuple[np.ndarray, int, np.ndarray]:
    x = _checks.f32(x, "x", 2)
    value = _checks.op_id(op, AluOp, "op")
    if AluOp(value) not in ACCUMULATE_OPS:
        valid = ", ".join(sorted(o.name for o in ACCUMULATE_OPS))
        raise ValueError(f"op={AluOp(value).name} is not an accumulator reduction; valid: {valid}")
    return x, value, _checks.per_partition(initial, x.shape[0], "initial")


def accumulate(x: np.ndarray, op: int, initial: np.ndarray | Scalar) -> np.ndarray:
    """An accumulator register per partition: ``acc = op(acc, x[p, i])`` over i in order from
    ``initial`` (f32[P] or a scalar), in fp32. x f32[P, N]; op add, max, min, abs_max, abs_min.
    Returns f32[P]."""
    x, op, initial = _accumulate_operands(x, op, initial)
    out = np.empty(x.shape[0], dtype=np.float32)
    _accumulate_jit(x, op, initial, out)
    return out


def accumulate_ref(x: np.ndarray, op: int, initial: np.ndarray | Scalar) -> np.ndarray:
    """Reference for ``accumulate``."""
    x, op, acc = _accumulate_operands(x, op, initial)
    with np.errstate(all="ignore"):
        for i in range(x.shape[1]):
            acc = alu_f32_ref(acc, x[:, i], op)
    return acc

"""Scans and fused reductions (tensor_tensor_scan, tensor_scalar_cumulative, tensor_scalar_reduce).

Each kernel has a NumPy twin.

Operands are ``[P, N]`` fp32 (``elementwise``'s conventions); every ALU step rounds to fp32 and
the running value of a scan is carried in fp32 from element 0 on, as VectorE computes in fp32
(HARDWARE.md §3). The per-element semantics are ``kernels.alu``'s; the references are plain
NumPy loops over the free axis (vectorised over partitions), so the scans agree with them bit for
bit on every op whose fp32 result IEEE 754 defines exactly.
"""

from __future__ import annotations

import numba
import numpy as np

from . import _checks
from ._checks import Scalar
from .alu import alu_f32, alu_f32_ref
from .elementwise import apply_scalar_ref
from .ops import AluOp, ReduceOp
from .rows import reduce_row, scalar_row

#: Reduce ops of ``tensor_scalar_reduce`` and ``tensor_scalar_cumulative``'s op1 [S15].
SCAN_REDUCE_OPS: frozenset[AluOp] = frozenset(
    {AluOp.add, AluOp.subtract, AluOp.multiply, AluOp.max, AluOp.min}
)

# ---------------------------------------------------------------------------------------------
# tensor_tensor_scan


@numba.njit(cache=True, error_model="numpy")
def _tensor_tensor_scan_jit(
    a: np.ndarray,
    b: np.ndarray,
    initial: np.ndarray,
    op0: int,
    op1: int,
    reverse0: bool,
    reverse1: bool,
    out: np.ndarray,
) -> None:
    parts, size = a.shape
    for p in range(parts):
        r = initial[p]
        for i in range(size):
            t = alu_f32(r, a[p, i], op0) if reverse0 else alu_f32(a[p, i], r, op0)
            r = alu_f32(b[p, i], t, op1) if reverse1 else alu_f32(t, b[p, i], op1)
            out[p, i] = r


def _scan_operands(
    a: np.ndarray, b: np.ndarray, initial: np.ndarray | Scalar, op0: int, op1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    a = _checks.f32(a, "a", 2)
    b = _checks.f32(b, "b", 2)
    _checks.same_shape(a, b, "a and b")
    initial = _checks.per_partition(initial, a.shape[0], "initial")
    return a, b, initial, _checks.float_alu_op(op0, "op0"), _checks.float_alu_op(op1, "op1")


def tensor_tensor_scan(
    a: np.ndarray,
    b: np.ndarray,
    initial: np.ndarray | Scalar,
    op0: int,
    op1: int,
    reverse0: bool = False,
    reverse1: bool = False,
) -> np.ndarray:
    """VectorE ``tensor_tensor_scan`` per partition: ``r[i] = op1(op0(a[i], r[i-1]), b[i])``,
    ``r[-1] = initial``, on f32[P, N]; initial f32[P] (or a scalar). Returns r, f32[P, N].

    ``reverse0`` makes ``a[i]`` the right operand of op0 (``op0(r[i-1], a[i])``); ``reverse1``
    makes ``b[i]`` the left operand of op1 (``op1(b[i], t)``), as nki.isa documents [S15][S16].
    """
    a, b, initial, op0, op1 = _scan_operands(a, b, initial, op0, op1)
    out = np.empty_like(a)
    _tensor_tensor_scan_jit(a, b, initial, op0, op1, bool(reverse0), bool(reverse1), out)
    return out


def tensor_tensor_scan_ref(a, b, initial, op0, op1, reverse0=False, reverse1=False):
    """Reference for ``tensor_tensor_scan``."""
    a, b, r, op0, op1 = _scan_operands(a, b, initial, op0, op1)
    out = np.empty_like(a)
    with np.errstate(all="ignore"):
        for i in range(a.shape[1]):
            t = alu_f32_ref(r, a[:, i], op0) if reverse0 else alu_f32_ref(a[:, i], r, op0)
            r = alu_f32_ref(b[:, i], t, op1) if reverse1 else alu_f32_ref(t, b[:, i], op1)
            out[:, i] = r
    return out


# ---------------------------------------------------------------------------------------------
# tensor_scalar_cumulative


@numba.njit(cache=True, error_model="numpy")
def _cumulative_jit(
    x: np.ndarray, op0: int, s0: np.ndarray, op1: int, initial: np.ndarray, out: np.ndarray
) -> None:
    parts, size = x.shape
    for p in range(parts):
        reg = initial[p]
        for i in range(size):
            reg = alu_f32(alu_f32(x[p, i], s0[p], op0), reg, op1)
            out[p, i] = reg


def _cumulative_operands(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, op1: int, initial: np.ndarray | Scalar
) -> tuple[np.ndarray, int, np.ndarray, int, np.ndarray]:
    x = _checks.f32(x, "x", 2)
    op0 = _checks.float_alu_op(op0, "op0")
    op1 = _checks.float_alu_op(op1, "op1")
    if AluOp(op1) not in SCAN_REDUCE_OPS:
        valid = ", ".join(sorted(op.name for op in SCAN_REDUCE_OPS))
        raise ValueError(f"op1={AluOp(op1).name} is not a cumulative reduction; valid: {valid}")
    s0 = _checks.per_partition(s0, x.shape[0], "s0")
    initial = _checks.per_partition(initial, x.shape[0], "initial")
    return x, op0, s0, op1, initial


def tensor_scalar_cumulative(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, op1: int, initial: np.ndarray | Scalar
) -> np.ndarray:
    """VectorE ``tensor_scalar_cumulative`` per partition: ``reg = op1(op0(x[i], s0), reg)``,
    ``out[i] = reg``, starting from ``initial`` (f32[P] or a scalar); s0 f32[P] or a scalar.

    op1 is add, subtract, multiply, max or min [S15]; note the new term is op1's left operand
    (``subtract`` gives ``x'[i] - reg``). Returns f32[P, N].
    """
    x, op0, s0, op1, initial = _cumulative_operands(x, op0, s0, op1, initial)
    out = np.empty_like(x)
    _cumulative_jit(x, op0, s0, op1, initial, out)
    return out


def tensor_scalar_cumulative_ref(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, op1: int, initial: np.ndarray | Scalar
) -> np.ndarray:
    """Reference for ``tensor_scalar_cumulative``."""
    x, op0, s0, op1, reg = _cumulative_operands(x, op0, s0, op1, initial)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        for i in range(x.shape[1]):
            reg = alu_f32_ref(alu_f32_ref(x[:, i], s0, op0), reg, op1)
            out[:, i] = reg
    return out


# ---------------------------------------------------------------------------------------------
# tensor_scalar_reduce


@numba.njit(cache=True, error_model="numpy")
def _tensor_scalar_reduce_jit(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray,
    reverse0: bool,
    reduce_op: int,
    out: np.ndarray,
    red: np.ndarray,
) -> None:
    for p in range(x.shape[0]):
        scalar_row(x[p], s0[p], op0, reverse0, out[p])
        red[p] = reduce_row(out[p], reduce_op)


def _tensor_scalar_reduce_operands(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, reduce_op: int
) -> tuple[np.ndarray, int, np.ndarray, int]:
    x = _checks.f32(x, "x", 2)
    if x.shape[1] == 0:
        raise ValueError(f"x has no elements to reduce per partition (shape {x.shape})")
    op0 = _checks.float_alu_op(op0, "op0")
    reduce_op = _checks.op_id(reduce_op, ReduceOp, "reduce_op")
    if AluOp(reduce_op) not in SCAN_REDUCE_OPS:
        valid = ", ".join(sorted(op.name for op in SCAN_REDUCE_OPS - {AluOp.subtract}))
        raise ValueError(f"reduce_op={ReduceOp(reduce_op).name} is not allowed; valid: {valid}")
    return x, op0, _checks.per_partition(s0, x.shape[0], "s0"), reduce_op


def tensor_scalar_reduce(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, reverse0: bool, reduce_op: int
) -> tuple[np.ndarray, np.ndarray]:
    """VectorE ``tensor_scalar_reduce``: ``out = x op0 s0`` (``s0 op0 x`` if reversed) and
    ``red[p]`` = reduce_op over ``out[p, :]`` (the fp32 values, folded from element 0 with an
    fp32 accumulator). x f32[P, N], s0 f32[P] or a scalar; reduce_op add, multiply, max or min.
    Returns (out f32[P, N], red f32[P]).
    """
    x, op0, s0, reduce_op = _tensor_scalar_reduce_operands(x, op0, s0, reduce_op)
    out = np.empty_like(x)
    red = np.empty(x.shape[0], np.float32)
    _tensor_scalar_reduce_jit(x, op0, s0, bool(reverse0), reduce_op, out, red)
    return out, red


def tensor_scalar_reduce_ref(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, reverse0: bool, reduce_op: int
) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``tensor_scalar_reduce``: add/multiply exact-then-rounded (float64, one
    rounding), max/min exact."""
    x, op0, s0, reduce_op = _tensor_scalar_reduce_operands(x, op0, s0, reduce_op)
    with np.errstate(all="ignore"):
        out = apply_scalar_ref(x, s0[:, None], op0, reverse0, alu_f32_ref)
        wide = out.astype(np.float64)
        reducers = {
            ReduceOp.add: lambda v: v.sum(axis=1),
            ReduceOp.multiply: lambda v: v.prod(axis=1),
            ReduceOp.max: lambda v: np.max(out, axis=1),
            ReduceOp.min: lambda v: np.min(out, axis=1),
        }
        red = reducers[ReduceOp(reduce_op)](wide).astype(np.float32)
    return out, red

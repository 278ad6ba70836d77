"""Integer (bitvec) variants of tensor_tensor and tensor_scalar over int64 carrying 32-bit values.

hwsim routes an instruction here when an op is integer-only (``INTEGER_ONLY_OPS``) or its data
is integer; the per-element semantics are ``alu_i64`` / ``alu_i64_ref`` in ``kernels.alu``.
Results are int64 whose low 32 bits are the hardware result.
"""

from __future__ import annotations

import numba
import numpy as np

from ._checks import Scalar
from .alu import alu_i64, alu_i64_ref
from .elementwise import apply_scalar_ref, scalar_operands, tensor_operands
from .ops import AluOp

_UNARY_A = int(AluOp.bypass)
_UNARY_B = int(AluOp.bitwise_not)


@numba.njit(cache=True)
def _tensor_tensor_int_jit(a: np.ndarray, b: np.ndarray, op: int, out: np.ndarray) -> None:
    parts, size = a.shape
    for p in range(parts):
        for i in range(size):
            out[p, i] = alu_i64(a[p, i], b[p, i], op)


def tensor_tensor_int(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """Integer ``tensor_tensor``: ``a op b`` on int64[P, N] carrying 32-bit values; any ``AluOp``.

    Returns int64[P, N] whose low 32 bits are the hardware result (``kernels.alu`` semantics).
    """
    a, b, op = tensor_operands(a, b, op, integer=True)
    out = np.empty_like(a)
    _tensor_tensor_int_jit(a, b, op, out)
    return out


def tensor_tensor_int_ref(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """Reference for ``tensor_tensor_int``."""
    return alu_i64_ref(*tensor_operands(a, b, op, integer=True))


@numba.njit(cache=True)
def _apply_i64(v: np.int64, s: np.int64, op: int, reverse: bool) -> np.int64:
    if reverse and op != _UNARY_A and op != _UNARY_B:
        return alu_i64(s, v, op)
    return alu_i64(v, s, op)


@numba.njit(cache=True)
def _tensor_scalar_int_jit(x, op0, s0, reverse0, op1, s1, reverse1, out) -> None:
    parts, size = x.shape
    for p in range(parts):
        a = s0[p]
        c = s1[p]
        for i in range(size):
            out[p, i] = _apply_i64(_apply_i64(x[p, i], a, op0, reverse0), c, op1, reverse1)


def tensor_scalar_int(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray | Scalar,
    reverse0: bool = False,
    op1: int = AluOp.bypass,
    s1: np.ndarray | Scalar = 0,
    reverse1: bool = False,
) -> np.ndarray:
    """Integer ``tensor_scalar`` on int64[P, N] with int s0, s1 [P]; any ``AluOp``; int64 out."""
    x, op0, s0, op1, s1 = scalar_operands(x, op0, s0, op1, s1, integer=True)
    out = np.empty_like(x)
    _tensor_scalar_int_jit(x, op0, s0, bool(reverse0), op1, s1, bool(reverse1), out)
    return out


def tensor_scalar_int_ref(x, op0, s0, reverse0=False, op1=AluOp.bypass, s1=0, reverse1=False):
    """Reference for ``tensor_scalar_int`` (its arguments)."""
    x, op0, s0, op1, s1 = scalar_operands(x, op0, s0, op1, s1, integer=True)
    v = apply_scalar_ref(x, s0[:, None], op0, reverse0, alu_i64_ref)
    return apply_scalar_ref(v, s1[:, None], op1, reverse1, alu_i64_ref)

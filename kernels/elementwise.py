"""Elementwise instruction kernels (activation, tensor_tensor, tensor_scalar, …) with NumPy twins.

All operands are ``[P, N]`` (P partitions, N = flattened free size). The kernels take and return
fp32 and compute in fp32 like VectorE/ScalarE (HARDWARE.md §3: "compute in FP32 with free casting
in/out"); the integer variants live in ``kernels.integer``. Per-element semantics live in
``kernels.alu`` (ALU ops) and ``kernels.activations`` (activation functions). Each public kernel
``foo`` validates its operands and calls a jitted core; ``foo_ref`` is the plain-NumPy spec.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from . import _checks
from ._checks import Scalar
from .activations import act_f64, act_f64_ref
from .alu import alu_f32_ref
from .ops import UNARY_ALU_OPS, ActivationFunction, AluOp
from .rows import binary_row, scalar_row

_UNARY_A = int(AluOp.bypass)
_UNARY_B = int(AluOp.bitwise_not)
_COPY = int(ActivationFunction.copy)
_RELU = int(ActivationFunction.relu)
_EXP = int(ActivationFunction.exp)

# ---------------------------------------------------------------------------------------------
# activation / activation_reduce


@numba.njit(cache=True, error_model="numpy")
def _activation_jit(
    x: np.ndarray,
    func: int,
    scale: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    red: np.ndarray,
    do_reduce: bool,
) -> None:
    parts, size = x.shape
    for p in range(parts):
        s = scale[p]
        b = bias[p]
        row = out[p]
        if b == 0.0:  # no bias: adding +0.0 would turn a -0.0 into +0.0 (1/-0 must be -inf)
            for i in range(size):
                row[i] = x[p, i] * s
        else:
            for i in range(size):
                row[i] = x[p, i] * s + b  # two fp32 roundings: the multiply-add is not fused
        if func == _COPY:
            pass
        elif func == _EXP:  # the softmax workhorse: skip the per-element function dispatch
            for i in range(size):
                row[i] = np.float32(math.exp(np.float64(row[i])))
        elif func == _RELU:
            for i in range(size):
                if row[i] <= 0.0:
                    row[i] = 0.0  # NaN fails the test and stays NaN
        else:
            for i in range(size):
                row[i] = np.float32(act_f64(np.float64(row[i]), func))
        if do_reduce:
            acc = np.float32(0.0)
            for i in range(size):
                acc += row[i]
            red[p] = acc


def _activation_operands(
    x: np.ndarray, func: int, scale: np.ndarray | Scalar, bias: np.ndarray | Scalar
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    x = _checks.f32(x, "x", 2)
    func = _checks.op_id(func, ActivationFunction, "func")
    scale = _checks.per_partition(scale, x.shape[0], "scale")
    bias = _checks.per_partition(bias, x.shape[0], "bias")
    return x, func, scale, bias


def activation(
    x: np.ndarray, func: int, scale: np.ndarray | Scalar = 1.0, bias: np.ndarray | Scalar = 0.0
) -> np.ndarray:
    """ScalarE ``activation``: ``func(x * scale + bias)``.

    x: f32[P, N]; func: an ``ActivationFunction``; scale, bias: f32[P] (or [P, 1], or a scalar),
    one value per partition. ``x * scale + bias`` is computed in fp32 with two roundings, then the
    function is applied and rounded to fp32 (``kernels.activations``); a zero bias is no add, so
    a -0.0 input stays -0.0 (``reciprocal(-0.0)`` is -inf). Returns f32[P, N].
    """
    x, func, scale, bias = _activation_operands(x, func, scale, bias)
    out = np.empty_like(x)
    _activation_jit(x, func, scale, bias, out, np.empty(0, np.float32), False)
    return out


def activation_ref(
    x: np.ndarray, func: int, scale: np.ndarray | Scalar = 1.0, bias: np.ndarray | Scalar = 0.0
) -> np.ndarray:
    """Reference for ``activation``."""
    x, func, scale, bias = _activation_operands(x, func, scale, bias)
    scaled = x * scale[:, None]
    y = np.where(bias[:, None] == 0.0, scaled, scaled + bias[:, None])  # a zero bias is no add
    with np.errstate(all="ignore"):
        return act_f64_ref(y.astype(np.float64), func).astype(np.float32)


def activation_reduce(
    x: np.ndarray, func: int, scale: np.ndarray | Scalar = 1.0, bias: np.ndarray | Scalar = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """ScalarE ``activation_reduce``: ``activation`` plus an add-reduce of its output per partition.

    Returns (out f32[P, N], red f32[P]); ``red[p]`` sums ``out[p, :]`` (the fp32 values, before
    any cast to the destination dtype) in order from i = 0 with an fp32 accumulator.
    """
    x, func, scale, bias = _activation_operands(x, func, scale, bias)
    out = np.empty_like(x)
    red = np.empty(x.shape[0], np.float32)
    _activation_jit(x, func, scale, bias, out, red, True)
    return out, red


def activation_reduce_ref(
    x: np.ndarray, func: int, scale: np.ndarray | Scalar = 1.0, bias: np.ndarray | Scalar = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``activation_reduce``: the sum is exact-then-rounded (float64, one rounding).

    The kernel's sequential fp32 sum differs from it by at most the usual summation error bound.
    """
    out = activation_ref(x, func, scale, bias)
    return out, out.astype(np.float64).sum(axis=1).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# tensor_tensor


@numba.njit(cache=True, error_model="numpy")
def _tensor_tensor_jit(a: np.ndarray, b: np.ndarray, op: int, out: np.ndarray) -> None:
    for p in range(a.shape[0]):
        binary_row(a[p], b[p], op, out[p])


def tensor_operands(
    a: np.ndarray, b: np.ndarray, op: int, integer: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """``tensor_tensor``'s operands checked: two [P, N] arrays of one shape, f32 with a float ALU
    op, or int64 (``integer``) with any ``AluOp``."""
    check = _checks.i64 if integer else _checks.f32
    a, b = check(a, "a", 2), check(b, "b", 2)
    _checks.same_shape(a, b, "a and b")
    op_id = _checks.op_id(op, AluOp, "op") if integer else _checks.float_alu_op(op, "op")
    return a, b, op_id


def tensor_tensor(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """VectorE/GpSimdE ``tensor_tensor``: ``a op b`` elementwise on f32[P, N]; returns f32[P, N].

    ``op`` is an ``AluOp`` that is not integer-only (those go to ``tensor_tensor_int``).
    """
    a, b, op = tensor_operands(a, b, op)
    out = np.empty_like(a)
    _tensor_tensor_jit(a, b, op, out)
    return out


def tensor_tensor_ref(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    """Reference for ``tensor_tensor``."""
    return alu_f32_ref(*tensor_operands(a, b, op))


# ---------------------------------------------------------------------------------------------
# tensor_scalar / scalar_tensor_tensor


@numba.njit(cache=True, error_model="numpy")
def _tensor_scalar_jit(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray,
    reverse0: bool,
    op1: int,
    s1: np.ndarray,
    reverse1: bool,
    out: np.ndarray,
) -> None:
    for p in range(x.shape[0]):
        scalar_row(x[p], s0[p], op0, reverse0, out[p])
        if op1 != _UNARY_A:
            scalar_row(out[p], s1[p], op1, reverse1, out[p])  # the fp32 intermediate, in place


def apply_scalar_ref(
    v: np.ndarray,
    s: np.ndarray,
    op: int,
    reverse: bool,
    alu_ref: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
) -> np.ndarray:
    """Reference of one ``tensor_scalar`` stage: ``v op s`` (``s op v`` if reversed), where the
    unary ops act on ``v`` whatever the order; ``alu_ref`` is ``alu_f32_ref`` or ``alu_i64_ref``."""
    if reverse and AluOp(op) not in UNARY_ALU_OPS:
        return alu_ref(np.broadcast_to(s, v.shape), v, op)
    return alu_ref(v, np.broadcast_to(s, v.shape), op)


def scalar_operands(
    x: np.ndarray, op0: int, s0: np.ndarray | Scalar, op1: int, s1: np.ndarray | Scalar,
    integer: bool = False,
) -> tuple[np.ndarray, int, np.ndarray, int, np.ndarray]:  # fmt: skip
    """``tensor_scalar``'s operands checked, on the fp32 path (f32 data, float ALU ops, f32
    scalars) or the integer path (int64 data, any ``AluOp``, int64 scalars): x, op0, s0 [P],
    op1, s1 [P]."""
    if integer:
        x = _checks.i64(x, "x", 2)
        op0, op1 = _checks.op_id(op0, AluOp, "op0"), _checks.op_id(op1, AluOp, "op1")
        dtype: type = np.int64
    else:
        x = _checks.f32(x, "x", 2)
        op0, op1 = _checks.float_alu_op(op0, "op0"), _checks.float_alu_op(op1, "op1")
        dtype = np.float32
    s0 = _checks.per_partition(s0, x.shape[0], "s0", dtype)
    return x, op0, s0, op1, _checks.per_partition(s1, x.shape[0], "s1", dtype)


def tensor_scalar(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray | Scalar,
    reverse0: bool = False,
    op1: int = AluOp.bypass,
    s1: np.ndarray | Scalar = 0.0,
    reverse1: bool = False,
) -> np.ndarray:
    """``tensor_scalar``: ``(x op0 s0) op1 s1`` on f32[P, N] with per-partition scalars s0, s1 [P].

    ``reverseK`` swaps the operands of opK (``s0 op0 x``); ``op1`` may be ``bypass`` (one op). The
    unary ops bypass and bitwise_not act on the data-path value and ignore ``reverseK``. The
    intermediate ``x op0 s0`` is an fp32 value. Returns f32[P, N].
    """
    x, op0, s0, op1, s1 = scalar_operands(x, op0, s0, op1, s1)
    out = np.empty_like(x)
    _tensor_scalar_jit(x, op0, s0, bool(reverse0), op1, s1, bool(reverse1), out)
    return out


def tensor_scalar_ref(x, op0, s0, reverse0=False, op1=AluOp.bypass, s1=0.0, reverse1=False):
    """Reference for ``tensor_scalar`` (its arguments)."""
    x, op0, s0, op1, s1 = scalar_operands(x, op0, s0, op1, s1)
    v = apply_scalar_ref(x, s0[:, None], op0, reverse0, alu_f32_ref)
    return apply_scalar_ref(v, s1[:, None], op1, reverse1, alu_f32_ref)


@numba.njit(cache=True, error_model="numpy")
def _scalar_tensor_tensor_jit(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray,
    reverse0: bool,
    op1: int,
    y: np.ndarray,
    reverse1: bool,
    out: np.ndarray,
) -> None:
    swap1 = reverse1 and op1 != _UNARY_A and op1 != _UNARY_B
    for p in range(x.shape[0]):
        scalar_row(x[p], s0[p], op0, reverse0, out[p])
        if swap1:
            binary_row(y[p], out[p], op1, out[p])
        else:
            binary_row(out[p], y[p], op1, out[p])


def scalar_tensor_tensor(
    x: np.ndarray,
    op0: int,
    s0: np.ndarray | Scalar,
    op1: int,
    y: np.ndarray,
    reverse0: bool = False,
    reverse1: bool = False,
) -> np.ndarray:
    """VectorE ``scalar_tensor_tensor``: ``(x op0 s0) op1 y`` on f32[P, N]; s0 f32[P].

    ``reverseK`` swaps the operands of opK, as in ``tensor_scalar``. Returns f32[P, N].
    """
    x = _checks.f32(x, "x", 2)
    y = _checks.f32(y, "y", 2)
    _checks.same_shape(x, y, "x and y")
    op0 = _checks.float_alu_op(op0, "op0")
    op1 = _checks.float_alu_op(op1, "op1")
    s0 = _checks.per_partition(s0, x.shape[0], "s0")
    out = np.empty_like(x)
    _scalar_tensor_tensor_jit(x, op0, s0, bool(reverse0), op1, y, bool(reverse1), out)
    return out


def scalar_tensor_tensor_ref(x, op0, s0, op1, y, reverse0=False, reverse1=False):
    """Reference for ``scalar_tensor_tensor``."""
    x = _checks.f32(x, "x", 2)
    y = _checks.f32(y, "y", 2)
    _checks.same_shape(x, y, "x and y")
    op0 = _checks.float_alu_op(op0, "op0")
    op1 = _checks.float_alu_op(op1, "op1")
    s0 = _checks.per_partition(s0, x.shape[0], "s0")[:, None]
    v = apply_scalar_ref(x, s0, op0, reverse0, alu_f32_ref)
    return apply_scalar_ref(v, y, op1, reverse1, alu_f32_ref)


# ---------------------------------------------------------------------------------------------
# reciprocal / select


@numba.njit(cache=True, error_model="numpy")
def _reciprocal_jit(x: np.ndarray, out: np.ndarray) -> None:
    one = np.float32(1.0)
    parts, size = x.shape
    for p in range(parts):
        for i in range(size):
            out[p, i] = one / x[p, i]


def reciprocal(x: np.ndarray) -> np.ndarray:
    """VectorE ``reciprocal``: 1/x on f32[P, N], correctly rounded fp32 (1/±0 = ±inf)."""
    x = _checks.f32(x, "x", 2)
    out = np.empty_like(x)
    _reciprocal_jit(x, out)
    return out


def reciprocal_ref(x: np.ndarray) -> np.ndarray:
    """Reference for ``reciprocal``."""
    x = _checks.f32(x, "x", 2)
    with np.errstate(all="ignore"):
        return np.float32(1.0) / x


@numba.njit(cache=True)
def _select_jit(
    pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray, out: np.ndarray
) -> None:
    parts, size = pred.shape
    for p in range(parts):
        for i in range(size):
            out[p, i] = on_true[p, i] if pred[p, i] != 0 else on_false[p, i]


def _predicate(pred: np.ndarray) -> np.ndarray:
    pred = np.asarray(pred)
    if np.issubdtype(pred.dtype, np.floating) and pred.dtype != np.float32:
        # Only "nonzero" matters; converting a float64 to fp32 could flush a tiny value to 0.
        pred = (pred != 0).astype(np.int64)
    return _checks.numeric(pred, "pred", 2)


def select(pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    """``select``: ``on_true`` where ``pred != 0`` else ``on_false``; all [P, N].

    pred may have any integer, bool or NumPy float dtype (a NaN predicate counts as true, since
    NaN != 0); on_true and on_false are f32. Returns f32[P, N], bit-exact copies of the chosen
    elements.
    """
    pred = _predicate(pred)
    on_true = _checks.f32(on_true, "on_true", 2)
    on_false = _checks.f32(on_false, "on_false", 2)
    _checks.same_shape(pred, on_true, "pred and on_true")
    _checks.same_shape(pred, on_false, "pred and on_false")
    out = np.empty_like(on_true)
    _select_jit(pred, on_true, on_false, out)
    return out


def select_ref(pred: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    """Reference for ``select``."""
    pred = _predicate(pred)
    on_true = _checks.f32(on_true, "on_true", 2)
    on_false = _checks.f32(on_false, "on_false", 2)
    _checks.same_shape(pred, on_true, "pred and on_true")
    _checks.same_shape(pred, on_false, "pred and on_false")
    return np.where(pred != 0, on_true, on_false)

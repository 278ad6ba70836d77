"""Jitted fp32 row loops: a tight loop per common ALU op (vectorised), per-element dispatch else.

The kernels in ``elementwise`` and ``reduce`` call these once per partition row. Branching on the op
once per row instead of once per element lets LLVM vectorise add/subtract/multiply/divide/max/min,
bypass and the comparisons; every other op goes through ``alu_f32`` element by element.
Semantics are exactly those of ``alu_f32`` in both paths (the tests compare both with the
reference twins).
"""

from __future__ import annotations

import numba
import numpy as np

from .alu import (
    _ADD,
    _BITWISE_NOT,
    _BYPASS,
    _DIVIDE,
    _IS_EQUAL,
    _IS_GE,
    _IS_GT,
    _IS_LE,
    _IS_LT,
    _MAX,
    _MIN,
    _MULTIPLY,
    _NOT_EQUAL,
    _SUBTRACT,
    alu_f32,
    fmax_f32,
    fmin_f32,
)

_F1 = np.float32(1.0)
_F0 = np.float32(0.0)


@numba.njit(cache=True, error_model="numpy")
def binary_row(a: np.ndarray, b: np.ndarray, op: int, out: np.ndarray) -> None:
    """``out[i] = a[i] op b[i]`` over 1-D fp32 rows (``out`` may alias ``a`` or ``b``)."""
    n = out.shape[0]
    if op == _BYPASS:
        for i in range(n):
            out[i] = a[i]
    elif op == _ADD:
        for i in range(n):
            out[i] = a[i] + b[i]
    elif op == _SUBTRACT:
        for i in range(n):
            out[i] = a[i] - b[i]
    elif op == _MULTIPLY:
        for i in range(n):
            out[i] = a[i] * b[i]
    elif op == _DIVIDE:
        for i in range(n):
            out[i] = a[i] / b[i]
    elif op == _MAX:
        for i in range(n):
            out[i] = fmax_f32(a[i], b[i])
    elif op == _MIN:
        for i in range(n):
            out[i] = fmin_f32(a[i], b[i])
    elif op == _IS_EQUAL:
        for i in range(n):
            out[i] = _F1 if a[i] == b[i] else _F0
    elif op == _NOT_EQUAL:
        for i in range(n):
            out[i] = _F1 if a[i] != b[i] else _F0
    elif op == _IS_GE:
        for i in range(n):
            out[i] = _F1 if a[i] >= b[i] else _F0
    elif op == _IS_GT:
        for i in range(n):
            out[i] = _F1 if a[i] > b[i] else _F0
    elif op == _IS_LE:
        for i in range(n):
            out[i] = _F1 if a[i] <= b[i] else _F0
    elif op == _IS_LT:
        for i in range(n):
            out[i] = _F1 if a[i] < b[i] else _F0
    else:
        for i in range(n):
            out[i] = alu_f32(a[i], b[i], op)


@numba.njit(cache=True, error_model="numpy")
def scalar_row(x: np.ndarray, s: np.float32, op: int, reverse: bool, out: np.ndarray) -> None:
    """``out[i] = x[i] op s`` (``s op x[i]`` if ``reverse``) over a 1-D fp32 row.

    The unary ops bypass and bitwise_not act on ``x`` whatever ``reverse`` says.
    """
    n = out.shape[0]
    if op == _BYPASS:
        for i in range(n):
            out[i] = x[i]
    elif op == _ADD:  # IEEE add and multiply are commutative: reverse changes nothing
        for i in range(n):
            out[i] = x[i] + s
    elif op == _MULTIPLY:
        for i in range(n):
            out[i] = x[i] * s
    elif op == _SUBTRACT and not reverse:
        for i in range(n):
            out[i] = x[i] - s
    elif op == _SUBTRACT:
        for i in range(n):
            out[i] = s - x[i]
    elif op == _DIVIDE and not reverse:
        for i in range(n):
            out[i] = x[i] / s
    elif op == _DIVIDE:
        for i in range(n):
            out[i] = s / x[i]
    elif op == _MAX and not reverse:
        for i in range(n):
            out[i] = fmax_f32(x[i], s)
    elif op == _MIN and not reverse:
        for i in range(n):
            out[i] = fmin_f32(x[i], s)
    elif op == _IS_EQUAL:  # symmetric
        for i in range(n):
            out[i] = _F1 if x[i] == s else _F0
    elif op == _NOT_EQUAL:
        for i in range(n):
            out[i] = _F1 if x[i] != s else _F0
    elif (op == _IS_GE and not reverse) or (op == _IS_LE and reverse):
        for i in range(n):
            out[i] = _F1 if x[i] >= s else _F0
    elif (op == _IS_GT and not reverse) or (op == _IS_LT and reverse):
        for i in range(n):
            out[i] = _F1 if x[i] > s else _F0
    elif (op == _IS_LE and not reverse) or (op == _IS_GE and reverse):
        for i in range(n):
            out[i] = _F1 if x[i] <= s else _F0
    elif (op == _IS_LT and not reverse) or (op == _IS_GT and reverse):
        for i in range(n):
            out[i] = _F1 if x[i] < s else _F0
    elif reverse and op != _BITWISE_NOT:
        for i in range(n):
            out[i] = alu_f32(s, x[i], op)
    else:
        for i in range(n):
            out[i] = alu_f32(x[i], s, op)


@numba.njit(cache=True, error_model="numpy")
def reduce_row(x: np.ndarray, op: int) -> np.float32:
    """``x[0] op x[1] op … op x[n-1]`` folded left with an fp32 accumulator (n >= 1)."""
    acc = x[0]
    n = x.shape[0]
    if op == _ADD:
        for i in range(1, n):
            acc += x[i]
    elif op == _MAX:
        for i in range(1, n):
            acc = fmax_f32(acc, x[i])
    elif op == _MIN:
        for i in range(1, n):
            acc = fmin_f32(acc, x[i])
    else:
        for i in range(1, n):
            acc = alu_f32(acc, x[i], op)
    return acc

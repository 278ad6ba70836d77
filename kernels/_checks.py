"""Operand checks at the Python boundary (dtypes, shapes, op ids); jitted code gets C arrays."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from .ops import INTEGER_ONLY_OPS, AluOp

Scalar = float | int | np.floating | np.integer
"""A Python or NumPy scalar accepted where a per-partition [P] operand is expected."""


def _writable_contiguous(x: np.ndarray, dtype: type) -> np.ndarray:
    # Jitted kernels get one array type (C-contiguous, writable) so each compiles exactly once:
    # Numba specialises on layout and on read-only-ness, and a new specialisation mid-run would
    # be JIT time counted as simulation time.
    out: np.ndarray = np.ascontiguousarray(x, dtype=dtype)
    return out if out.flags.writeable else out.copy()


def f32(x: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """``x`` as a C-contiguous float32 array of ``ndim`` dims; a non-fp32 dtype is an error."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(
            f"{name} must be float32 (hwsim converts operands to fp32), got dtype {x.dtype}"
        )
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
    return _writable_contiguous(x, np.float32)


def i64(x: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """``x`` as a C-contiguous int64 array of ``ndim`` dims; a non-integer dtype is an error."""
    x = np.asarray(x)
    if not (np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_):
        raise TypeError(f"{name} must have an integer dtype, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
    return _writable_contiguous(x, np.int64)


def numeric(x: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """``x`` as C-contiguous float32 (if floating) or int64 (if integer), of ``ndim`` dims."""
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return i64(x, name, ndim)
    return f32(x, name, ndim)


def per_partition(
    v: np.ndarray | Scalar, partitions: int, name: str, dtype: type = np.float32
) -> np.ndarray:
    """A per-partition operand as a [P] array; scalars broadcast, [P] or [P, 1] pass."""
    if np.ndim(v) == 0:
        return np.full(partitions, v, dtype=dtype)
    arr = np.asarray(v)
    if arr.shape not in ((partitions,), (partitions, 1)):
        raise ValueError(
            f"{name} must be a scalar, [{partitions}] or [{partitions}, 1], got shape {arr.shape}"
        )
    if dtype is np.float32 and arr.dtype != np.float32:
        raise TypeError(f"{name} must be float32, got dtype {arr.dtype}")
    if dtype is np.int64 and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must have an integer dtype, got dtype {arr.dtype}")
    return _writable_contiguous(arr.reshape(partitions), dtype)


def same_shape(a: np.ndarray, b: np.ndarray, names: str) -> None:
    """Raise unless ``a`` and ``b`` have equal shapes; ``names`` is like ``"a and b"``."""
    if a.shape != b.shape:
        raise ValueError(f"{names} must have the same shape, got {a.shape} and {b.shape}")


def op_id(op: int, enum: type[IntEnum], name: str) -> int:
    """``op`` as a plain int after checking it names a member of ``enum``."""
    try:
        return int(enum(int(op)))
    except ValueError:
        valid = ", ".join(f"{m.name}={m.value}" for m in enum)
        raise ValueError(f"{name}={op!r} is not a valid {enum.__name__}; valid: {valid}") from None


def float_alu_op(op: int, name: str) -> int:
    """An AluOp id usable on fp32 data (not an integer-only bitvec op)."""
    value = op_id(op, AluOp, name)
    if AluOp(value) in INTEGER_ONLY_OPS:
        raise ValueError(
            f"{name}={AluOp(value).name} needs integer operands; use the *_int kernel with "
            "integer data"
        )
    return value

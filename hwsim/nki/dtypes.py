"""NKI dtypes both ways: ``nl.float32``, ``nl.bfloat16`` ... are numpy scalar types (ml_dtypes
for bf16 and fp8), as NKI's are, so ``np.dtype(nl.bfloat16)``, ``x.astype(nl.bfloat16)`` and
``np.zeros(shape, dtype=nl.float32)`` work on the host; a tensor's ``.dtype`` is a numpy dtype
that compares equal to them (``t.dtype == nl.float8_e4m3``). Inside the simulator every one of
these, a numpy dtype, a hwsim ``DType`` or a name (``"bf16"``, ``"bfloat16"``) is the same
hardware dtype (``hw_dtype``). The MX ``_x4`` packed types have no numpy type: they stay names.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as lookup_dtype
from hwsim.errors import IllegalInstructionError

float32 = np.float32
#: tf32 is an fp32 storage format whose matmuls use fewer mantissa bits (not modelled: fp32).
tfloat32 = np.float32
bfloat16 = ml_dtypes.bfloat16
float16 = np.float16
float8_e4m3 = ml_dtypes.float8_e4m3
float8_e5m2 = ml_dtypes.float8_e5m2
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
#: NKI's bool is one byte; the hardware dtype is uint8.
bool_ = np.bool_
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = "fp8_e5m2_x4", "fp8_e4m3fn_x4", "fp4_e2m1fn_x4"

#: numpy dtype name -> hwsim dtype name, where they differ.
_FROM_NUMPY = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "bool": "uint8",
}


def hw_dtype(value: Any) -> DType:
    """The hardware dtype of an NKI dtype, a numpy dtype or type, a hwsim DType or a name."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return lookup_dtype(value)
    try:
        name = np.dtype(value).name
    except TypeError:
        raise IllegalInstructionError(
            f"dtype {value!r} is not a dtype; use nl.float32, nl.bfloat16, nl.float16, "
            "nl.float8_e4m3, nl.int32 ... (or numpy's)"
        ) from None
    try:
        return lookup_dtype(_FROM_NUMPY.get(name, name))
    except IllegalInstructionError:
        raise IllegalInstructionError(
            f"dtype {name} has no NeuronCore dtype; use float32, bfloat16, float16, "
            "float8_e4m3, float8_e5m2 or an 8/16/32-bit int"
        ) from None


def nki_dtype(dt: DType) -> Any:
    """What ``tensor.dtype`` gives for a hardware dtype: its numpy dtype (a name for packed
    types)."""
    if dt.lanes > 1:
        return dt.name
    return np.dtype(dt.numpy)


def static_cast(array: Any, dtype: Any) -> np.ndarray:
    """``nl.static_cast(x, dtype)`` on the host: ``x`` as a numpy array of ``dtype``, rounded to
    nearest even (ml_dtypes' casts, the hardware's rounding)."""
    target = hw_dtype(dtype)
    if target.lanes > 1:
        raise IllegalInstructionError(f"nl.static_cast to packed dtype {target.name}")
    values = np.asarray(array)
    if values.dtype == target.numpy:
        return values.copy()
    if target.is_float:
        return values.astype(np.float32).astype(target.numpy)
    return values.astype(target.numpy)


class finfo:
    """``nl.finfo(dtype)``: ``.min``, ``.max``, ``.eps``, ``.tiny``, ``.bits`` of a float dtype."""

    def __init__(self, dtype: Any) -> None:
        dt = hw_dtype(dtype)
        if not dt.is_float:
            raise IllegalInstructionError(f"nl.finfo({dt.name}): not a float dtype (nl.iinfo)")
        info = ml_dtypes.finfo(dt.numpy)
        self.dtype = np.dtype(dt.numpy)
        self.bits = int(info.bits)
        self.min, self.max = float(info.min), float(info.max)
        self.eps, self.tiny = float(info.eps), float(info.tiny)


class iinfo:
    """``nl.iinfo(dtype)``: ``.min``, ``.max``, ``.bits`` of an int dtype."""

    def __init__(self, dtype: Any) -> None:
        dt = hw_dtype(dtype)
        if dt.is_float:
            raise IllegalInstructionError(f"nl.iinfo({dt.name}): a float dtype (nl.finfo)")
        info = np.iinfo(dt.numpy)
        self.dtype = np.dtype(dt.numpy)
        self.bits, self.min, self.max = int(info.bits), int(info.min), int(info.max)


_FLOAT_RANK = {"fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "fp16": 2, "fp32": 3}


def promote(a: Any, b: Any) -> DType:
    """The NKI type promotion of two operands' dtypes (the NKI docs, "NKI Type Promotion"):
    a Python float is fp32, an int int32, a bool uint8 (weakly typed scalars take the widest
    hardware type); (float, int) -> the float; two floats -> the wider, fp16 with bf16 ->
    fp32, the two fp8 -> bf16; two ints -> the wider, or the next signed type holding both
    (int32 with uint32 -> fp32: no int64 on the hardware)."""
    x, y = _operand_dtype(a), _operand_dtype(b)
    if x == y:
        return x
    if x.is_float != y.is_float:
        return x if x.is_float else y
    if x.is_float:
        rx, ry = _FLOAT_RANK[x.name], _FLOAT_RANK[y.name]
        if rx == ry:
            return lookup_dtype("bf16" if rx == 1 else "fp32")
        return x if rx > ry else y
    if x.is_signed_int == y.is_signed_int:
        return x if x.itemsize >= y.itemsize else y
    signed, unsigned = (x, y) if x.is_signed_int else (y, x)
    if signed.itemsize > unsigned.itemsize:
        return signed
    wider = {1: "int16", 2: "int32"}.get(unsigned.itemsize)
    return lookup_dtype(wider) if wider else lookup_dtype("fp32")


def _operand_dtype(value: Any) -> DType:
    if isinstance(value, bool | np.bool_):
        return lookup_dtype("uint8")
    if isinstance(value, int | np.integer):
        return lookup_dtype("int32")
    if isinstance(value, float | np.floating):
        return lookup_dtype("fp32")
    return hw_dtype(value.hw_dtype if hasattr(value, "hw_dtype") else value.dtype)

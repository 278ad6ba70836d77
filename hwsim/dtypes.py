"""Data types of the simulated machine: sizes, numpy storage types, and hardware-exact casts.

Storage uses ml_dtypes for bf16 and fp8, so a value held in SBUF is bit-exact. Engines compute in
fp32 (HARDWARE.md §3 "VectorE/ScalarE compute in FP32 with free casting in/out"); every down-cast
rounds to nearest, ties to even (RNE), which is what ml_dtypes' casts do.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hwsim.errors import IllegalInstructionError


@dataclass(frozen=True, slots=True)
class DType:
    """A hardware dtype: its project-wide name, size, and numpy storage dtype.

    A packed dtype (``lanes`` > 1, the MX "x4" types of nki [S15]) holds ``lanes`` values of the
    minifloat format ``lane_format`` in one element, value j in bits ``[j * w, (j + 1) * w)`` of
    the little-endian word (w = 8 * itemsize / lanes); it is stored as the unsigned integer of its
    size, so instructions that do not know the format move it as bits (``is_float`` is False).
    """

    name: str
    itemsize: int
    numpy: np.dtype
    is_float: bool
    lanes: int = 1
    lane_format: str = ""

    def __repr__(self) -> str:
        return self.name

    @property
    def is_signed_int(self) -> bool:
        return not self.is_float and np.issubdtype(self.numpy, np.signedinteger)


def _make(name: str, np_type: type | np.dtype, is_float: bool) -> DType:
    dtype = np.dtype(np_type)
    return DType(name, dtype.itemsize, dtype, is_float)


FP32 = _make("fp32", np.float32, True)
BF16 = _make("bf16", ml_dtypes.bfloat16, True)
FP16 = _make("fp16", np.float16, True)
FP8_E4M3 = _make("fp8_e4m3", ml_dtypes.float8_e4m3, True)
FP8_E5M2 = _make("fp8_e5m2", ml_dtypes.float8_e5m2, True)
#: TensorFloat-32 (nki.language.tfloat32): fp32 storage holding values with a 10-bit mantissa
#: (1 sign, 8 exponent, 10 mantissa bits); a cast to it rounds the mantissa (``cast``). TensorE
#: multiplies it at the BF16/FP16 rate, a quarter of FP32's cost (HARDWARE.md §2.1 [S1][S16]).
TF32 = _make("tf32", np.float32, True)
TF32_MANTISSA_BITS = 10
INT8 = _make("int8", np.int8, False)
INT16 = _make("int16", np.int16, False)
INT32 = _make("int32", np.int32, False)
UINT8 = _make("uint8", np.uint8, False)
UINT16 = _make("uint16", np.uint16, False)
UINT32 = _make("uint32", np.uint32, False)

#: The MX "x4" packed types (v4, quantize_mx / nc_matmul_mx [S15]): four OCP minifloats per element.
FP8_E5M2_X4 = DType("fp8_e5m2_x4", 4, np.dtype(np.uint32), False, 4, "e5m2")
FP8_E4M3FN_X4 = DType("fp8_e4m3fn_x4", 4, np.dtype(np.uint32), False, 4, "e4m3fn")
FP4_E2M1FN_X4 = DType("fp4_e2m1fn_x4", 2, np.dtype(np.uint16), False, 4, "e2m1fn")

DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        FP32,
        BF16,
        FP16,
        FP8_E4M3,
        FP8_E5M2,
        TF32,
        INT8,
        INT16,
        INT32,
        UINT8,
        UINT16,
        UINT32,
        FP8_E5M2_X4,
        FP8_E4M3FN_X4,
        FP4_E2M1FN_X4,
    )
}
#: Accepted spellings besides the canonical names (numpy / torch / NKI style).
_ALIASES = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "tfloat32": "tf32",
    "float8_e5m2_x4": "fp8_e5m2_x4",
    "float8_e4m3fn_x4": "fp8_e4m3fn_x4",
    "float4_e2m1fn_x4": "fp4_e2m1fn_x4",
}


def dtype(name: str | DType) -> DType:
    """Look a dtype up by name; an unknown name is an error listing the valid ones."""
    if isinstance(name, DType):
        return name
    key = _ALIASES.get(name, name)
    try:
        return DTYPES[key]
    except KeyError:
        raise IllegalInstructionError(
            f"unknown dtype '{name}'; valid: {', '.join(DTYPES)}"
        ) from None


def machine_epsilon(dt: DType) -> float:
    """Spacing of floats just above 1.0 in ``dt`` (0 for integer dtypes)."""
    if not dt.is_float:
        return 0.0
    if dt.name == TF32.name:
        return 2.0**-TF32_MANTISSA_BITS
    return float(ml_dtypes.finfo(dt.numpy).eps)


def to_compute(values: np.ndarray) -> np.ndarray:
    """Values as the engines compute on them: floats widen exactly to fp32, ints stay integers."""
    if values.dtype.kind in "iu":
        return values
    if values.dtype == _BF16_NUMPY:  # its 16 bits are an fp32's upper half: twice as fast
        widened = values.view(np.uint16).astype(np.uint32)
        widened <<= np.uint32(16)
        return widened.view(np.float32)
    return values.astype(np.float32, copy=False)


_BF16_NUMPY = np.dtype(ml_dtypes.bfloat16)


def cast(values: np.ndarray, target: DType) -> np.ndarray:
    """Convert to ``target`` as the hardware does: RNE for floats; ints round then saturate."""
    if target.is_float:
        if target.name == TF32.name:
            return round_mantissa(values.astype(np.float32, copy=False), TF32_MANTISSA_BITS)
        if values.dtype == target.numpy:
            return values
        return values.astype(np.float32, copy=False).astype(target.numpy)
    if values.dtype.kind in "iu":
        info = np.iinfo(target.numpy)
        return np.clip(values, info.min, info.max).astype(target.numpy)
    info = np.iinfo(target.numpy)
    rounded = np.rint(np.nan_to_num(values.astype(np.float64), nan=0.0))
    return np.clip(rounded, info.min, info.max).astype(target.numpy)


def round_mantissa(values: np.ndarray, bits: int) -> np.ndarray:
    """fp32 values rounded to ``bits`` mantissa bits, to nearest, ties to even (a new array);
    infinities and NaNs stay what they are, a value past the largest finite one becomes inf."""
    drop = 23 - bits
    raw = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    odd = (raw >> np.uint32(drop)) & np.uint32(1)
    bias = np.uint32((1 << (drop - 1)) - 1) + odd
    rounded = ((raw + bias) >> np.uint32(drop)) << np.uint32(drop)
    special = (raw & np.uint32(0x7F800000)) == np.uint32(0x7F800000)  # inf, NaN: unchanged
    return np.where(special, raw, rounded).astype(np.uint32).view(np.float32)

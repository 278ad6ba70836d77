"""OCP microscaling (MX) kernels of NeuronCore-v4: quantize_mx and dequantize_mx, with twins.

Element formats (OCP MX v1.0): ``e4m3fn`` (bias 7, max 448, code 0x7F NaN, no inf), ``e5m2``
(bias 15, max 57344, 0x7C inf, 0x7D-0x7F NaN) and ``e2m1fn`` (bias 1, max 6, no NaN or inf);
the shared scale is E8M0, ``2^(code - 127)``, code 255 NaN. Four values pack into one element
of an x4 type, value l in bits ``[l * w, (l + 1) * w)`` (w = 8, or 4 for e2m1fn).

NeuronCore-v4 groups 32 values as 8 partitions x 4 values of one packed element [S3][S15]:
scale group (g, j) covers partitions ``8g .. 8g + 7`` of packed column j. ``quantize_mx`` follows
the OCP algorithm: shared exponent ``floor(log2(max |v|)) - emax`` of the element format (8, 15,
2), each value divided by the scale and rounded to nearest even, saturating at the largest
finite value (the OCP spec leaves overflow handling to the implementation; saturating is the
simulator's choice). A group holding NaN or inf gets scale code 255 and NaN codes; an all-zero
group gets scale code 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from . import _checks

MX_GROUP_PARTITIONS = 8
"""Partitions of one MX scale group; times the 4 packed values, 32 values [S3][S15]."""
MX_LANES = 4
"""Values packed in one x4 element."""
SCALE_NAN = 255
"""The E8M0 scale code for NaN."""
SCALE_BIAS = 127


@dataclass(frozen=True)
class MiniFloat:
    """An MX element format: exponent/mantissa bits, bias, and which codes are special."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_code: int  # largest finite positive code
    inf_code: int  # -1 if none
    nan_code: int  # the code written for NaN; -1 if none
    emax: int  # exponent of the largest normal value (OCP's emax_elem)

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    def values(self) -> np.ndarray:
        """Every code's value as float64 (index = code; NaN/inf where the format says)."""
        codes = np.arange(1 << self.bits)
        magnitude = codes & ((1 << (self.bits - 1)) - 1)
        exponent = magnitude >> self.mantissa_bits
        mantissa = magnitude & ((1 << self.mantissa_bits) - 1)
        scale = float(1 << self.mantissa_bits)
        normal = (1 + mantissa / scale) * np.exp2(exponent.astype(np.float64) - self.bias)
        subnormal = (mantissa / scale) * 2.0 ** (1 - self.bias)
        value = np.where(exponent == 0, subnormal, normal)
        value = np.where(magnitude > self.max_code, np.nan, value)
        if self.inf_code >= 0:
            value = np.where(magnitude == self.inf_code, np.inf, value)
        return np.where(codes >> (self.bits - 1) == 1, -value, value)


FORMATS: dict[str, MiniFloat] = {
    f.name: f
    for f in (
        MiniFloat("e4m3fn", 4, 3, 7, 0x7E, -1, 0x7F, 8),
        MiniFloat("e5m2", 5, 2, 15, 0x7B, 0x7C, 0x7F, 15),
        MiniFloat("e2m1fn", 2, 1, 1, 0x7, -1, -1, 2),
    )
}
#: Per format: all code values, and the ascending finite positive values (index = code).
_VALUES = {name: f.values() for name, f in FORMATS.items()}
_POSITIVE = {
    name: np.ascontiguousarray(v[: f.max_code + 1])
    for (name, f), v in zip(FORMATS.items(), _VALUES.values(), strict=True)
}


def _format(name: str) -> MiniFloat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown MX element format {name!r}; valid: {', '.join(FORMATS)}"
        ) from None


# ---------------------------------------------------------------------------------------------
# quantize_mx


@numba.njit(cache=True)
def _encode_code(v: float, positive: np.ndarray, sign_bit: int) -> int:
    a = abs(v)
    top = positive.shape[0] - 1
    if a >= positive[top]:
        code = top
    else:
        hi = np.searchsorted(positive, a)  # positive[hi - 1] < a <= positive[hi]
        lo = hi - 1 if positive[hi] > a else hi
        if lo == hi:
            code = hi
        else:
            below, above = a - positive[lo], positive[hi] - a
            code = lo if below < above or (below == above and lo % 2 == 0) else hi
    return code | sign_bit if math.copysign(1.0, v) < 0 else code


@numba.njit(cache=True)
def _quantize_jit(
    x: np.ndarray,
    positive: np.ndarray,
    emax: int,
    width: int,
    sign_bit: int,
    nan_code: int,
    codes: np.ndarray,
    scales: np.ndarray,
) -> None:
    groups, columns = scales.shape
    for g in range(groups):
        for j in range(columns):
            amax = 0.0
            finite = True
            for p in range(g * 8, g * 8 + 8):
                for lane in range(4):
                    v = np.float64(x[p, 4 * j + lane])
                    if not np.isfinite(v):
                        finite = False
                    elif abs(v) > amax:
                        amax = abs(v)
            if not finite:
                scale = SCALE_NAN
            elif amax == 0.0:
                scale = 0
            else:
                scale = min(max(int(np.floor(np.log2(amax))) - emax + SCALE_BIAS, 0), 254)
            scales[g, j] = scale
            for p in range(g * 8, g * 8 + 8):
                word = 0
                for lane in range(4):
                    if scale == SCALE_NAN:
                        code = nan_code
                    else:
                        v = np.float64(x[p, 4 * j + lane]) * 2.0 ** (SCALE_BIAS - scale)
                        code = _encode_code(v, positive, sign_bit)
                    word |= code << (width * lane)
                codes[p, j] = word


def _quantize_operand(x: np.ndarray, fmt: str) -> tuple[np.ndarray, MiniFloat]:
    x = _checks.f32(x, "x", 2)
    f = _format(fmt)
    if f.nan_code < 0:
        raise ValueError(f"quantize_mx writes fp8 formats (e4m3fn, e5m2), not {fmt}")
    if x.shape[0] % MX_GROUP_PARTITIONS or x.shape[1] % MX_LANES:
        raise ValueError(f"x must be [8k, 4m] (MX groups of 8 partitions x 4), got {x.shape}")
    return x, f


def quantize_mx(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Quantize f32[P, F] (P a multiple of 8, F of 4) to MX ``fmt`` ("e4m3fn" or "e5m2").

    Returns (packed int64[P, F / 4]: four codes per element, value l of x[p, 4j + l] in byte
    l of element [p, j]; scale codes int64[P / 8, F / 4]: group g = partitions 8g .. 8g + 7).
    """
    x, f = _quantize_operand(x, fmt)
    codes = np.empty((x.shape[0], x.shape[1] // MX_LANES), dtype=np.int64)
    scales = np.empty((x.shape[0] // MX_GROUP_PARTITIONS, codes.shape[1]), dtype=np.int64)
    sign_bit = 1 << (f.bits - 1)
    _quantize_jit(x, _POSITIVE[f.name], f.emax, f.bits, sign_bit, f.nan_code, codes, scales)
    return codes, scales


def _encode_ref(v: np.ndarray, f: MiniFloat) -> np.ndarray:
    positive = _POSITIVE[f.name]
    a = np.minimum(np.abs(v), positive[-1])
    hi = np.minimum(np.searchsorted(positive, a), len(positive) - 1)
    lo = np.maximum(hi - 1, 0)
    exact = positive[hi] == a
    below, above = a - positive[lo], positive[hi] - a
    pick_lo = (below < above) | ((below == above) & (lo % 2 == 0))
    code = np.where(exact, hi, np.where(pick_lo, lo, hi))
    negative = (v < 0) | ((v == 0) & np.signbit(v))
    return np.where(negative, code | (1 << (f.bits - 1)), code).astype(np.int64)


def quantize_mx_ref(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``quantize_mx``, vectorised over groups."""
    x, f = _quantize_operand(x, fmt)
    p, cols = x.shape[0], x.shape[1] // MX_LANES
    blocks = x.astype(np.float64).reshape(p // 8, 8, cols, MX_LANES)  # [g, row, j, lane]
    finite = np.isfinite(blocks).all(axis=(1, 3))
    amax = np.where(np.isfinite(blocks), np.abs(blocks), 0.0).max(axis=(1, 3))
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(amax > 0, amax, 1.0))).astype(np.int64)
    scales = np.clip(exponent - f.emax + SCALE_BIAS, 0, 254)
    scales = np.where(amax == 0, 0, scales)
    scales = np.where(finite, scales, SCALE_NAN)
    factor = np.exp2((SCALE_BIAS - np.minimum(scales, 254)).astype(np.float64))
    scaled = blocks * factor[:, None, :, None]
    with np.errstate(invalid="ignore"):
        codes = _encode_ref(np.nan_to_num(scaled), f)
    codes = np.where((scales == SCALE_NAN)[:, None, :, None], f.nan_code, codes)
    shifts = np.arange(MX_LANES, dtype=np.int64) * f.bits
    words = (codes << shifts).sum(axis=3).reshape(p, cols)
    return words.astype(np.int64), scales.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# dequantize_mx


@numba.njit(cache=True)
def _dequantize_jit(
    packed: np.ndarray, scales: np.ndarray, values: np.ndarray, width: int, out: np.ndarray
) -> None:
    parts, columns = packed.shape
    mask = (1 << width) - 1
    for p in range(parts):
        for m in range(columns):
            s = scales[p // 8, m]
            factor = np.nan if s == SCALE_NAN else 2.0 ** (s - SCALE_BIAS)
            for lane in range(4):
                code = (packed[p, m] >> (width * lane)) & mask
                out[lane * parts + p, m] = np.float32(values[code] * factor)


def _dequantize_operands(
    packed: np.ndarray, scales: np.ndarray, fmt: str
) -> tuple[np.ndarray, np.ndarray, MiniFloat]:
    packed = _checks.i64(packed, "packed", 2)
    scales = _checks.i64(scales, "scales", 2)
    f = _format(fmt)
    groups = -(-packed.shape[0] // MX_GROUP_PARTITIONS)
    if scales.shape != (groups, packed.shape[1]):
        raise ValueError(f"scales must be [{groups}, {packed.shape[1]}], got {scales.shape}")
    return packed, scales, f


def dequantize_mx(packed: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """MX data to fp32, as TensorE's ``nc_matmul_mx`` reads it: packed int64[P, M] of ``fmt``
    x4 elements, scale codes int64[ceil(P / 8), M]. Returns f32[4P, M], contraction row
    ``l * P + p`` holding value l of packed element [p, m] times ``2^(scale - 127)`` (the
    arch guide's K = 512 = 128 partitions x 4 [S3]; the row order does not change a matmul)."""
    packed, scales, f = _dequantize_operands(packed, scales, fmt)
    out = np.empty((MX_LANES * packed.shape[0], packed.shape[1]), dtype=np.float32)
    _dequantize_jit(packed, scales, _VALUES[f.name], f.bits, out)
    return out


def dequantize_mx_ref(packed: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """Reference for ``dequantize_mx``."""
    packed, scales, f = _dequantize_operands(packed, scales, fmt)
    lanes = (packed[None] >> (np.arange(MX_LANES)[:, None, None] * f.bits)) & ((1 << f.bits) - 1)
    values = _VALUES[f.name][lanes]  # [lane, P, M]
    group_scale = np.repeat(scales, MX_GROUP_PARTITIONS, axis=0)[: packed.shape[0]]
    factor = np.where(group_scale == SCALE_NAN, np.nan, np.exp2(group_scale - SCALE_BIAS))
    product = values * factor[None]
    return product.reshape(-1, packed.shape[1]).astype(np.float32)

"""Activation function semantics: a jitted per-element function and its NumPy reference table.

Each function is evaluated in float64 on the fp32 pre-activation value and rounded once to fp32,
so the result is within one fp32 ulp of the exact function value (the hardware's piecewise
polynomial approximations are not modelled; HARDWARE.md §2.3 lists their valid input ranges).
Copy, relu, abs, sign and square are exact; sqrt and reciprocal are correctly rounded.

Definitions (``y`` is the fp32 input as float64):

- gelu = y * Phi(y) = 0.5 * y * (1 + erf(y / sqrt(2))), evaluated as 0.5 * y * erfc(-y / sqrt(2))
- gelu_apprx_tanh = 0.5 * y * (1 + tanh(sqrt(2/pi) * (y + 0.044715 * y^3))), evaluated as
  y * sigmoid(2 * sqrt(2/pi) * (y + 0.044715 * y^3))
- sigmoid = 1 / (1 + exp(-y)); silu = y * sigmoid(y); softplus = max(y, 0) + log1p(exp(-|y|))
- mish = y * tanh(softplus(y)); rsqrt = 1 / sqrt(y); reciprocal = 1 / y; sign(0) = 0
- gelu_dx = Phi(y) + y * phi(y) with Phi(y) = 0.5 * erfc(-y / sqrt(2));
  silu_dx = sigmoid(y) * (1 + y * (1 - sigmoid(y)));
  erf_dx = 2 / sqrt(pi) * exp(-y^2)
- relu(NaN) = NaN and sign(NaN) = NaN (NaN propagates through every function).
The erfc and sigmoid forms avoid the cancellation of ``1 + erf`` / ``1 + tanh`` for negative y,
where the textbook forms lose all precision (and would make the result depend on the last bit of
the libm in use).
Out-of-domain inputs give IEEE results: log(0) = -inf, log(-1) = sqrt(-1) = NaN, rsqrt(0) = inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from .ops import ActivationFunction as Act

_COPY = int(Act.copy)
_EXP = int(Act.exp)
_LOG = int(Act.log)
_TANH = int(Act.tanh)
_SIGMOID = int(Act.sigmoid)
_RELU = int(Act.relu)
_GELU = int(Act.gelu)
_GELU_TANH = int(Act.gelu_apprx_tanh)
_SILU = int(Act.silu)
_SOFTPLUS = int(Act.softplus)
_SQRT = int(Act.sqrt)
_RSQRT = int(Act.rsqrt)
_RECIPROCAL = int(Act.reciprocal)
_SQUARE = int(Act.square)
_ABS = int(Act.abs)
_SIGN = int(Act.sign)
_SIN = int(Act.sin)
_COS = int(Act.cos)
_ERF = int(Act.erf)
_MISH = int(Act.mish)
_ARCTAN = int(Act.arctan)
_GELU_DX = int(Act.gelu_dx)
_SILU_DX = int(Act.silu_dx)
_ERF_DX = int(Act.erf_dx)

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_GELU_TANH_CUBIC = 0.044715


@numba.njit(cache=True, error_model="numpy")
def _sigmoid(y: float) -> float:
    return 1.0 / (1.0 + math.exp(-y))


@numba.njit(cache=True, error_model="numpy")
def _softplus(y: float) -> float:
    return max(y, 0.0) + math.log1p(math.exp(-abs(y)))


@numba.njit(cache=True, error_model="numpy")
def act_f64(y: float, func: int) -> float:
    """Activation ``func`` of one float64 value (module docstring has the definitions)."""
    if func == _COPY:
        return y
    if func == _EXP:
        return math.exp(y)
    if func == _LOG:
        return math.log(y) if y >= 0.0 else math.nan
    if func == _TANH:
        return math.tanh(y)
    if func == _SIGMOID:
        return _sigmoid(y)
    if func == _RELU:
        return y if (y > 0.0 or y != y) else 0.0
    if func == _GELU:
        return 0.5 * y * math.erfc(-y * _SQRT_HALF)
    if func == _GELU_TANH:
        return y * _sigmoid(2.0 * _SQRT_2_OVER_PI * (y + _GELU_TANH_CUBIC * y * y * y))
    if func == _SILU:
        return y * _sigmoid(y)
    if func == _SOFTPLUS:
        return _softplus(y)
    if func == _SQRT:
        return math.sqrt(y) if y >= 0.0 else math.nan
    if func == _RSQRT:
        return 1.0 / math.sqrt(y) if y >= 0.0 else math.nan
    if func == _RECIPROCAL:
        return 1.0 / y
    if func == _SQUARE:
        return y * y
    if func == _ABS:
        return abs(y)
    if func == _SIGN:
        if y > 0.0:
            return 1.0
        if y < 0.0:
            return -1.0
        return y  # ±0 and NaN
    if func == _SIN:
        return math.sin(y)
    if func == _COS:
        return math.cos(y)
    if func == _ERF:
        return math.erf(y)
    if func == _MISH:
        return y * math.tanh(_softplus(y))
    if func == _ARCTAN:
        return math.atan(y)
    if func == _GELU_DX:
        return 0.5 * math.erfc(-y * _SQRT_HALF) + y * _INV_SQRT_2PI * math.exp(-0.5 * y * y)
    if func == _SILU_DX:
        s = _sigmoid(y)
        return s * (1.0 + y * (1.0 - s))
    if func == _ERF_DX:
        return _TWO_OVER_SQRT_PI * math.exp(-y * y)
    return math.nan


# --- reference table (float64 arrays in, float64 arrays out) ---------------------------------

_erf_ufunc = np.frompyfunc(math.erf, 1, 1)
_erfc_ufunc = np.frompyfunc(math.erfc, 1, 1)


def _erf_ref(y: np.ndarray) -> np.ndarray:
    return np.asarray(_erf_ufunc(y), dtype=np.float64)


def _erfc_ref(y: np.ndarray) -> np.ndarray:
    return np.asarray(_erfc_ufunc(y), dtype=np.float64)


def _sigmoid_ref(y: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-y))


def _softplus_ref(y: np.ndarray) -> np.ndarray:
    return np.maximum(y, 0.0) + np.log1p(np.exp(-np.abs(y)))


def _relu_ref(y: np.ndarray) -> np.ndarray:
    return np.where((y > 0.0) | np.isnan(y), y, 0.0)


def _sign_ref(y: np.ndarray) -> np.ndarray:
    return np.where(y > 0.0, 1.0, np.where(y < 0.0, -1.0, y))


def _gelu_ref(y: np.ndarray) -> np.ndarray:
    return 0.5 * y * _erfc_ref(-y * _SQRT_HALF)


def _gelu_tanh_ref(y: np.ndarray) -> np.ndarray:
    return y * _sigmoid_ref(2.0 * _SQRT_2_OVER_PI * (y + _GELU_TANH_CUBIC * y * y * y))


def _gelu_dx_ref(y: np.ndarray) -> np.ndarray:
    return 0.5 * _erfc_ref(-y * _SQRT_HALF) + y * _INV_SQRT_2PI * np.exp(-0.5 * y * y)


def _silu_dx_ref(y: np.ndarray) -> np.ndarray:
    s = _sigmoid_ref(y)
    return s * (1.0 + y * (1.0 - s))


ACTIVATION_REF: dict[Act, Callable[[np.ndarray], np.ndarray]] = {
    Act.copy: lambda y: y.copy(),
    Act.exp: np.exp,
    Act.log: np.log,
    Act.tanh: np.tanh,
    Act.sigmoid: _sigmoid_ref,
    Act.relu: _relu_ref,
    Act.gelu: _gelu_ref,
    Act.gelu_apprx_tanh: _gelu_tanh_ref,
    Act.silu: lambda y: y * _sigmoid_ref(y),
    Act.softplus: _softplus_ref,
    Act.sqrt: np.sqrt,
    Act.rsqrt: lambda y: 1.0 / np.sqrt(y),
    Act.reciprocal: lambda y: 1.0 / y,
    Act.square: lambda y: y * y,
    Act.abs: np.abs,
    Act.sign: _sign_ref,
    Act.sin: np.sin,
    Act.cos: np.cos,
    Act.erf: _erf_ref,
    Act.mish: lambda y: y * np.tanh(_softplus_ref(y)),
    Act.arctan: np.arctan,
    Act.gelu_dx: _gelu_dx_ref,
    Act.silu_dx: _silu_dx_ref,
    Act.erf_dx: lambda y: _TWO_OVER_SQRT_PI * np.exp(-y * y),
}
"""Reference definition of each activation function over float64 arrays (spec of ``act_f64``)."""


def act_f64_ref(y: np.ndarray, func: int) -> np.ndarray:
    """Reference for ``act_f64`` over a float64 array."""
    with np.errstate(all="ignore"):
        return np.asarray(ACTIVATION_REF[Act(func)](np.asarray(y, dtype=np.float64)))

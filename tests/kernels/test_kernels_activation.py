"""Tests of activation / activation_reduce: jitted vs reference for every function; formulas."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from helpers import (
    FP32_EPS,
    SHAPES,
    assert_exact,
    assert_ulp,
    assert_within_sum_bound,
    mixed_f32,
    moderate_f32,
)

from hwsim import kernels as K
from hwsim.kernels import ActivationFunction as Act

FUNCTIONS = list(Act)  # the alias ``identity`` is the same member as ``copy``
POSITIVE_DOMAIN = {Act.log, Act.sqrt, Act.rsqrt}


def _tolerance(func: Act) -> int:
    # Exact or correctly rounded functions agree bit for bit; the others are a float64 libm
    # evaluation rounded once, whose libm implementations may differ in the last float64 bit.
    return 0 if func in K.EXACT_ACTIVATIONS else 1


def _inputs(func: Act, shape: tuple[int, int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    data = [mixed_f32(rng, shape), moderate_f32(rng, shape)]
    if func in POSITIVE_DOMAIN:
        data.append(np.abs(mixed_f32(rng, shape)))
    return data


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("func", FUNCTIONS, ids=lambda f: f.name)
def test_activation_matches_reference(func: Act, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(int(func) * 100 + shape[0] + shape[1])
    scale = moderate_f32(rng, (shape[0],), scale=1.5)
    bias = moderate_f32(rng, (shape[0], 1), scale=0.5)
    for x in _inputs(func, shape, seed=int(func) + shape[1]):
        for s, b in [(1.0, 0.0), (scale, bias)]:
            got = K.activation(x, func, s, b)
            assert_ulp(got, K.activation_ref(x, func, s, b), _tolerance(func), func.name)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("func", FUNCTIONS, ids=lambda f: f.name)
def test_activation_reduce_matches_reference(func: Act, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(int(func) * 7 + shape[0] + shape[1])
    x = moderate_f32(rng, shape, scale=2.0)
    scale = moderate_f32(rng, (shape[0],), scale=0.5)
    if func in POSITIVE_DOMAIN:
        x, scale = np.abs(x) + np.float32(0.5), np.abs(scale)
    out, red = K.activation_reduce(x, func, scale, 0.25)
    ref_out, ref_red = K.activation_reduce_ref(x, func, scale, 0.25)
    assert_ulp(out, ref_out, _tolerance(func), func.name)
    assert red.shape == (shape[0],) and red.dtype == np.float32
    # The kernel adds the fp32 outputs with an fp32 accumulator; compare with the float64 sum.
    wide = out.astype(np.float64)
    assert_within_sum_bound(red, wide.sum(axis=1), np.abs(wide).sum(axis=1), shape[1], func.name)
    finite = np.isfinite(ref_red)
    assert_within_sum_bound(
        red[finite],
        ref_red[finite].astype(np.float64),
        np.abs(wide).sum(axis=1)[finite],
        shape[1],
        f"{func.name} vs reference",
    )


def test_activation_reduce_accumulates_in_fp32_order() -> None:
    # 1 + 2^-24 + 2^-24 + ... : an fp32 accumulator starting at element 0 never moves off 1.0.
    x = np.full((1, 9), 2.0**-24, np.float32)
    x[0, 0] = 1.0
    _, red = K.activation_reduce(x, Act.copy)
    assert red[0] == np.float32(1.0)


def _elementwise(fn: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """Apply a Python float function to each element in float64, then round once to fp32."""
    with np.errstate(all="ignore"):
        return (
            np.array([fn(float(v)) for v in x.ravel()], np.float64)
            .reshape(x.shape)
            .astype(np.float32)
        )


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0


INDEPENDENT = {
    # Textbook forms; the inputs below stay above -4, where 1 + erf / 1 + tanh keep >= 38 bits.
    Act.gelu: lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))),
    Act.gelu_apprx_tanh: lambda v: (
        0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    ),
    Act.gelu_dx: lambda v: (
        0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
        + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)
    ),
    Act.erf: math.erf,
    Act.sigmoid: _sigmoid,
    Act.silu: lambda v: v * _sigmoid(v),
    Act.softplus: lambda v: math.log1p(math.exp(v)) if v < 30 else v + math.log1p(math.exp(-v)),
    Act.tanh: math.tanh,
    Act.exp: lambda v: math.exp(v) if v < 700 else math.inf,
    Act.sin: math.sin,
    Act.arctan: math.atan,
    Act.erf_dx: lambda v: 2.0 / math.sqrt(math.pi) * math.exp(-v * v),
    Act.silu_dx: lambda v: _sigmoid(v) + v * _sigmoid(v) * (1.0 - _sigmoid(v)),
    Act.mish: lambda v: v * math.tanh(math.log1p(math.exp(v)) if v < 30 else v),
}


@pytest.mark.parametrize("func", list(INDEPENDENT), ids=lambda f: f.name)
def test_activation_against_independent_formula(func: Act) -> None:
    # Written differently from the kernels (erf for gelu, log1p(exp) for softplus, …) and
    # evaluated with Python's math module; 2 ulps allow for the two different float64 paths.
    x = moderate_f32(np.random.default_rng(int(func)), (4, 256), scale=3.0)
    x = np.maximum(x, np.float32(-4.0))
    assert_ulp(K.activation(x, func), _elementwise(INDEPENDENT[func], x), 2, func.name)


def test_activation_scale_bias_and_simple_functions() -> None:
    x = np.array([[-2.0, -0.0, 0.0, 0.5, np.nan, 3.0]], np.float32)
    pre = x * np.float32(2.0) + np.float32(1.0)
    assert_exact(K.activation(x, Act.copy, 2.0, 1.0), pre, "copy(2x + 1)")
    relu = K.activation(x, Act.relu)[0]
    assert relu[[0, 1, 2, 3, 5]].tolist() == [0.0, 0.0, 0.0, 0.5, 3.0] and np.isnan(relu[4])
    sign = K.activation(x, Act.sign)[0]
    assert sign[[0, 1, 2, 3, 5]].tolist() == [-1.0, 0.0, 0.0, 1.0, 1.0] and np.isnan(sign[4])
    assert_exact(K.activation(x, Act.square), x * x, "square")
    assert_exact(K.activation(x, Act.abs), np.abs(x), "abs")
    with np.errstate(all="ignore"):
        special = K.activation(np.array([[0.0, -1.0, 0.0, 1e30]], np.float32), Act.log)[0]
    assert special[0] == -np.inf and np.isnan(special[1])
    assert K.activation(np.array([[0.0]], np.float32), Act.rsqrt)[0, 0] == np.inf
    assert K.activation(np.array([[100.0]], np.float32), Act.exp)[0, 0] == np.inf


def test_activation_is_within_one_ulp_of_high_precision_value() -> None:
    # exp of exactly representable fp32 inputs against a float64 value rounded once: the
    # kernel must be correctly rounded up to one ulp.
    x = np.linspace(-80.0, 80.0, 1001, dtype=np.float32).reshape(1, -1)
    exact = np.exp(x.astype(np.float64))
    assert_ulp(K.activation(x, Act.exp), exact.astype(np.float32), 1, "exp")
    assert np.max(np.abs(K.activation(x, Act.exp) / exact - 1.0)) <= FP32_EPS


def test_activation_rejects_unknown_function() -> None:
    with pytest.raises(ValueError, match="func=999 is not a valid ActivationFunction"):
        K.activation(np.ones((1, 1), np.float32), 999)


@pytest.mark.parametrize("kernel", [K.activation, K.activation_ref], ids=["jit", "ref"])
def test_activation_keeps_negative_zero_without_a_bias(kernel) -> None:
    # func(x * scale + bias): a zero bias is no add, so -0.0 reaches the function (1/-0 = -inf,
    # as torch.reciprocal); a nonzero bias is added as before.
    x = np.array([[-0.0, 0.0, -2.0]], np.float32)
    with np.errstate(all="ignore"):
        out = kernel(x, Act.reciprocal)[0]
        per_partition = kernel(
            np.array([[-0.0], [-0.0]], np.float32), Act.copy, 1.0, np.array([0.0, 1.0], np.float32)
        )
    assert out.tolist() == [-np.inf, np.inf, -0.5]
    assert np.signbit(per_partition[0, 0]) and per_partition[1, 0] == 1.0
    assert np.signbit(kernel(np.array([[0.0]], np.float32), Act.copy, -1.0)[0, 0])

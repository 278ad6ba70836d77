"""Elementwise lowerings against torch: activations, ALU ops, broadcasting, scalars, dtypes."""

from __future__ import annotations

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from hwsim.bridge.precision import Precision
from tests.bridge.helpers import check_op

SHAPES = [(1,), (7,), (130,), (257,), (3, 130), (130, 257), (2, 3, 7), (5, 1, 257)]

UNARY = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "neg": torch.neg,
    "abs": torch.abs,
    "erf": torch.erf,
    "sin": torch.sin,
    "square": lambda x: x**2,
}
POSITIVE_UNARY = {
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary(name, shape):
    check_op(UNARY[name], [shape])


@pytest.mark.parametrize("shape", [(7,), (130, 257)], ids=str)
@pytest.mark.parametrize("name", POSITIVE_UNARY)
def test_unary_positive_domain(name, shape):
    check_op(POSITIVE_UNARY[name], [shape], positive=True)


BROADCASTS = [
    ((7,), (7,)),
    ((3, 130), (130,)),
    ((130, 1), (1, 257)),
    ((2, 3, 7), (3, 1)),
    ((257,), ()),
    ((1,), (130,)),
    ((5, 1, 257), (5, 130, 1)),
]
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "add_alpha": partial(torch.add, alpha=2.5),
    "sub_alpha": partial(torch.sub, alpha=-0.5),
}


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasting(name, shapes):
    check_op(BINARY[name], list(shapes))


SCALAR_OPS = {
    "add": lambda x: x + 2.5,
    "radd": lambda x: 1 + x,
    "sub": lambda x: x - 3,
    "rsub": lambda x: 3 - x,
    "mul": lambda x: x * 0.5,
    "div": lambda x: x / 3,
    "rdiv": lambda x: 2 / x,
}


@pytest.mark.parametrize("shape", [(1,), (257,), (3, 130)], ids=str)
@pytest.mark.parametrize("name", SCALAR_OPS)
def test_binary_with_scalar(name, shape):
    check_op(SCALAR_OPS[name], [shape], positive=name == "rdiv")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_elementwise(dtype):
    check_op(lambda x, y: F.gelu(x) * y + 1, [(130, 257), (257,)], dtype)


def test_mixed_dtypes_promote_like_torch():
    def fn(x, y):
        return x * y.to(torch.bfloat16) + x.float()

    check_op(fn, [(3, 130), (130,)], torch.bfloat16)


def test_chain_on_non_contiguous_views():
    def fn(x):
        t = x.t()
        return torch.sigmoid(t) * t[::2].sum() + t.expand(2, 257, 130)

    check_op(fn, [(130, 257)])


def test_bf16_compute_on_fp32_model_uses_bf16_tolerance():
    # One op: inputs and result each rounded to bf16 once, within the bf16 tolerance of fp32.
    # (Chains that cancel, e.g. x * y + x, exceed it against fp32: intermediates are bf16.)
    run = check_op(torch.mul, [(130, 257), (130, 257)], precision=Precision("all", "bf16"))
    assert run.result.summary.total_ns > 0

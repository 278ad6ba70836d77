"""aten.convolution as an implicit GEMM on TensorE, against torch on the tiny config (32 PE rows
and columns, so channels over 32 take several K chunks and output-channel blocks)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.precision import Precision
from hwsim.bridge.registry import OpCall, check_support
from tests.bridge.helpers import check_op

aten = torch.ops.aten

#: tiny's TensorE: K rows, stationary columns (output channels), PSUM bank (fp32 outputs).
TILE_K, TILE_M, TILE_N = 32, 32, 512


@pytest.mark.parametrize(
    "x, w, kwargs",
    [
        ((2, 3, 7, 9), (5, 3, 3, 3), dict(padding=1)),  # odd sizes, batch folded into one block
        ((1, 40, 6, 5), (36, 40, 3, 3), dict(stride=2, padding=1)),  # 2 K chunks, 2 co blocks
        ((2, 8, 9, 9), (16, 8, 1, 1), dict(stride=2)),  # the downsample 1x1
        ((1, 4, 11, 13), (6, 4, 3, 2), dict(stride=(2, 1), padding=(2, 0), dilation=(2, 3))),
        ((3, 5, 30, 30), (7, 5, 3, 3), dict(padding=1)),  # 900 outputs: row blocks
        ((1, 3, 1, 700), (4, 3, 1, 3), dict(padding=(0, 1))),  # a row wider than a PSUM bank
        ((2, 128, 5, 5), (64, 128, 3, 3), dict(padding=1)),  # weights not all resident
        ((1, 2, 4, 4), (3, 2, 5, 5), dict(padding=3)),  # windows mostly padding
    ],
    ids=str,
)
def test_conv2d(x, w, kwargs):
    check_op(lambda a, b: F.conv2d(a, b, **kwargs), [x, w])


def test_conv2d_bias_and_bf16_precision():
    check_op(lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 5, 5), (4, 3, 3, 3), (4,)])
    check_op(
        lambda x, w: F.conv2d(x, w, stride=2, padding=1),
        [(2, 33, 8, 8), (20, 33, 3, 3)],
        precision=Precision("all", "bf16"),
    )
    check_op(lambda x, w: F.conv2d(x, w, padding=1), [(1, 4, 6, 6), (4, 4, 3, 3)], torch.bfloat16)


def test_conv1d_with_bias():
    check_op(lambda x, w, b: F.conv1d(x, w, b, padding=2, stride=2), [(2, 3, 17), (4, 3, 5), (4,)])


@pytest.mark.parametrize("groups, w", [(2, (6, 2, 3, 3)), (4, (8, 1, 3, 3))], ids=str)
def test_grouped_and_depthwise(groups, w):
    check_op(lambda x, k: F.conv2d(x, k, groups=groups, padding=1), [(2, 4, 5, 5), w])


def test_non_contiguous_input():
    """The window loads read through the input's strides (here a channels-last permute)."""
    check_op(
        lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w, padding=1), [(2, 6, 5, 3), (4, 3, 3, 3)]
    )


def expected_matmuls(x, w, out_hw, groups=1):
    """groups x output blocks x co blocks x ci chunks x taps, for blocks the planner makes
    when the windows fit SBUF: whole images per PSUM bank if they fit, else rows of them."""
    n, c_in = x[0], x[1]
    c_out, _, kh, kw = w
    oh, ow = out_hw
    if oh * ow <= TILE_N:
        blocks = math.ceil(n / (TILE_N // (oh * ow)))
    else:
        blocks = n * math.ceil(oh / (TILE_N // ow))
    co_blocks = math.ceil(c_out / groups / TILE_M)
    ci_chunks = math.ceil(c_in / groups / TILE_K)
    return groups * blocks * co_blocks * ci_chunks * kh * kw


@pytest.mark.parametrize(
    "x, w, kwargs, out_hw",
    [
        ((2, 40, 9, 9), (36, 40, 3, 3), dict(stride=2, padding=1), (5, 5)),
        ((3, 8, 30, 30), (8, 8, 3, 3), dict(padding=1), (30, 30)),
        ((2, 16, 8, 8), (16, 16, 1, 1), dict(stride=2), (4, 4)),
        ((2, 4, 6, 6), (6, 2, 3, 3), dict(groups=2, padding=1), (6, 6)),
    ],
    ids=str,
)
def test_tensor_engine_matmul_count(x, w, kwargs, out_hw):
    run = check_op(lambda a, b: F.conv2d(a, b, **kwargs), [x, w])
    tensor = run.result.summary.engines["tensor"]
    assert tensor.instructions == expected_matmuls(x, w, out_hw, kwargs.get("groups", 1))


def _call(x, w, transposed=False):
    args = (x, w, None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1)
    out = torch.empty(1)
    return OpCall(aten.convolution.default, args, {}, out)


def test_transposed_convolution_is_refused():
    x, w = torch.empty(1, 4, 5, 5), torch.empty(4, 3, 3, 3)
    with pytest.raises(Unsupported, match="transposed convolution") as error:
        check_support(_call(x, w, transposed=True))
    assert error.value.reason is Reason.SHAPE


def test_3d_convolution_is_refused():
    x, w = torch.empty(1, 4, 5, 5, 5), torch.empty(4, 4, 3, 3, 3)
    with pytest.raises(Unsupported, match="3-D convolution"):
        check_support(_call(x, w))

"""LayerNorm (native_layer_norm), var / var_mean and the RMSNorm pattern against torch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.bridge.helpers import check_op


@pytest.mark.parametrize(
    "shape, normalized", [((5, 130), 1), ((2, 3, 129), 1), ((130, 7, 9), 2), ((3, 1), 1)], ids=str
)
def test_layer_norm_all_outputs(shape, normalized):
    dims = shape[-normalized:]

    def fn(x, w, b):
        return torch.ops.aten.native_layer_norm(x, dims, w, b, 1e-5)

    check_op(fn, [shape, dims, dims])


@pytest.mark.parametrize("affine", ["weight", "bias", "none"])
def test_layer_norm_partial_affine(affine):
    def fn(x, p):
        w = p if affine == "weight" else None
        b = p if affine == "bias" else None
        return F.layer_norm(x, (33,), w, b, eps=1e-3)

    check_op(fn, [(7, 33), (33,)])


def test_layer_norm_long_rows_on_trn2():
    """Rows over 512 features take several bn_stats chunks."""
    check_op(
        lambda x, w, b: F.layer_norm(x, (1000,), w, b), [(3, 1000), (1000,), (1000,)], config="trn2"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_low_precision(dtype):
    check_op(lambda x, w, b: F.layer_norm(x, (130,), w, b), [(5, 130), (130,), (130,)], dtype)


@pytest.mark.parametrize(
    "dims, correction, keepdim", [(-1, 1, False), ((0, 2), 0, True), (None, 1, False)], ids=str
)
def test_var_and_var_mean(dims, correction, keepdim):
    def fn(x):
        var = torch.var(x, dims, correction=correction, keepdim=keepdim)
        return var, torch.var_mean(x, dims, correction=correction, keepdim=keepdim)

    check_op(fn, [(5, 7, 9)])


def test_rms_norm_pattern():
    """Llama's RMSNorm after decomposition: pow 2, mean, add eps, rsqrt, mul, mul."""

    def fn(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    check_op(fn, [(2, 9, 130), (130,)])

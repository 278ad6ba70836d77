"""Transposed convolution (``bridge.conv_transpose``) and ``_embedding_bag``
(``bridge.embedding_bag``) through torch.compile(backend="hwsim") with fallback='error': every
op on the simulator, outputs equal to CPU eager within the fp32 tolerance, on configurations
that exercise stride, padding, output_padding, dilation and groups, and every bag mode. The
decompositions themselves are checked against the CPU kernels in all their outputs."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge.conv_transpose import convolution
from hwsim.bridge.embedding_bag import embedding_bag
from hwsim.bridge.precision import TOLERANCES, compare

aten = torch.ops.aten
OPTIONS = {"config": "trn2", "fallback": "error", "auto_cast": "none"}  # lowerings, exact


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_run(model, *inputs):
    with torch.no_grad():
        expected = model(*inputs)
        got = torch.compile(model, backend="hwsim", options=dict(OPTIONS))(*inputs)
    report = bridge.last_report()
    assert report is not None
    assert report.fallbacks() == []
    assert [g["cpu"] for g in report.graphs] == [0] * len(report.graphs)
    assert report.numerics_ok
    stats = compare(got.float(), expected.float(), TOLERANCES["fp32"])
    assert stats.ok, stats
    return report


@pytest.mark.parametrize(
    "build, shape",
    [
        (
            lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
            (2, 4, 5, 5),
        ),
        (
            lambda: torch.nn.ConvTranspose2d(
                6, 4, (3, 2), stride=(1, 3), padding=(2, 0), dilation=(2, 1)
            ),
            (1, 6, 6, 4),
        ),
        (lambda: torch.nn.ConvTranspose2d(4, 8, 4, stride=2, groups=2, bias=False), (2, 4, 3, 4)),
        (lambda: torch.nn.ConvTranspose2d(40, 36, 2, stride=2), (1, 40, 4, 4)),  # U-Net upsampling
        (
            lambda: torch.nn.ConvTranspose1d(3, 5, 4, stride=3, padding=2, output_padding=2),
            (2, 3, 7),
        ),
        (lambda: torch.nn.ConvTranspose1d(4, 4, 3, groups=4, dilation=2), (1, 4, 9)),  # depthwise
    ],
    ids=["s2-p1-op1", "dilated-asym", "groups", "unet-up", "1d-s3", "1d-depthwise"],
)
def test_conv_transpose_on_the_simulator(build, shape):
    torch.manual_seed(0)
    report = compiled_run(build().eval(), torch.randn(shape))
    assert "aten.convolution.default" in {r.op for r in report.lowered()}


def test_conv_transpose_decomposition_equals_the_cpu_kernel_in_1_2_and_3_d():
    torch.manual_seed(0)
    configs = [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 0, 2, 2), (2, 0, 1, 1, 4), (2, 3, 0, 1, 1)]
    for dims, (s, p, op, d, g) in itertools.product((1, 2, 3), configs):
        x, w = torch.randn(2, 4, *([5] * dims)), torch.randn(4, 8 // g, *([3] * dims))
        b = torch.randn(8)
        args = (b, [s] * dims, [p] * dims, [d] * dims, True, [op] * dims, g)
        expected = aten.convolution.default(x, w, *args)
        got = convolution(x, w, *args)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_3d_in_bf16_rounds_once():
    """The depth taps' sum runs in fp32: one rounding to bf16.

    torch's own bf16 CPU kernel is not the reference: how it accumulates depends on the CPU
    (oneDNN's bf16 path), and on some machines it is several units off. The test asks that the
    result be the exactly rounded fp32 sum, and no further from it than the CPU kernel is."""
    torch.manual_seed(0)
    x, w = torch.randn(1, 4, 5, 5, 5) * 8, torch.randn(4, 8, 3, 3, 3) * 8
    args = (None, [2] * 3, [1] * 3, [1] * 3, True, [1] * 3, 1)
    expected = aten.convolution.default(x.bfloat16(), w.bfloat16(), *args)
    got = convolution(x.bfloat16(), w.bfloat16(), *args)
    assert got.dtype == torch.bfloat16
    exact = aten.convolution.default(x.bfloat16().float(), w.bfloat16().float(), *args)
    assert torch.equal(got, exact.bfloat16())  # fp32 sum, rounded once
    ours = (got.float() - exact).abs().max()
    theirs = (expected.float() - exact).abs().max()
    assert ours <= theirs, f"hwsim {ours} from the fp32 sum, torch's CPU kernel {theirs}"


BAG_CASES = [
    dict(mode="sum"),
    dict(mode="mean"),
    dict(mode="max"),
    dict(mode="sum", per_sample_weights=True),
    dict(mode="mean", padding_idx=2),
    dict(mode="sum", include_last_offset=True),
    dict(mode="max", include_last_offset=True),
]


@pytest.mark.parametrize(
    "case", BAG_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())
)
def test_embedding_bag_on_the_simulator(case):
    torch.manual_seed(0)
    case = dict(case)
    weighted = case.pop("per_sample_weights", False)
    model = torch.nn.EmbeddingBag(20, 16, **case).eval()
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 19, 0])
    offsets = torch.tensor([0, 4, 4, 7, 10] if case.get("include_last_offset") else [0, 4, 4, 7])
    extra = (torch.rand(10),) if weighted else ()
    report = compiled_run(model, indices, offsets, *extra)
    lowered = {r.op for r in report.lowered()}
    assert "aten.embedding.default" in lowered
    assert ("aten.amax.default" if case["mode"] == "max" else "aten.mm.default") in lowered


def test_embedding_bag_2d_input():
    torch.manual_seed(0)
    model = torch.nn.EmbeddingBag(30, 8, mode="mean").eval()
    compiled_run(model, torch.randint(0, 30, (3, 5)))


@pytest.mark.parametrize("forward_only", [False, True])
def test_embedding_bag_decomposition_equals_the_cpu_kernel_in_every_output(forward_only):
    torch.manual_seed(0)
    op = aten._embedding_bag_forward_only.default if forward_only else aten._embedding_bag.default
    w, indices = torch.randn(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offset_sets = [
        torch.tensor([0, 4, 4, 6]),
        torch.tensor([0, 4, 4, 6], dtype=torch.int32),
        torch.tensor([0, 3, 8]),
    ]
    checked = 0
    for offsets, mode, weighted, last, pad in itertools.product(
        offset_sets, (0, 1, 2), (False, True), (False, True), (-1, 2)
    ):
        if weighted and mode:
            continue
        psw = torch.rand(8) if weighted else None
        expected = op(w, indices, offsets, False, mode, False, psw, last, pad)
        got = embedding_bag(
            w, indices, offsets, False, mode, False, psw, last, pad, forward_only=forward_only
        )
        for e, g in zip(expected, got, strict=True):
            assert (e.shape, e.dtype) == (g.shape, g.dtype), (mode, weighted, last, pad)
            torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)
        checked += 1
    assert checked == 48


def test_eager_mode_decomposes_them_too():
    from hwsim.bridge.offload import HwsimMode

    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1).eval()
    bag = torch.nn.EmbeddingBag(20, 8, mode="max").eval()
    x, indices, offsets = (
        torch.randn(1, 4, 4, 4),
        torch.tensor([3, 1, 7, 7, 2]),
        torch.tensor([0, 2]),
    )
    with torch.no_grad():
        expected = conv(x), bag(indices, offsets)
        with HwsimMode(fallback="error", auto_cast="none") as mode:
            got = conv(x), bag(indices, offsets)
    for g, e in zip(got, expected, strict=True):
        assert compare(g, e, TOLERANCES["fp32"]).ok
    assert mode.report.fallbacks() == []
    lowered = {r.op for r in mode.report.lowered()}
    assert {"aten.convolution.default", "aten.embedding.default", "aten.amax.default"} <= lowered

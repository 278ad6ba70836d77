"""A patch convolution (stride = kernel, no padding or dilation, groups 1: ViT's patch
embedding) lowered as one matmul of the image's patches by the prepared weight
(``passes.patch_conv``), against torch; the convolutions that do not qualify keep the conv
path."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PassSelection, run_pipeline
from hwsim.bridge.passes.prepare_constants import PreparedWeight
from hwsim.bridge.precision import Precision, compare

aten = torch.ops.aten

#: tiny's TensorE: contraction rows, stationary columns, PSUM bank.
TILE_K, TILE_M, TILE_N = 32, 32, 512
#: x [2, 3, 16, 24], w [40, 3, 4, 4]: 2 x 4 x 6 = 48 patches of 3 x 4 x 4 = 48 values.
X, W, B = (2, 3, 16, 24), (40, 3, 4, 4), (40,)


def _patch_conv(x, w, b):
    return F.conv2d(x, w, b, stride=4)


def _inputs(*shapes, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) / math.sqrt(s[-1]) for s in shapes]


def _lower(fn, inputs, precision: Precision, passes="all", constants: bool = True):
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    return lower_graph(
        graph,
        inputs,
        config="tiny",
        precision=precision,
        passes=passes,
        constants=names[1:] if constants else (),
    )


def _steps(lowered) -> dict[str, dict]:
    return {s["pass"]: s for s in lowered.pipeline["steps"]}


def _instructions(lowered) -> Counter[str]:
    return Counter(
        type(ins).__name__ for s in lowered.program.cores[0].streams.values() for ins in s
    )


@pytest.mark.parametrize("auto_cast", ["none", "matmult"])
@pytest.mark.parametrize("constants", [True, False], ids=["prepared", "graph-input"])
def test_values_match_eager_and_the_conv_path(auto_cast, constants):
    inputs = _inputs(X, W, B)
    precision = Precision(auto_cast, "bf16")
    want = _patch_conv(*inputs)
    outputs = {}
    for passes in ("all", {"patch_conv": False}):
        lowered = _lower(_patch_conv, inputs, precision, passes, constants)
        got = lowered.run(inputs, race_check=True).outputs
        stats = compare(got, want, precision.tolerance(want.dtype))
        assert stats.ok, (passes, stats)
        outputs[str(passes)] = got
    # Two contraction orders of the same sums: apart by rounding only.
    on, off = outputs["all"], outputs[str({"patch_conv": False})]
    assert compare(on, off, precision.tolerance(want.dtype)).ok


def test_without_bias_and_batch_one():
    inputs = _inputs((1, 2, 6, 6), (5, 2, 3, 3))
    fn = lambda x, w: F.conv2d(x, w, stride=3)  # noqa: E731
    lowered = _lower(fn, inputs, Precision("none", "bf16"))
    assert _steps(lowered)["patch_conv"]["patch_convs"] == 1
    got = lowered.run(inputs, race_check=True).outputs
    assert compare(got, fn(*inputs), Precision("none").tolerance(torch.float32)).ok


def test_lowered_as_one_matmul_of_the_prepared_weight():
    inputs = _inputs(X, W, B)
    graph = make_fx(_patch_conv)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    gm, log = run_pipeline(graph, PassSelection.all(), constants=names[1:])
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.convolution.default not in targets and aten.addmm.default in targets
    (prepared,) = [t for t in targets if isinstance(t, PreparedWeight)]
    assert prepared.transposed and prepared.flattened
    steps = {s["pass"]: s for s in log.steps}
    assert steps["patch_conv"]["patch_convs"] == 1
    assert steps["prepare_constants"]["prepared_uses"] == 1

    precision = Precision("matmult", "bf16")
    on = _instructions(_lower(_patch_conv, inputs, precision))
    off = _instructions(_lower(_patch_conv, inputs, precision, {"patch_conv": False}))
    k, m, n = 3 * 4 * 4, 2 * 4 * 6, 40
    # As a matmul: one per K tile, row tile and PSUM bank of columns.
    assert on["NcMatmul"] == math.ceil(k / TILE_K) * math.ceil(m / TILE_M) * math.ceil(n / TILE_N)
    # As a convolution: one per tap (16), input-channel chunk (1) and output-channel block (2).
    assert off["NcMatmul"] == 16 * 1 * math.ceil(n / TILE_M)


@pytest.mark.parametrize(
    "x, w, kwargs",
    [
        ((1, 3, 8, 8), (4, 3, 4, 4), dict(stride=2)),  # overlapping patches
        ((1, 3, 8, 8), (4, 3, 4, 4), dict(stride=4, padding=1)),
        ((1, 4, 8, 8), (4, 2, 4, 4), dict(stride=4, groups=2)),
        ((1, 3, 8, 8), (4, 3, 2, 2), dict(stride=2, dilation=2)),
        ((1, 3, 9, 8), (4, 3, 4, 4), dict(stride=4)),  # a ragged last row of patches
        ((1, 3, 8, 8), (4, 3, 1, 1), dict(stride=1)),  # 1x1: no patch to gather
    ],
    ids=str,
)
def test_convolutions_that_do_not_qualify_keep_the_conv_path(x, w, kwargs):
    inputs = _inputs(x, w)
    fn = lambda a, b: F.conv2d(a, b, **kwargs)  # noqa: E731
    lowered = _lower(fn, inputs, Precision("none", "bf16"))
    steps = _steps(lowered)
    assert steps["patch_conv"]["patch_convs"] == 0
    assert "aten.convolution.default" in set(lowered.nodes.values())
    got = lowered.run(inputs, race_check=True).outputs
    assert compare(got, fn(*inputs), Precision("none").tolerance(torch.float32)).ok


def test_a_conv_feeding_a_batch_norm_is_left_to_conv_bn():
    from tests.bridge.test_bridge_conv_bn import ConvBn, _exported

    model = ConvBn(bias=False, channels=8).eval()
    model.conv = torch.nn.Conv2d(3, 8, 4, 4, bias=False)  # a patch conv
    x = torch.randn(1, 3, 8, 8)
    graph, examples = _exported(model, x)
    lowered = lower_graph(graph, examples, config="tiny", precision=Precision("none", "bf16"))
    steps = _steps(lowered)
    assert steps["patch_conv"]["patch_convs"] == 0 and steps["conv_bn"]["conv_bn_relu"] == 1
    (got,) = lowered.run(examples, race_check=True).outputs
    assert compare(got, model(x), Precision("none").tolerance(torch.float32)).ok


def test_a_patch_embeddings_tokens_are_the_products_rows():
    """ViT's ``conv(x).flatten(2).transpose(1, 2)``: no copy of the output, the same values."""

    def fn(x, w, b):
        return F.conv2d(x, w, b, stride=4).flatten(2).transpose(1, 2) * 2.0

    inputs = _inputs(X, W, B)
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    gm, _ = run_pipeline(graph, PassSelection.all(), constants=names[1:])
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.clone.default) == 1  # the patch gather only
    precision = Precision("matmult", "bf16")
    lowered = _lower(fn, inputs, precision)
    got = lowered.run(inputs, race_check=True).outputs
    want = fn(*inputs)
    assert compare(got, want, precision.tolerance(want.dtype)).ok

"""The reduction-fusion pass (bridge.passes.reduction_fusion): decomposed softmax, the SDPA
log-sum-exp softmax and RMS norm as one row pass over SBUF."""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.decompositions import _row_logsumexp
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PASS_NAMES, PassSelection, run_pipeline
from hwsim.bridge.passes.reduction_fusion import RowKernel
from hwsim.bridge.precision import Precision, compare
from hwsim.isa.origin import Origin, origin_of

aten = torch.ops.aten
SOFTMAX = get_decompositions([aten._softmax])  # amax -> sub -> exp -> sum -> div


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _graph(fn, inputs):
    return make_fx(fn, decomposition_table=SOFTMAX)(*inputs)


def _kernels(fn, inputs, passes=("reduction_fusion",)):
    gm, _ = run_pipeline(_graph(fn, inputs), PassSelection.parse(list(passes)))
    return [n.target for n in gm.graph.nodes if isinstance(n.target, RowKernel)]


def _run(fn, inputs, passes):
    lowered = lower_graph(_graph(fn, inputs), inputs, config="trn2", passes=passes)
    run = lowered.run(inputs)
    want = fn(*inputs)
    got = run.outputs if isinstance(want, tuple) else (run.outputs,)
    for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
        ok = compare(g, w, Precision().tolerance(torch.float32))
        assert ok.ok, ok
    return lowered, run


def _opcodes(run) -> list[str]:
    return [r.instruction.OPCODE for r in run.result.trace.instructions]


def softmax(x):
    return torch.softmax(x, -1)


def lse_softmax(x):
    """What the bridge's SDPA decomposition computes for the probabilities."""
    return torch.exp(x - _row_logsumexp(x).unsqueeze(-1))


def rms_norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_the_pass_is_named_and_runs_before_fusion():
    assert PASS_NAMES.index("reduction_fusion") < PASS_NAMES.index("fusion")
    assert _kernels(softmax, [_x(4, 8)], passes=()) == []


def test_softmax_loads_each_row_once():
    """[256, 96] fp32: two row tiles of 128 rows. Fused, each tile is one load, the library
    softmax's four instructions (tensor_reduce -max, activation_reduce exp + row sum,
    reciprocal, tensor_scalar multiply) and one store: 12 instructions, and HBM traffic is x
    read once plus y written once. Unfused, amax, sub, exp, sum and div each round-trip HBM."""
    x = _x(4, 64, 96)
    (kernel,) = _kernels(softmax, [x])
    assert kernel.kind == "softmax" and kernel.node_names == ["amax", "sub", "exp", "sum_1", "div"]
    lowered, on = _run(softmax, [x], ["reduction_fusion"])
    assert _opcodes(on).count("tensor_reduce") == 2
    assert len(_opcodes(on)) == 12
    assert on.result.summary.hbm_bytes == 2 * x.numel() * 4
    origins = {origin_of(r.instruction.tag) for r in on.result.trace.instructions}
    members = ("amax", "sub", "exp", "sum_1", "div")
    assert origins == {Origin("fused[softmax]", "+".join(members), members)}
    assert lowered.pipeline["fusion"] == [
        {"group": ["amax", "sub", "exp", "sum_1", "div"], "fused": True, "row": "softmax"}
    ]
    _, off = _run(softmax, [x], "none")
    assert off.result.summary.hbm_bytes > 4 * on.result.summary.hbm_bytes
    assert on.result.summary.total_ns < off.result.summary.total_ns


def test_softmax_over_a_middle_dim_is_fused_and_exact():
    x = _x(3, 40, 5)
    fn = lambda t: torch.softmax(t, 1)  # noqa: E731
    (kernel,) = _kernels(fn, [x])
    assert kernel.params == {"dim": 1}
    _run(fn, [x], ["reduction_fusion"])


def test_an_intermediate_that_is_an_output_keeps_the_chain():
    def fn(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True), e

    x = _x(16, 32)
    assert _kernels(fn, [x]) == []
    _run(fn, [x], None)


def test_an_intermediate_used_elsewhere_keeps_the_chain():
    def fn(x):
        m = x.amax(-1, keepdim=True)
        e = torch.exp(x - m)
        return e / e.sum(-1, keepdim=True) + m

    x = _x(16, 32)
    assert _kernels(fn, [x]) == []
    _run(fn, [x], None)


def test_sum_over_another_dim_is_not_a_softmax():
    def fn(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-2, keepdim=True)

    x = _x(8, 16, 32)
    assert _kernels(fn, [x]) == []
    _run(fn, [x], None)


def test_lse_softmax_zeroes_fully_masked_rows():
    x = _x(2, 4, 16, 16)
    x[..., 3, :] = float("-inf")  # a fully masked row: lse = 0, probabilities 0
    x[..., 5:, 9:] = float("-inf")
    (kernel,) = _kernels(lse_softmax, [x])
    assert kernel.kind == "lse_softmax" and kernel.node_names[-1] == "exp_1"
    _, on = _run(lse_softmax, [x], ["reduction_fusion"])
    assert on.outputs[0, 0, 3].abs().max() == 0
    _, off = _run(lse_softmax, [x], "none")
    assert on.result.summary.total_ns < off.result.summary.total_ns


def test_lse_softmax_whose_lse_is_also_used_is_left_alone():
    def fn(x):
        lse = _row_logsumexp(x)
        return torch.exp(x - lse.unsqueeze(-1)), lse

    x = _x(4, 16, 16)
    assert _kernels(fn, [x]) == []
    _run(fn, [x], None)


def test_rms_norm_with_and_without_weight():
    x, w = _x(2, 16, 96), _x(96, seed=1)
    (kernel,) = _kernels(rms_norm, [x, w])
    assert kernel.kind == "rms_norm" and kernel.params["eps"] == 1e-6
    assert kernel.node_names == ["pow_1", "mean", "add", "rsqrt", "mul", "mul_1"]
    _, on = _run(rms_norm, [x, w], ["reduction_fusion"])
    # one row tile of 32 rows: loads of x and w, bn_stats, bn_aggr, mean^2 + var, rsqrt, one
    # multiply by 1/rms and w, one store; plus the memset of the eps column
    assert len(_opcodes(on)) == 9
    _, off = _run(rms_norm, [x, w], "none")
    assert on.result.summary.total_ns < off.result.summary.total_ns

    def bare(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)

    (kernel,) = _kernels(bare, [x])
    assert kernel.params == {"eps": 1e-5, "weight": None}
    _run(bare, [x], ["reduction_fusion"])


def test_rms_norm_keeps_a_full_shaped_multiplier_outside():
    """``x_normed * y`` with y as large as x is an elementwise op, not the norm's weight."""

    def fn(x, y):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) * y

    x, y = _x(2, 8, 64), _x(2, 8, 64, seed=2)
    (kernel,) = _kernels(fn, [x, y])
    assert kernel.kind == "rms_norm" and len(kernel.members) == 5
    assert kernel.params["weight"] is None
    _run(fn, [x, y], None)


def test_layer_norm_whose_statistics_are_unused_stores_only_its_rows():
    """[64, 96] with weight and bias, one row tile: with its statistics unused the fused node
    stores only y (two [64, 1] stores fewer); numerics as eager."""
    x, w, b = _x(64, 96), _x(96, seed=1), _x(96, seed=2)

    def fn(x, w, b):
        return torch.nn.functional.layer_norm(x, (96,), w, b, 1e-5)

    (kernel,) = _kernels(fn, [x, w, b])
    assert kernel.kind == "layer_norm" and kernel.params["affine"] == (1, 2)
    _, on = _run(fn, [x, w, b], ["reduction_fusion"])
    _, off = _run(fn, [x, w, b], "none")
    assert off.result.summary.instructions - on.result.summary.instructions == 2
    assert off.result.summary.hbm_bytes - on.result.summary.hbm_bytes == 2 * 64 * 4

    def with_stats(x, w, b):
        return torch.ops.aten.native_layer_norm(x, (96,), w, b, 1e-5)

    assert _kernels(with_stats, [x, w, b]) == []


def test_the_effects_table_measures_the_pass():
    from hwsim.bridge.passes.effects import pass_effects

    x = _x(4, 64, 96)
    rows = pass_effects(_graph(softmax, [x]), [x], PassSelection.only("reduction_fusion"))
    row = next(r for r in rows if r["pass"] == "reduction_fusion")
    assert row["with"]["total_ns"] < row["without"]["total_ns"]
    assert row["with"]["hbm_bytes"] == 2 * x.numel() * 4 < row["without"]["hbm_bytes"]

"""A norm in the prologue of the matmuls it feeds (``passes.norm_prologue``, ``tiling.prologue``):
the normalised rows are transposed once, on chip, into the xᵀ every such matmul reads; rows
nothing else reads never reach HBM; the numbers are those of the ops apart."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.context import TilingOptions
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PASS_NAMES
from hwsim.bridge.passes.norm_prologue import NormPrologue
from hwsim.bridge.precision import Precision
from hwsim.bridge.tiling.prologue import PROLOGUE_SBUF_SHARE
from hwsim.config.loader import load_config
from tests.bridge.test_bridge_mlp_fusion import _hbm_bytes

F32 = 4
linear = torch.nn.functional.linear


def _pre_norm(x, g, b, wq, wk, wv):
    """A pre-norm layer's Q, K and V projections: the norm's rows feed three matmuls only."""
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b)
    return linear(y, wq), linear(y, wk), linear(y, wv)


def _rms_pre_norm(x, w, wq, wk):
    """Llama's RMS norm (as its decomposition traces) feeding two projections."""
    y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    return linear(y, wq), linear(y, wk)


def _post_norm(x, g, b, w, bias):
    """BERT's order: the norm's rows feed a matmul and, later, the residual add."""
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b)
    return linear(y, w, bias) + y


def _inputs(fn, m: int, k: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, m, k, generator=g)

    def rows(n: int) -> list[torch.Tensor]:  # distinct tensors: make_fx traces one per object
        return [torch.randn(k, generator=g) for _ in range(n)]

    def weights(n: int) -> list[torch.Tensor]:
        return [torch.randn(k, k, generator=g) / k**0.5 for _ in range(n)]

    if fn is _pre_norm:
        return [x, *rows(2), *weights(3)]
    if fn is _rms_pre_norm:
        return [x, *rows(1), *weights(2)]
    return [x, *rows(2), *weights(1), *rows(1)]


def _lower(fn, inputs, config="trn1", passes="all", options=None):
    """``fn`` lowered at bf16 auto-cast with every input but x a constant (torch.compile's
    weights under no_grad)."""
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    return lower_graph(
        graph,
        inputs,
        config=config,
        precision=Precision("matmult", "bf16"),
        constants=names[1:],
        passes=passes,
        options=options,
    )


def _count(program, opcode: str) -> int:
    return sum(
        1
        for stream in program.cores[0].streams.values()
        for ins in stream
        if type(ins).__name__ == opcode
    )


def _outputs(run) -> list[torch.Tensor]:
    out = run.outputs
    return list(out) if isinstance(out, (list, tuple)) else [out]


def test_the_pass_is_in_the_pipeline_and_the_per_pass_table():
    assert "norm_prologue" in PASS_NAMES  # bridge.passes.effects measures every name


def test_a_pre_norm_layer_norm_feeds_its_matmuls_on_chip_with_the_same_bits():
    inputs = _inputs(_pre_norm, 256, 256)
    on = _lower(_pre_norm, inputs)
    step = next(s for s in on.pipeline["steps"] if s["pass"] == "norm_prologue")
    assert (step["norm_prologues"], step["rows_not_stored"]) == (1, 1)
    (note,) = [n for n in on.pipeline["fusion"] if n.get("prologue")]
    assert note["fused"] and not note["rows_stored"]
    off = _lower(_pre_norm, inputs, passes={"norm_prologue": False})
    # The same transposes and the same cast to bf16 as the matmuls' loads: the same bits.
    for a, b in zip(_outputs(on.run(inputs)), _outputs(off.run(inputs)), strict=True):
        assert torch.equal(a, b)
    # One transpose of each [128, 128] block of the rows instead of one per matmul.
    blocks = (256 // 128) * (256 // 128)
    assert _count(on.program, "NcTranspose") == blocks
    assert _count(off.program, "NcTranspose") == 3 * blocks


def test_rms_norm_rows_feed_their_matmuls_on_chip_with_the_same_bits():
    inputs = _inputs(_rms_pre_norm, 128, 256, seed=1)
    on = _lower(_rms_pre_norm, inputs)
    (note,) = [n for n in on.pipeline["fusion"] if n.get("prologue")]
    assert note["row"] == "rms_norm" and not note["rows_stored"]
    off = _lower(_rms_pre_norm, inputs, passes={"norm_prologue": False})
    for a, b in zip(_outputs(on.run(inputs)), _outputs(off.run(inputs)), strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(
        _outputs(on.run(inputs)), list(_rms_pre_norm(*inputs)), rtol=3e-2, atol=3e-2
    )


def test_rows_only_matmuls_read_are_never_stored_or_loaded():
    """Residency off, so every byte apart crosses HBM: the norm's output is stored once and
    loaded by each of the three matmuls; in the prologue it never moves."""
    m, k = 256, 256
    inputs = _inputs(_pre_norm, m, k)
    no_residency = {"residency": False}
    on = _hbm_bytes(_lower(_pre_norm, inputs, passes=no_residency).program)
    off = _hbm_bytes(
        _lower(_pre_norm, inputs, passes=no_residency | {"norm_prologue": False}).program
    )
    rows = m * k * F32
    assert off["%getitem"] == rows + 3 * rows  # stored, loaded by q, k and v
    assert "%getitem" not in on
    assert {t: b for t, b in off.items() if t != "%getitem"} == on


def test_rows_a_later_node_reads_are_stored_and_loaded_by_it_alone():
    """BERT's order (residency off): the rows are stored for the residual add, which loads
    them; the matmul reads its xᵀ on chip instead of loading them too."""
    m, k = 256, 256
    inputs = _inputs(_post_norm, m, k)
    no_residency = {"residency": False}
    lowered = _lower(_post_norm, inputs, passes=no_residency)
    (note,) = [n for n in lowered.pipeline["fusion"] if n.get("prologue")]
    assert note["rows_stored"]
    on = _hbm_bytes(lowered.program)
    apart = _lower(_post_norm, inputs, passes=no_residency | {"norm_prologue": False})
    off = _hbm_bytes(apart.program)
    rows = m * k * F32
    assert off["%getitem"] == rows + 2 * rows  # stored, loaded by the matmul and the add
    assert on["%getitem"] == rows + rows  # stored, loaded by the add
    assert torch.equal(lowered.run(inputs).outputs, apart.run(inputs).outputs)


def test_an_xT_past_its_share_of_sbuf_lowers_the_program_the_pass_off_does():
    """A 96 KiB SBUF and 2048 rows of 1024 (xᵀ: 32 KiB a partition in bf16) is past the
    prologue's share: the norm lowers alone (its RowKernel), the same program as no pass."""
    from tests.unit.fingerprint_programs import fingerprint

    config = load_config("trn1", {"sbuf.bytes_per_partition": 98304})
    inputs = _inputs(_post_norm, 2048, 1024)
    on = _lower(_post_norm, inputs, config)
    (note,) = [n for n in on.pipeline["fusion"] if "PROLOGUE_SBUF_SHARE" in n.get("why", "")]
    assert not note["fused"]
    off = _lower(_post_norm, inputs, config, passes={"norm_prologue": False})
    assert fingerprint(on.program) == fingerprint(off.program)
    assert PROLOGUE_SBUF_SHARE == 1 / 4  # the share the sizes above were chosen against


def test_the_prologue_node_interprets_as_the_graph():
    from hwsim.bridge.passes import PassSelection, run_pipeline

    inputs = _inputs(_post_norm, 128, 128)
    graph = make_fx(_post_norm)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    gm, _ = run_pipeline(graph, PassSelection.all(), constants=names[1:])
    kernels = [n.target for n in gm.graph.nodes if isinstance(n.target, NormPrologue)]
    assert len(kernels) == 1 and kernels[0].store_rows
    torch.testing.assert_close(gm(*inputs), _post_norm(*inputs))


def test_at_lnc2_the_norm_lowers_alone_and_every_core_reads_only_what_it_wrote():
    """The matmuls that read xᵀ split their rows between the cores of a logical core, and xᵀ
    would be in one core's SBUF: the norm lowers alone (its rows through HBM or residency), the
    initcheck finds no read of unwritten SBUF, and the values are LNC=1's."""
    inputs = _inputs(_pre_norm, 256, 256)
    pair = _lower(_pre_norm, inputs, "trn2", options=TilingOptions(lnc=2, lnc_min_split_bytes=0))
    notes = pair.pipeline["fusion"]
    assert not [n for n in notes if n.get("prologue")]
    assert any("LNC" in n.get("why", "") for n in notes if not n["fused"])
    assert pair.pipeline["lnc"]["split"]  # the projections do split
    one = _lower(_pre_norm, inputs, "trn2", options=TilingOptions(lnc=1))
    got = pair.run(inputs, race_check=True, initcheck=True)
    for a, b in zip(_outputs(got), _outputs(one.run(inputs)), strict=True):
        assert torch.equal(a, b)

"""The MLP as one kernel (``passes.mlp_fusion``, ``tiling.mlp``): the hidden activation never
reaches HBM when it fits SBUF, the weights stream once per row group when it does not, and the
numbers are the two matmuls' apart."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes.mlp_fusion import MlpKernel
from hwsim.bridge.precision import Precision
from hwsim.bridge.tiling.mlp import INTERMEDIATE_SBUF_SHARE
from hwsim.config.loader import load_config
from hwsim.isa.dma_ops import DmaCopy

F32, BF16 = 4, 2


def _mlp(x, w1, b1, w2, b2, r):
    h = torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1))
    return torch.nn.functional.linear(h, w2, b2) + r


def _lower(m: int, k: int, f: int, config, passes="all"):
    g = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(m, k, generator=g),
        torch.randn(f, k, generator=g) / k**0.5,
        torch.randn(f, generator=g),
        torch.randn(k, f, generator=g) / f**0.5,
        torch.randn(k, generator=g),
        torch.randn(m, k, generator=g),
    ]
    return _lower_with_constants(_mlp, inputs, 4, config, passes)  # weights and biases


def _lower_with_constants(fn, inputs, constants: int, config, passes):
    """``fn`` traced and lowered with its inputs 1 to ``constants`` as the graph's constants (the
    weights, as torch.compile under no_grad gives), at bf16 auto-cast; (lowered, inputs)."""
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    lowered = lower_graph(
        graph,
        inputs,
        config=config,
        precision=Precision("matmult", "bf16"),
        constants=names[1 : 1 + constants],
        passes=passes,
    )
    return lowered, inputs


def _hbm_bytes(program) -> dict[str, int]:
    """Bytes each HBM tensor's DMAs moved (read or written)."""
    moved: dict[str, int] = {}
    for stream in program.cores[0].streams.values():
        for ins in stream:
            if isinstance(ins, DmaCopy):
                for ap in (ins.src, ins.dst):
                    if ap.memory.name == "HBM":
                        moved[ap.tensor] = moved.get(ap.tensor, 0) + ap.nbytes
    return moved


def _by_role(moved: dict[str, int]) -> dict[str, int]:
    roles = {"x_1": "x", "r_1": "r", "w1_1__prepared_t": "w1", "w2_1__prepared_t": "w2"}
    named = {roles.get(t, t): b for t, b in moved.items() if not t.startswith(("b1", "b2"))}
    return named


#: 96 KiB of SBUF per partition: small shapes meet the limits BERT at batch 16 meets on trn1.
SMALL_SBUF = {"sbuf.bytes_per_partition": 98304}
#: 84 KiB for the gated MLPs below: they have no bias, so no row pool is reserved beside the
#: weight ring (``residency.broadcast.row_pool_bytes``); this leaves their tilers about the SBUF
#: 96 KiB leaves an MLP with a 2048-wide bias.
GATED_SBUF = {"sbuf.bytes_per_partition": 86016}


def test_the_mlp_is_one_node_and_computes_what_the_two_matmuls_do():
    config = load_config("trn1", SMALL_SBUF)
    lowered, inputs = _lower(512, 128, 2048, config)
    mlp = next(s for s in lowered.pipeline["steps"] if s["pass"] == "mlp")
    assert mlp["mlps"] == 1
    assert [n.get("mlp_row_groups") for n in lowered.pipeline["fusion"]] == [1]
    apart, _ = _lower(512, 128, 2048, config, passes={"mlp": False})
    fused = lowered.run(inputs).outputs
    # The same casts in the same places (h rounded to bf16 once, on chip instead of by the
    # load's DMA): the same bits.
    assert torch.equal(fused, apart.run(inputs).outputs)
    torch.testing.assert_close(fused, _mlp(*inputs), rtol=3e-2, atol=3e-2)


def test_when_the_hidden_fits_only_weights_inputs_and_the_output_cross_hbm():
    """hᵀ of 512 rows (16 KiB a partition) is past the down-projection's stationary share, so
    apart it would be read again per block of W2; in the kernel it never leaves SBUF."""
    m, k, f = 512, 128, 2048
    lowered, _ = _lower(m, k, f, load_config("trn1", SMALL_SBUF))
    moved = _by_role(_hbm_bytes(lowered.program))
    (out,) = [t for t in moved if t not in ("x", "r", "w1", "w2")]
    assert moved == {
        "x": m * k * F32,
        "r": m * k * F32,
        "w1": k * f * BF16,  # prepared in bf16, streamed once
        "w2": f * k * BF16,
        out: m * k * F32,  # the only value written: h never is
    }


def test_when_the_hidden_does_not_fit_the_rows_go_in_groups_and_the_weights_stream_per_group():
    """SBUF of 96 KiB per partition: what the kernel's working tiles leave holds xᵀ and hᵀ of
    fewer than 8 row blocks of 128 (each 17 x 256 bytes), so 1024 rows take two groups, each
    streaming both weights."""
    m, k, f = 1024, 128, 2048
    lowered, _ = _lower(m, k, f, load_config("trn1", SMALL_SBUF))
    per_row_block = (k // 128 + f // 128) * 128 * BF16
    assert per_row_block == 4352
    notes = [n for n in lowered.pipeline["fusion"] if "mlp_row_groups" in n]
    assert [n["mlp_row_groups"] for n in notes] == [2]
    moved = _by_role(_hbm_bytes(lowered.program))
    (out,) = [t for t in moved if t not in ("x", "r", "w1", "w2")]
    assert moved == {
        "x": m * k * F32,
        "r": m * k * F32,
        "w1": 2 * k * f * BF16,  # once per group: the DMA the fit costs
        "w2": 2 * f * k * BF16,
        out: m * k * F32,
    }
    assert INTERMEDIATE_SBUF_SHARE == 1 / 2  # the share the figures above were worked with
    assert not lowered.pipeline["residency"]["backed_off"]  # the kernel never overflowed SBUF


def test_at_lnc2_each_core_takes_its_row_groups_and_streams_both_weights_for_them():
    """Two row groups on a pair of cores: one each (no write outside them, no race), each core
    streaming both weights once for its group, with the values of one core."""
    from hwsim.bridge.context import TilingOptions

    m, k, f = 1024, 128, 2048
    config = load_config("trn2", SMALL_SBUF)
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(m, k, generator=g), torch.randn(f, k, generator=g) / k**0.5]
    inputs += [torch.randn(f, generator=g), torch.randn(k, f, generator=g) / f**0.5]
    inputs += [torch.randn(k, generator=g), torch.randn(m, k, generator=g)]
    graph = make_fx(_mlp)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]

    def lowered(lnc):
        return lower_graph(graph, inputs, config=config, precision=Precision("matmult", "bf16"),
                           constants=names[1:5], options=TilingOptions(lnc=lnc))  # fmt: skip

    pair, one = lowered(2), lowered(1)
    assert [n.get("mlp_row_groups") for n in pair.pipeline["fusion"] if "mlp_row_groups" in n] == [
        2
    ]
    assert any(name.startswith("fused_mlp") for name in pair.pipeline["lnc"]["split"])
    assert not pair.pipeline["lnc"]["unsplit_after_escape"]
    for core in (0, 1):
        streams = pair.program.cores[core].streams.values()
        weights = [ap for s in streams for i in s if isinstance(i, DmaCopy) for ap in (i.src,)
                   if ap.memory.name == "HBM" and ap.tensor.endswith("__prepared_t")]  # fmt: skip
        assert sum(ap.nbytes for ap in weights) == 2 * k * f * BF16  # W1 and W2, once each
    two = pair.run(inputs, race_check=True, initcheck=True).outputs
    assert torch.equal(two, one.run(inputs).outputs)


def test_a_row_block_that_cannot_fit_lowers_the_two_matmuls_apart_and_says_why():
    config = load_config("trn1", SMALL_SBUF)
    lowered, inputs = _lower(128, 128, 16384, config)  # hᵀ alone: 128 x 256 bytes a partition
    (note,) = [n for n in lowered.pipeline["fusion"] if {"gelu", "addmm_1"} <= set(n["group"])]
    assert not note["fused"] and "INTERMEDIATE_SBUF_SHARE" in note["why"]
    moved = _hbm_bytes(lowered.program)
    assert moved["%addmm"] >= 2 * 128 * 16384 * F32  # h (named after its matmul): out and back
    torch.testing.assert_close(lowered.run(inputs).outputs, _mlp(*inputs), rtol=3e-2, atol=3e-2)


def test_a_hidden_the_down_projection_keeps_on_chip_anyway_stays_two_matmuls():
    """Batch 1's case: hᵀ of 128 rows fits the down-projection's stationary share, so apart it
    is read once (and residency keeps it on chip); the plain matmuls' wider tiles are kept."""
    lowered, _ = _lower(128, 128, 512, "trn1")
    (note,) = [n for n in lowered.pipeline["fusion"] if {"gelu", "addmm_1"} <= set(n["group"])]
    assert not note["fused"] and "stationary share" in note["why"]


@pytest.mark.parametrize("reshape", [False, True])
def test_the_kernel_interprets_as_the_graph(reshape):
    """The joined node's members compute what the two groups did (graph interpretation)."""
    from hwsim.bridge.passes import PassSelection, run_pipeline

    def fn(x, w1, w2):
        h = torch.relu(x @ w1.t()).view(2, 8, 32) if reshape else torch.relu(x @ w1.t())
        return (h.reshape(16, 32) @ w2.t()) * 2.0 if reshape else (h @ w2.t()) * 2.0

    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(16, 8, generator=g), torch.randn(32, 8, generator=g)]
    inputs.append(torch.randn(8, 32, generator=g))
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    gm, _ = run_pipeline(graph, PassSelection.all(), constants=names[1:])
    kernels = [n.target for n in gm.graph.nodes if isinstance(n.target, MlpKernel)]
    assert len(kernels) == 1
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


def _gated(x, wg, wu, wd, r):
    """Llama's MLP: down(silu(x @ Wg) * (x @ Wu)) and the residual."""
    linear = torch.nn.functional.linear
    return linear(torch.nn.functional.silu(linear(x, wg)) * linear(x, wu), wd) + r


def _lower_gated(m: int, k: int, f: int, config, passes="all"):
    g = torch.Generator().manual_seed(2)
    inputs = [
        torch.randn(m, k, generator=g),
        torch.randn(f, k, generator=g) / k**0.5,
        torch.randn(f, k, generator=g) / k**0.5,
        torch.randn(k, f, generator=g) / f**0.5,
        torch.randn(m, k, generator=g),
    ]
    return _lower_with_constants(_gated, inputs, 3, config, passes)  # the three weights


def test_a_gated_mlp_is_one_kernel_with_both_up_products_and_computes_what_apart_does():
    config = load_config("trn1", GATED_SBUF)
    lowered, inputs = _lower_gated(512, 128, 2048, config)
    mlp = next(s for s in lowered.pipeline["steps"] if s["pass"] == "mlp")
    assert (mlp["mlps"], mlp["gated"]) == (1, 1)
    (note,) = lowered.pipeline["fusion"]
    assert note["fused"] and note["gated"] and note["mlp_row_groups"] == 2
    apart, _ = _lower_gated(512, 128, 2048, config, passes={"mlp": False})
    fused = lowered.run(inputs).outputs
    # Both products leave PSUM in fp32, SiLU and the product in fp32, h rounded to bf16 once:
    # the same bits as the three matmuls apart.
    assert torch.equal(fused, apart.run(inputs).outputs)
    torch.testing.assert_close(fused, _gated(*inputs), rtol=3e-2, atol=3e-2)


def test_in_a_gated_mlp_neither_up_product_nor_h_crosses_hbm():
    """Two row groups (as above): each streams all three weights once; x, the residual and the
    output cross HBM once, and nothing else does."""
    m, k, f = 512, 128, 2048
    lowered, _ = _lower_gated(m, k, f, load_config("trn1", GATED_SBUF))
    roles = {"x_1": "x", "r_1": "r", "wg_1__prepared_t": "wg", "wu_1__prepared_t": "wu"}
    roles["wd_1__prepared_t"] = "wd"
    moved = {roles.get(t, t): b for t, b in _hbm_bytes(lowered.program).items()}
    (out,) = [t for t in moved if t not in ("x", "r", "wg", "wu", "wd")]
    assert moved == {
        "x": m * k * F32,
        "r": m * k * F32,
        "wg": 2 * k * f * BF16,
        "wu": 2 * k * f * BF16,
        "wd": 2 * f * k * BF16,
        out: m * k * F32,
    }


def test_a_gated_mlp_that_stays_apart_lowers_the_program_the_pass_off_does():
    """Batch 1's case (hᵀ fits the down-projection's stationary share): the kernel falls back,
    lowering the second product first, as the graph had it: the same program as no pass."""
    from tests.unit.fingerprint_programs import fingerprint

    on, inputs = _lower_gated(128, 128, 512, "trn1")
    off, _ = _lower_gated(128, 128, 512, "trn1", passes={"mlp": False})
    assert not on.pipeline["fusion"][0]["fused"]
    assert fingerprint(on.program) == fingerprint(off.program)
    assert torch.equal(on.run(inputs).outputs, off.run(inputs).outputs)


def test_a_gated_mlp_over_3d_activations_fuses_and_interprets_as_the_graph():
    """As a Llama layer traces it: [batch, seq, hidden] activations, each product viewed back
    to 3-D before the SiLU and the product; the joined node computes what the graph did."""
    from hwsim.bridge.passes import PassSelection, run_pipeline

    def fn(x, wg, wu, wd):
        return _gated(x, wg, wu, wd, x)

    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(4, 128, 128, generator=g)]
    inputs += [torch.randn(2048, 128, generator=g) / 128**0.5 for _ in range(2)]
    inputs.append(torch.randn(128, 2048, generator=g) / 2048**0.5)
    graph = make_fx(fn)(*inputs)
    names = [n.name for n in graph.graph.nodes if n.op == "placeholder"]
    gm, _ = run_pipeline(graph, PassSelection.all(), constants=names[1:])
    kernels = [n.target for n in gm.graph.nodes if isinstance(n.target, MlpKernel)]
    assert len(kernels) == 1 and kernels[0].product_view == (4, 128, 2048)
    torch.testing.assert_close(gm(*inputs), fn(*inputs))
    config = load_config("trn1", GATED_SBUF)
    lowered = lower_graph(
        graph, inputs, config=config, precision=Precision("matmult", "bf16"), constants=names[1:]
    )
    assert [n.get("gated") for n in lowered.pipeline["fusion"]] == [True]
    apart = lower_graph(
        graph,
        inputs,
        config=config,
        precision=Precision("matmult", "bf16"),
        constants=names[1:],
        passes={"mlp": False},
    )
    assert torch.equal(lowered.run(inputs).outputs, apart.run(inputs).outputs)

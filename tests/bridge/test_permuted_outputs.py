"""A graph output that is a permuted view of a whole tensor (the transposed weight a training
forward saves for backward) leaves as its storage, viewed on the host with torch's strides: no
transposing copy, which wrote one 4-byte descriptor per element (27 µs of a 72 µs MLP forward).
An input so viewed is copied as it lies, in whole rows."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.isa.dma_ops import DmaCopy


def _fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (x @ w).t(), w.t()


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(32, 64, generator=g), torch.randn(64, 256, generator=g)]


def test_values_and_strides_equal_torchs() -> None:
    inputs = _inputs()
    lowered = lower_graph(make_fx(_fn)(*inputs), inputs, config="trn2")
    got = lowered.run(inputs).outputs
    want = _fn(*inputs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)  # the matmul runs in bf16


def test_no_transposing_copy_is_emitted() -> None:
    inputs = _inputs()
    lowered = lower_graph(make_fx(_fn)(*inputs), inputs, config="trn2")
    copies = [
        ins
        for core in lowered.program.cores
        for _engine, _pc, ins in core.instructions()
        if isinstance(ins, DmaCopy) and "output" in (ins.tag or "")
    ]
    assert len(copies) == 1  # the input's storage, copied as it lies; the product needs none
    (copy,) = copies
    assert copy.src.free_strides[-1] == 1 and copy.dst.free_strides[-1] == 1

"""An fp32 output computed through a ``torch.autocast`` region is judged at the tolerance of the
least precise dtype on its path (bf16), not at fp32's: eager autocast itself lands ~1e-3 from
fp32, and a simulator that rounds the bf16 matmul at another point than the CPU must not be
flagged for it. Outputs with no low-precision ancestor keep fp32's tolerance."""

from __future__ import annotations

import torch
from torch import fx

from hwsim.bridge.eager_check import _output_path_dtypes


class _AutocastThenNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(64, 128)
        self.norm = torch.nn.LayerNorm(128)
        self.side = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.up(x)
        return self.norm(h.float()), self.side(x)


def test_path_dtypes_follow_the_graph() -> None:
    graphs: list[fx.GraphModule] = []

    def keep(gm: fx.GraphModule, _: object) -> fx.GraphModule:
        graphs.append(gm)
        return gm

    torch.compile(_AutocastThenNorm(), backend=keep)(torch.randn(4, 64))
    assert _output_path_dtypes(graphs[0]) == [torch.bfloat16, torch.float32]


def test_autocast_output_is_judged_at_bf16() -> None:
    from hwsim import bridge

    options = {"config": "trn2", "fallback": "error", "auto_cast": "none"}
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.compile(_AutocastThenNorm(), backend="hwsim", options=options)(x)
    report = bridge.last_report()
    judged = [(o.name.rsplit(".", 1)[-1], o.dtype, o.computed_in) for o in report.eager_outputs]
    assert judged == [("out0", "torch.float32", "bf16"), ("out1", "torch.float32", "fp32")]
    assert report.numerics_ok

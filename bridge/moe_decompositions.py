"""Decompositions of ``transformers``' mixture-of-experts custom ops into Core ATen, so Mixtral's
experts run on the simulator (``bridge.decompositions`` adds them when ``transformers`` has
registered the ops; importing this module imports nothing of ``transformers``).

``transformers::grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E])``: rows
offs[e-1] <= s < offs[e] of the expert-sorted input are multiplied by expert e's weight (rows
past offs[E-1] are zero). Its CPU kernel loops over experts reading ``offs`` on the host (a
value-dependent loop a static program cannot have). Here every expert multiplies every row
(one bmm [E, S, K] x [E, K, N] on TensorE) and a device-built [E, S] mask keeps each row's
own expert: E times the multiply-adds of the grouped product, but each expert's weights are
read once. That is the dense "all experts" strategy small token counts use on Trainium; its
cost is what the simulator reports (it does not pretend to be a grouped kernel).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def grouped_mm_dense(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    rows, experts = input.shape[0], weight.shape[0]
    ends = offs.to(torch.int64)
    starts = torch.cat([torch.zeros_like(ends[:1]), ends[:-1]])
    s = torch.arange(rows, device=input.device).unsqueeze(0)  # [1, S]
    mine = (s >= starts.unsqueeze(1)) & (s < ends.unsqueeze(1))  # [E, S]
    every = torch.bmm(input.unsqueeze(0).expand(experts, *input.shape), weight)  # [E, S, N]
    kept = torch.where(mine.unsqueeze(-1), every, torch.zeros((), dtype=every.dtype))
    return kept.sum(0)


def moe_decompositions() -> dict[Any, Any]:
    """The entries for the ops ``transformers`` has registered in this process."""
    table: dict[Any, Any] = {}
    namespace = torch.ops.transformers
    with contextlib.suppress(AttributeError, RuntimeError):  # transformers' MoE not imported
        table[namespace.grouped_mm_fallback.default] = grouped_mm_dense
    return table

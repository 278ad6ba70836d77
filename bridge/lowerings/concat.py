"""Joining and splitting along a dim: ``cat`` / ``stack`` copy, ``split`` / ``split_with_sizes``
view.

``cat`` is one HBM -> HBM DMA per tile of each input into its slice of the output (the DMA
casts when torch promoted an input's dtype). Splits are views: each piece is a slice of the
input, read through its strides by whatever consumes it (Llama's rotate_half, GPT-2's fused
q/k/v projection).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.registry import register_lowering
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue

aten = torch.ops.aten


@register_lowering(aten.cat.default, family="concat", dtypes=MOVABLE_DTYPES)
def cat(ctx: LoweringContext, tensors: Sequence[HbmValue], dim: int = 0) -> HbmValue:
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    dim = dim % len(meta.shape)
    start = 0
    for t in tensors:
        if t.numel == 0:  # torch skips empty (legacy 1-D) inputs
            continue
        size = t.shape[dim]
        copy_tiles(ctx, out.slice(dim, start, start + size), t)
        start += size
    return out


@register_lowering(aten.stack.default, family="concat", dtypes=MOVABLE_DTYPES)
def stack(ctx: LoweringContext, tensors: Sequence[HbmValue], dim: int = 0) -> HbmValue:
    """cat of the inputs unsqueezed at ``dim`` (eager mode sees stack; core ATen decomposes it):
    one HBM -> HBM DMA per tile of each input into ``out.select(dim, i)``."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    dim = dim % len(meta.shape)
    for i, t in enumerate(tensors):
        copy_tiles(ctx, out.select(dim, i), t)
    return out


@register_lowering(aten.split_with_sizes.default, family="concat", dtypes=MOVABLE_DTYPES)
def split_with_sizes(
    ctx: LoweringContext, x: HbmValue, split_sizes: Sequence[int], dim: int = 0
) -> tuple[HbmValue, ...]:
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(x.slice(dim, start, start + size))
        start += size
    return tuple(pieces)


@register_lowering(aten.split.Tensor, family="concat", dtypes=MOVABLE_DTYPES)
def split(ctx: LoweringContext, x: HbmValue, split_size: int, dim: int = 0):
    n = x.shape[dim % max(1, x.ndim)]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] or [0]
    return split_with_sizes(ctx, x, sizes, dim)

"""Joining, tiling and splitting along dims: ``cat`` / ``stack`` / ``repeat`` copy, ``split`` /
``split_with_sizes`` view.

``cat`` is one HBM -> HBM DMA per tile of each input into its slice of the output (the DMA
casts when torch promoted an input's dtype); empty inputs (Phi-3's ``q[..., rot:]`` when the
rotary part is the whole head) are skipped. ``repeat`` is one HBM -> HBM DMA per tile too: the
output viewed with each dim split into (copy, element) reads the input with stride 0 over the
copies, so every copy moves in the same descriptors (BLOOM's ALiBi slopes, Whisper and
DeBERTa's position tables). Its backward is a sum over the copies (``sum.dim_IntList`` of the
gradient viewed the same way, from torch's own formula). Splits are views: each piece is a
slice of the input, read through its strides by whatever consumes it (Llama's rotate_half,
GPT-2's fused q/k/v projection).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.registry import register_lowering
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue, contiguous_strides

aten = torch.ops.aten


@register_lowering(aten.cat.default, family="concat", dtypes=MOVABLE_DTYPES, empty_ok=True)
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


@register_lowering(aten.repeat.default, family="concat", dtypes=MOVABLE_DTYPES)
def repeat(ctx: LoweringContext, x: HbmValue, repeats: Sequence[int]) -> HbmValue:
    """x tiled ``repeats`` times along each dim (new leading dims for extra repeats): the output
    viewed as [(r0, n0), (r1, n1), ...] (dim d of size r*n split into copy and element) takes
    x broadcast over the copies, one strided DMA per tile."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    lead = len(repeats) - x.ndim
    sizes = (1,) * lead + x.shape
    strides = (0,) * lead + x.strides
    out_strides = contiguous_strides(meta.shape)
    shape: list[int] = []
    dst_strides: list[int] = []
    src_strides: list[int] = []
    for r, n, src_stride, dst_stride in zip(repeats, sizes, strides, out_strides, strict=True):
        shape += [r, n]
        dst_strides += [n * dst_stride, dst_stride]
        src_strides += [0, src_stride]
    copy_tiles(
        ctx,
        HbmValue(out.tile, tuple(shape), tuple(dst_strides), out.offset),
        HbmValue(x.tile, tuple(shape), tuple(src_strides), x.offset),
    )
    return out

"""Constant padding (``constant_pad_nd``: F.pad mode='constant', padded convs in eager mode).

``pad`` lists (before, after) pairs from the last dim backwards, as torch's; a negative amount
crops. The output is written exactly once: the input's kept part (the input sliced by the crops)
is one HBM -> HBM DMA per tile into the output's interior view (``copy_tiles``), and the border
around it is ``2 * rank`` slabs at most (per dim d: the padded ranges of d, over the interior of
the dims before d and all of the dims after it), each filled from one memset constant tile
(``creation.fill_views``). No SBUF compute: the cost is the DMAs, the border's bytes plus the
kept input's bytes. A pad that crops everything but leaves a non-empty output is all fill.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.lowerings.creation import fill_scalar, fill_views
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue

aten = torch.ops.aten


def _pad_check(call: OpCall) -> None:
    pad = call.args[1] if len(call.args) > 1 else call.kwargs.get("pad", ())
    if len(pad) % 2 or len(pad) // 2 > call.args[0].dim():
        raise Unsupported(
            call.op, Reason.SHAPE, f"pad {list(pad)} for a {call.args[0].dim()}-d input"
        )
    fill_scalar(call, call.args[2] if len(call.args) > 2 else call.kwargs.get("value", 0))


def _ranges(shape: Sequence[int], pad: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per dim: (first kept input index, kept count, output index it lands at)."""
    ranges = []
    for d, n in enumerate(shape):
        k = len(shape) - 1 - d  # pad pairs run from the last dim backwards
        before, after = (pad[2 * k], pad[2 * k + 1]) if 2 * k < len(pad) else (0, 0)
        first = max(0, -before)
        count = max(0, n - first - max(0, -after))
        ranges.append((first, count, max(0, before)))
    return ranges


@register_lowering(
    aten.constant_pad_nd.default, family="pad", dtypes=MOVABLE_DTYPES, check=_pad_check
)
def constant_pad_nd(
    ctx: LoweringContext, x: HbmValue, pad: Sequence[int], value: Any = 0
) -> HbmValue:
    """out = x cropped by the negative pads, surrounded by ``value`` (module docstring)."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    ranges = _ranges(x.shape, [int(p) for p in pad])
    kept, interior = x, out
    for d, (first, count, at) in enumerate(ranges):
        kept = kept.slice(d, first, first + count)
        interior = interior.slice(d, at, at + count)
    if kept.numel == 0:  # everything was cropped: the output is all border
        fill_views(ctx, [out], fill_scalar(ctx.call, value))
        return out
    border = []
    for d, (_, count, at) in enumerate(ranges):
        around = out
        for inner in range(d):  # dims before d: only their interior (slabs do not overlap)
            _, c, a = ranges[inner]
            around = around.slice(inner, a, a + c)
        border += [around.slice(d, 0, at), around.slice(d, at + count, meta.shape[d])]
    fill_views(ctx, [b for b in border if b.numel], fill_scalar(ctx.call, value))
    copy_tiles(ctx, interior, kept)
    return out

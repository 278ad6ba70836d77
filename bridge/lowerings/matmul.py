"""Matmul lowerings: mm, addmm (nn.Linear after AOTAutograd: ``addmm(bias, x, permute(W))``), bmm.

The tiling (K in PSUM, transposed loads for K-contiguous operands, bias and alpha/beta fused into
the PSUM evacuation) is ``bridge.tiling.matmul``. TensorE multiplies fp32, bf16 and fp16 here
(fp8 would come from a precision option); both operands are cast to one compute dtype on load.
"""

from __future__ import annotations

import torch

from hwsim.bridge.context import LoweringContext, TensorMeta
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import emit_matmul
from hwsim.bridge.values import HbmValue

aten = torch.ops.aten


def _ranks(rank: int, *positions: int):
    def check(call: OpCall) -> None:
        for i in positions:
            shape = tuple(call.args[i].shape)
            if len(shape) != rank:
                raise Unsupported(
                    call.op, Reason.SHAPE, f"argument {i} has shape {shape}; expected {rank}-D"
                )

    return check


@register_lowering(aten.mm.default, check=_ranks(2, 0, 1))
@register_lowering(aten.bmm.default, check=_ranks(3, 0, 1))
def mm(ctx: LoweringContext, a: HbmValue, b: HbmValue) -> HbmValue:
    """out[M, N] = a[M, K] @ b[K, N]; bmm: out[B, M, N] = a[B, M, K] @ b[B, K, N], one 2-D
    product per batch."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    emit_matmul(ctx, a, b, out)
    return out


@register_lowering(aten.addmm.default, check=_ranks(2, 1, 2))
def addmm(
    ctx: LoweringContext,
    bias: HbmValue,
    a: HbmValue,
    b: HbmValue,
    *,
    beta: float = 1,
    alpha: float = 1,
) -> HbmValue:
    """out = beta * bias + alpha * (a @ b); bias broadcasts to [M, N] ([N] for nn.Linear)."""
    meta: TensorMeta = ctx.out
    out = ctx.new_value(meta.shape, meta.dtype)
    scaled_bias = bias.expand(meta.shape) if beta != 0 else None  # beta=0 ignores bias (torch)
    emit_matmul(ctx, a, b, out, bias=scaled_bias, alpha=float(alpha), beta=float(beta))
    return out

"""Fused attention as eager mode sees it: ``_scaled_dot_product_flash_attention_for_cpu``.

Under ``torch.compile`` the core-ATen decompositions already split ``scaled_dot_product_attention``
into bmm / softmax / where, lowered op by op. Eager offload (``HwsimMode``) receives the fused CPU
kernel instead, which returns the output and the row log-sum-exp; this lowers it as the same
three steps, with the scores materialised in HBM (not the library's online-softmax kernel, which
takes no mask and gives no log-sum-exp):

1. scores[B, H, L, S] = scale * q k^T in fp32 (``emit_matmul``, one product per batch and head);
2. per row (queries on partitions, the S keys whole on the free axis): add the mask (the CPU
   kernel takes it in the query's dtype: SDPA has turned a bool mask into 0 / -inf already) and
   the causal bias (0 on and below the diagonal, -inf above: built once by GpSimdE
   ``affine_select``), then softmax as ``_softmax`` does, plus logsumexp = max + log(sum);
3. out = probs v (probs in the query dtype, as the CPU kernel multiplies).

Grouped-query attention (fewer key/value heads, ``enable_gqa``) reads each key/value head for
its group of query heads through a broadcast view; nothing is repeated in memory.

Dropout is not lowered (``dropout_p`` must be 0: inference).
"""

from __future__ import annotations

import math

import torch

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import FLOAT_DTYPES, HW_FP32
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.registry import OpCall, register_lowering
from hwsim.bridge.tiling import HbmMatrix, TilingError, emit_matmul, plan
from hwsim.bridge.values import HbmValue
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, chunks

aten = torch.ops.aten
NEG_INF = float("-inf")


def _check(call: OpCall) -> None:
    q, k, v = call.args[:3]
    if any(t.dtype not in FLOAT_DTYPES for t in (q, k, v)) or q.ndim != 4:
        raise Unsupported(call.op, Reason.DTYPE, "query, key, value must be 4-D float tensors")
    dropout = call.args[3] if len(call.args) > 3 else call.kwargs.get("dropout_p", 0.0)
    if dropout:
        raise Unsupported(call.op, Reason.SHAPE, f"dropout_p={dropout} (inference only)")


@register_lowering(
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    family="attention",
    check=_check,
)
def sdpa_flash_cpu(
    ctx: LoweringContext,
    q: HbmValue,
    k: HbmValue,
    v: HbmValue,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: HbmValue | None = None,
    scale: float | None = None,
) -> tuple[HbmValue, HbmValue]:
    out_meta, lse_meta = ctx.out
    batch, heads, queries, _ = q.shape
    keys, kv_heads = k.shape[2], k.shape[1]
    shape = (batch, heads, queries, keys)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = ctx.new_value(shape, HW_FP32)
    emit_matmul(ctx, *_grouped(q, k.transpose(-2, -1), scores, kv_heads), alpha=factor)
    extras = []
    if attn_mask is not None:
        extras.append(attn_mask.expand(shape))
    if is_causal:
        extras.append(_causal_bias(ctx, queries, keys).expand(shape))
    probs = ctx.new_value(shape, q.dtype)
    lse = ctx.new_value(lse_meta.shape, lse_meta.dtype)
    _softmax_rows(ctx, scores, extras, probs, lse)
    out = ctx.new_value(out_meta.shape, out_meta.dtype)
    emit_matmul(ctx, *_grouped(probs, v, out, kv_heads))
    return out, lse


def _grouped(
    a: HbmValue, b: HbmValue, out: HbmValue, kv_heads: int
) -> tuple[HbmValue, HbmValue, HbmValue]:
    """a [B, H, M, K] @ b [B, Hkv, K, N] with grouped-query heads (query head h reads key/value
    head h // (H / Hkv)) as 5-D views [B, Hkv, H / Hkv, ...]; b is broadcast, not copied."""
    batch, heads = a.shape[:2]
    if kv_heads == heads:
        return a, b, out
    group = heads // kv_heads
    a5, out5 = (
        a.view((batch, kv_heads, group, *a.shape[2:])),
        out.view((batch, kv_heads, group, *out.shape[2:])),
    )
    assert a5 is not None and out5 is not None  # splitting a dim is always a view
    b5 = b.unsqueeze(2).expand((batch, kv_heads, group, *b.shape[2:]))
    return a5, b5, out5


def _causal_bias(ctx: LoweringContext, queries: int, keys: int) -> HbmValue:
    """bias[l, s] = 0 where s <= l, else -inf (torch's top-left causal alignment)."""
    bias = ctx.new_value((queries, keys), HW_FP32)
    zeros = lang.ndarray((min(queries, ctx.pmax), keys), HW_FP32, lang.sbuf)
    nisa.memset(zeros, 0.0)
    rows = BufferRing(2)
    for l0, lt in chunks(queries, ctx.pmax):
        tile = rows((lt, keys), HW_FP32, lang.sbuf)
        nisa.affine_select(
            tile, zeros[:lt, :], NEG_INF, AluOp.is_ge, offset=l0, channel_multiplier=1, steps=(-1,)
        )
        ctx.queues.store(HbmMatrix(bias).block(l0, lt, 0, keys), tile)
    return bias


def _softmax_rows(
    ctx: LoweringContext,
    scores: HbmValue,
    extras: list[HbmValue],
    probs: HbmValue,
    lse: HbmValue,
) -> None:
    """probs = softmax(scores (+ masks)) over the last dim, lse = its log-sum-exp."""
    shape = scores.shape
    lse_rows = HbmValue.contiguous(lse.tile, (*shape[:-1], 1)).expand(shape)
    operands = [probs, lse_rows, scores, *extras]
    per_element = 4 * ctx.options.buffers * (3 + len(extras))  # x, extras, exp, result
    budget = max(1, min(ctx.options.row_elements, ctx.limits.sbuf_bytes * 3 // 4 // per_element))
    try:
        tiles = plan(
            shape,
            [(o.offset, o.strides) for o in operands],
            pmax=ctx.pmax,
            free_budget=budget,
            reduce_dims=(len(shape) - 1,),
            whole_free=True,
        )
    except TilingError as error:
        raise Unsupported(ctx.call.op, Reason.SHAPE, str(error)) from None
    largest = (max(t.partitions for t in tiles), max(t.free_elements for t in tiles))
    loads = [BufferRing(ctx.options.buffers) for _ in range(1 + len(extras))]
    exps, results, stats_ring = (BufferRing(ctx.options.buffers) for _ in range(3))
    for tile in tiles:
        p, n = tile.partitions, tile.free_elements
        x = loads[0]((p, n), HW_FP32, lang.sbuf, max_shape=largest)
        ctx.queues.load(x, tile.ap(2, scores))
        for i, extra in enumerate(extras):  # additive masks
            m = loads[i + 1]((p, n), HW_FP32, lang.sbuf, max_shape=largest)
            ctx.queues.load(m, tile.ap(3 + i, extra))
            nisa.tensor_tensor(x, x, m, AluOp.add)
        stats = stats_ring((p, 3), HW_FP32, lang.sbuf)  # -max, sum, logsumexp
        neg_max, total, log_total = stats[:, 0:1], stats[:, 1:2], stats[:, 2:3]
        nisa.tensor_reduce(neg_max, ReduceOp.max, x, negate=True)
        e = exps((p, n), HW_FP32, lang.sbuf, max_shape=largest)
        nisa.activation_reduce(e, Act.exp, x, bias=neg_max, reduce_res=total)
        nisa.activation(log_total, Act.log, total)
        nisa.tensor_tensor(log_total, log_total, neg_max, AluOp.subtract)
        nisa.reciprocal(total, total)
        y = results((p, n), ctx.tile_dtype(probs.dtype), lang.sbuf, max_shape=largest)
        nisa.tensor_scalar(y, e, AluOp.multiply, total)
        ctx.queues.store(tile.ap(0, probs), y)
        ctx.queues.store(tile.ap_rows(1, lse_rows), log_total)

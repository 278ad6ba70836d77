"""The one decomposition table of the bridge: PyTorch's Core ATen table, with its unfaithful
entries replaced. ``torch.compile``, ``hwsim export`` and ``analyze`` all use it.

A decomposition must return what the op returns, in every output: values, shapes, dtypes and
layout (later views of the graph rely on the traced strides). PyTorch's own tables are written
for inference and export, and one entry breaks training silently:

- ``_scaled_dot_product_flash_attention_for_cpu`` (torch 2.13) returns the attention
  *probabilities* [N, H, L, S] as its second output, where the op returns the row log-sum-exp
  [N, H, L]. Inference never reads it; training does: autograd's formula for the op is
  ``_scaled_dot_product_flash_attention_for_cpu_backward``, which takes that output as its
  ``logsumexp`` and computed wrong gradients for every parameter upstream of attention, while
  the forward outputs (and a check of the decomposed graph against itself) looked right. Its
  output also came back over (L, N, H, E) memory, where the op keeps the query's layout, which
  broke re-tracing after ``torch.export`` (pytorch/pytorch#136543).

Here the op decomposes into the math it performs (scores, causal/explicit mask, softmax in
fp32 for 16-bit inputs, as the CPU kernel accumulates) with its real log-sum-exp and its meta
function's layouts; the backward op decomposes into the flash-attention backward math, so a
backward graph is plain Core ATen the lowerings can take. ``tests/bridge/test_decompositions.py``
checks both against the CPU kernels, and gradients of whole models against eager.
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten


def decomposition_table() -> dict[Any, Any]:
    """Core ATen decompositions (``torch._decomp.core_aten_decompositions``), corrected."""
    from torch._decomp import core_aten_decompositions

    table: dict[Any, Any] = dict(core_aten_decompositions())
    table[aten._scaled_dot_product_flash_attention_for_cpu.default] = sdpa_flash_cpu
    table[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = (
        sdpa_flash_cpu_backward
    )
    from hwsim.bridge.model_decompositions import model_decompositions
    from hwsim.bridge.training_decompositions import training_decompositions

    table.update(training_decompositions())  # losses, embedding gradients, optimizer ops
    table.update(model_decompositions())  # MoE grouped matmuls, RNN layers, group norm, conv3d
    return table


def _layout_like(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``x`` laid out densely in the stride order of ``like`` (what ``empty_like`` gives a
    non-dense tensor): dims sorted by decreasing stride, ties in dim order."""
    strides = like.stride()
    order = sorted(range(like.ndim), key=lambda d: (-strides[d], d))
    inverse = [order.index(d) for d in range(like.ndim)]
    return x.permute(order).contiguous().permute(inverse)


def _seq_major(x: torch.Tensor) -> torch.Tensor:
    """[N, H, L, ...] over (N, L, H, ...) memory: the CPU kernel's logsumexp and gradients."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def _scores(
    query: torch.Tensor,
    key: torch.Tensor,
    is_causal: bool,
    attn_mask: torch.Tensor | None,
    scale: float | None,
) -> tuple[torch.Tensor, float]:
    """fp32 scores q k^T * scale with the masks applied (masked positions -inf), and the scale.
    ``key`` has the query's head count already (grouped-query heads expanded)."""
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = torch.matmul(query.float(), key.float().transpose(-2, -1)) * factor
    queries, keys = scores.shape[-2], scores.shape[-1]
    if is_causal:
        keep = torch.ones(queries, keys, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    return scores, factor


def _expand_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention: key/value head g serves query heads g*G .. g*G+G-1."""
    if x.shape[1] == heads:
        return x
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _fold_heads(grad: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The gradient of ``_expand_heads``: sum each group of query heads into its kv head."""
    batch, heads = grad.shape[:2]
    if heads == kv_heads:
        return grad
    return grad.reshape(batch, kv_heads, heads // kv_heads, *grad.shape[2:]).sum(2)


def _row_logsumexp(scores: torch.Tensor) -> torch.Tensor:
    """log(sum(exp(scores))) per row, and 0 for a row masked entirely (every score -inf), as
    the CPU kernel gives it: its probabilities exp(score - 0) are then 0, so are its output and
    its gradients (plain logsumexp would give -inf, and NaN probabilities)."""
    row_max = scores.amax(dim=-1, keepdim=True)
    shift = torch.where(row_max == float("-inf"), 0.0, row_max)
    total = torch.exp(scores - shift).sum(dim=-1, keepdim=True)
    return torch.where(total > 0, torch.log(total) + shift, 0.0).squeeze(-1)


def sdpa_flash_cpu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [N, H, L, E] in the query's dtype and layout, logsumexp [N, H, L] fp32 over
    (N, L, H) memory), as the CPU kernel and its meta function give them."""
    torch._check(dropout_p == 0.0, lambda: f"dropout_p must be 0, got {dropout_p}")
    heads = query.shape[1]
    scores, _ = _scores(query, _expand_heads(key, heads), is_causal, attn_mask, scale)
    logsumexp = _row_logsumexp(scores)
    probs = torch.exp(scores - logsumexp.unsqueeze(-1))
    output = torch.matmul(probs, _expand_heads(value, heads).float()).to(query.dtype)
    return _layout_like(output, query), _seq_major(logsumexp)


def sdpa_flash_cpu_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    dropout_p: float,
    is_causal: bool,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flash-attention backward from the saved log-sum-exp (probabilities recomputed):
    dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO * O)), dQ = dS K s, dK = dS^T Q s."""
    torch._check(dropout_p == 0.0, lambda: f"dropout_p must be 0, got {dropout_p}")
    heads, kv_heads = query.shape[1], key.shape[1]
    k = _expand_heads(key, heads).float()
    v = _expand_heads(value, heads).float()
    scores, factor = _scores(query, k, is_causal, attn_mask, scale)
    probs = torch.exp(scores - logsumexp.float().unsqueeze(-1))
    d_out = grad_out.float()
    grad_v = torch.matmul(probs.transpose(-2, -1), d_out)
    grad_probs = torch.matmul(d_out, v.transpose(-2, -1))
    row = (d_out * out.float()).sum(dim=-1, keepdim=True)
    grad_scores = probs * (grad_probs - row)
    grad_q = torch.matmul(grad_scores, k) * factor
    grad_k = torch.matmul(grad_scores.transpose(-2, -1), query.float()) * factor
    return (
        _seq_major(grad_q.to(query.dtype)),
        _seq_major(_fold_heads(grad_k, kv_heads).to(key.dtype)),
        _seq_major(_fold_heads(grad_v, kv_heads).to(value.dtype)),
    )

"""``_embedding_bag`` (nn.EmbeddingBag, F.embedding_bag; and its ``_forward_only`` twin) as a
gather and a segment reduction the bridge lowers.

Bag b holds the positions starts[b] <= i < ends[b] of ``indices`` (starts = offsets[:B],
ends = offsets[1:B] then len(indices): the CPU kernel's last bag runs to the end, also with
``include_last_offset``, except for sums without ``padding_idx``, which stop at offsets[B]),
less those whose index is ``padding_idx``. A device-built membership mask [B, L] (from
``arange`` and the offsets: no host read of offsets) selects them:

- rows = embedding(weight, indices) [L, D]: one ``dma_gather`` of L rows;
- sum: mask (times ``per_sample_weights``) [B, L] x rows [L, D], one matmul on TensorE;
- mean: the same sum divided by the bag's size (empty bags give 0, as on the CPU);
- max: the rows masked with -inf, broadcast to [B, L, D], reduced by amax and argmax on the
  L axis (empty bags give 0); ``max_indices`` are the winning rows' indices.

Cost, stated plainly: the matmul is B x L x D multiply-adds where a segment sum needs L x D,
and max mode builds and reduces a [B, L, D] tensor; both are B times the work of a
segment-at-a-time kernel, cheap for the few bags per call models use, quadratic for many.
The secondary outputs (offset2bag, bag_size, max_indices) carry the CPU kernel's values and
shapes (``torch._meta_registrations.meta_embedding_bag``), so backward formulas read the same.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten

MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2


def embedding_bag(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    scale_grad_by_freq: bool = False,
    mode: int = MODE_SUM,
    sparse: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
    forward_only: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output [B, D], offset2bag, bag_size, max_indices) as the CPU kernel returns them."""
    torch._check(indices.dim() == 1, lambda: f"indices must be 1-D, got {indices.dim()}-D")
    torch._check(
        per_sample_weights is None or mode == MODE_SUM,
        lambda: "embedding_bag: per_sample_weights only supported with mode='sum'",
    )
    length, dev = indices.shape[0], weight.device
    index_dtype = torch.promote_types(indices.dtype, offsets.dtype)  # the CPU kernel's
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = offsets[:bags].to(torch.int64)
    last = torch.full((1,), length, dtype=torch.int64, device=dev)
    position = torch.arange(length, dtype=torch.int64, device=dev).unsqueeze(0)  # [1, L]
    member = _membership(position, starts, torch.cat([starts[1:], last]))  # [B, L]
    if padding_idx >= 0:
        member = member & (indices != padding_idx).unsqueeze(0)
    size = _count(member, 1)  # [B]
    if include_last_offset and mode != MODE_MAX and padding_idx < 0:  # the CPU kernel's
        # sums then stop at offsets[B] (its sizes do not; with a padding_idx neither does)
        summed = offsets[bags:].to(torch.int64)
        member = member & _membership(position, starts, torch.cat([starts[1:], summed]))
    rows = aten.embedding.default(weight, indices)  # [L, D]
    zeros = torch.zeros(bags, dtype=index_dtype, device=dev)
    if mode == MODE_MAX:
        masked = torch.where(member.unsqueeze(2), rows.unsqueeze(0), float("-inf"))  # [B, L, D]
        filled = (size > 0).unsqueeze(1)
        output = torch.where(filled, masked.amax(1), 0.0).to(weight.dtype)
        winner = aten.index_select.default(indices, 0, masked.argmax(1).reshape(-1))
        max_indices = torch.where(filled, winner.reshape(bags, -1), 0).to(index_dtype)
    else:
        scale = member.to(weight.dtype)
        if per_sample_weights is not None:
            scale = scale * per_sample_weights.unsqueeze(0)
        output = torch.mm(scale, rows)
        if mode == MODE_MEAN:
            output = output / size.clamp(min=1).to(weight.dtype).unsqueeze(1)
            max_indices = size.to(index_dtype)
        else:  # the forward-only kernel sizes it as the offsets
            unused = offsets.shape[0] if forward_only else bags
            max_indices = torch.zeros(unused, dtype=index_dtype, device=dev)
    bag_size = zeros if mode == MODE_SUM else size.to(index_dtype)
    if forward_only and mode == MODE_SUM:
        bag_size = max_indices
    fast_sum = weight.dtype in (torch.float32, torch.float16) and padding_idx < 0
    if mode == MODE_SUM and fast_sum:
        offset2bag = position[0, :0].to(index_dtype)  # a view: no empty tensor to create
    else:  # the bag of every position: how many bags start at or before it, less one
        below = _count(starts.unsqueeze(1) <= position, 0)
        offset2bag = (below - 1).to(index_dtype)
    return output, offset2bag, bag_size, max_indices


def _count(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """int64 count of True along ``dim``, summed in fp32 (the row reductions take float
    inputs; exact below 2**24 entries)."""
    return mask.to(torch.float32).sum(dim).to(torch.int64)


def _membership(position: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """[B, L]: whether position i lies in bag b (starts[b] <= i < ends[b])."""
    return (position >= starts.unsqueeze(1)) & (position < ends.unsqueeze(1))


def embedding_bag_forward_only(*args: Any, **kwargs: Any) -> Any:
    return embedding_bag(*args, **{**kwargs, "forward_only": True})


def decompositions() -> dict[Any, Any]:
    return {
        aten._embedding_bag.default: embedding_bag,
        aten._embedding_bag_forward_only.default: embedding_bag_forward_only,
    }

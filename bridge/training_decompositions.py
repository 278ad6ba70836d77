"""Decompositions for training graphs: losses, their backward, and embedding gradients as
one-hot arithmetic the lowerings take, where PyTorch's own tables use gathers and scatters.

PyTorch's Core ATen decompositions cover most backward ops with pointwise and matmul math
(``threshold_backward``, ``native_layer_norm_backward``, ``_softmax_backward_data``,
``gelu_backward``, ...), and the bridge keeps those. Three entries of a language model's training
step go through indexed memory ops instead:

- ``nll_loss_forward`` picks ``-x[n, target[n]]`` with ``gather`` and counts the kept targets
  with an integer ``sum`` of a bool;
- ``nll_loss_backward`` writes ``-1`` at the targets with ``scatter``;
- ``embedding_dense_backward`` accumulates rows with ``index_put(accumulate=True)``.

Here each is the same math over a one-hot mask ``target[:, None] == arange(C)`` (GpSimdE ``iota``
and a compare on the device), which is exact: a pick is a sum of one value and zeros, and an
embedding's gradient is ``onehot^T @ grad`` on TensorE (products by exactly 1 or 0, accumulated
in fp32 PSUM like any matmul). The cost is one pass over the [N, C] logits for the losses (as
large as the ``log_softmax`` next to them) and N x V x D MACs for an embedding's gradient, where
a scatter-add would move N x D; an indirect-DMA scatter-add lowering would be the cheaper path.
Out-of-range targets and indices (torch raises) hit no class and contribute 0.

``optimizer_decompositions``: the ``_foreach_*`` ops of ``torch.optim``'s foreach forms become
the per-tensor ops they apply (``_foreach_mul.Scalar(xs, s)`` -> ``[mul(x, s) for x in xs]``),
which the core table then lowers as usual. The fused forms (``_fused_adam`` ...) have no
decomposition in PyTorch and are refused by name (``Reason.NO_LOWERING``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch._inductor.inductor_prims  # registers prims.fma, which lerp decomposes to

aten = torch.ops.aten

#: torch.nn.functional's reduction codes (at::Reduction).
_NONE, _MEAN, _SUM = 0, 1, 2


def training_decompositions() -> dict[Any, Callable[..., Any]]:
    """The loss and embedding entries of the module docstring, and the foreach ops."""
    table: dict[Any, Callable[..., Any]] = {
        aten.nll_loss_forward.default: nll_loss_forward,
        aten.nll_loss_backward.default: nll_loss_backward,
        aten.embedding_dense_backward.default: embedding_dense_backward,
    }
    table.update(optimizer_decompositions())
    table[aten.pow.Scalar] = pow_scalar_base
    table[torch.ops.prims.fma.default] = fma
    return table


def _hits(target: torch.Tensor, classes: int, channel_dim: int) -> torch.Tensor:
    """Bool mask, True where the class index equals the target (one-hot along channel_dim)."""
    shape = [1] * (channel_dim + 1)
    shape[channel_dim] = classes
    every = torch.arange(classes, device=target.device, dtype=target.dtype).view(shape)
    return target.unsqueeze(channel_dim) == every


def nll_loss_forward(
    self: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, total_weight) as ``aten.nll_loss_forward`` gives them, by one-hot picks."""
    torch._check(0 < self.dim() <= 2, lambda: f"input should be 1-D or 2-D, got {self.dim()}-D")
    channel_dim = 1 if self.dim() == 2 else 0
    classes = self.shape[channel_dim]
    hits = _hits(target, classes, channel_dim)
    kept = target != ignore_index
    zero = torch.zeros((), dtype=self.dtype, device=self.device)
    weighted = self if weight is None else self * weight
    picked = torch.where(hits, weighted, zero).sum(channel_dim)
    loss = torch.where(kept, -picked, zero)
    if reduction == _NONE and self.dim() == 2:
        return loss, self.new_full((), 0.0)
    if weight is None:
        total = kept.to(self.dtype).sum()
    else:
        total = torch.where(kept, torch.where(hits, weight, zero).sum(channel_dim), zero).sum()
    if reduction == _SUM:
        loss = loss.sum()
    elif reduction == _MEAN:
        loss = loss.sum() / total
    return loss, total


def nll_loss_backward(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    reduction: int,
    ignore_index: int,
    total_weight: torch.Tensor,
) -> torch.Tensor:
    """d loss / d self: ``-grad * weight[target]`` at each kept target, 0 elsewhere."""
    channel_dim = 1 if self.dim() == 2 else 0
    if self.dim() == 1 and target.dim() > 0:  # the kernel uses target[0] only
        target = target[0]
    if reduction == _MEAN:
        grad_output = grad_output / total_weight
    hits = _hits(target, self.shape[channel_dim], channel_dim)
    hits = hits & (target != ignore_index).unsqueeze(channel_dim)
    if self.dim() == 2 and grad_output.dim() == 1:  # reduction 'none': one gradient a row
        grad_output = grad_output.unsqueeze(channel_dim)
    scale = -grad_output if weight is None else -grad_output * weight
    zero = torch.zeros((), dtype=self.dtype, device=self.device)
    return torch.where(hits, scale.to(self.dtype).expand(self.shape), zero)


def embedding_dense_backward(
    grad_output: torch.Tensor,
    indices: torch.Tensor,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> torch.Tensor:
    """d loss / d weight [num_weights, D] = onehot(indices)^T @ grad (rows at ``padding_idx``
    get nothing); ``scale_grad_by_freq`` divides each row's share by its index's count."""
    dim = grad_output.shape[-1]
    flat = indices.reshape(-1)
    grad = grad_output.reshape(flat.shape[0], dim)
    dtype = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
    hits = _hits(flat, num_weights, 1)  # [N, V]
    if padding_idx >= 0:
        hits = hits & (flat != padding_idx).unsqueeze(1)
    onehot = hits.to(dtype)
    if scale_grad_by_freq:  # each occurrence's share: 1 / (occurrences of its index)
        counts = onehot.sum(0, keepdim=True)  # [1, V]
        onehot = onehot / torch.where(counts > 0, counts, 1.0)
    return torch.mm(onehot.t(), grad.to(dtype)).to(grad_output.dtype)


# ---- the foreach ops of torch.optim -----------------------------------------------------------

#: _foreach_<name> ops that apply torch.<name> to each tensor (with scalars, lists of scalars or
#: of tensors as the later arguments), as torch.optim's SGD, Adam and AdamW use them.
_FOREACH_NAMES = (
    "add",
    "sub",
    "mul",
    "div",
    "addcmul",
    "addcdiv",
    "lerp",
    "sqrt",
    "neg",
    "reciprocal",
    "pow",
    "maximum",
    "minimum",
    "abs",
    "exp",
    "sign",
    "clamp_max",
    "clamp_min",
    "copy",
    "zero",
)


def _per_tensor(name: str) -> Callable[..., Any]:
    """``_foreach_<name>(xs, *rest)`` -> ``[torch.<name>(x, *rest_i) for x in xs]``: a later
    argument that is a list (of tensors or scalars) gives its i-th element to the i-th call."""

    def decomposed(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
        lists = [i for i, a in enumerate(args) if isinstance(a, (list, tuple))]
        if name in ("addcmul", "addcdiv") and len(args) > 3 and isinstance(args[3], torch.Tensor):
            lists.append(3)  # the .Tensor overload: one scalar a tensor, as a 1-D tensor
        count = len(args[lists[0]])
        results = []
        for i in range(count):
            call = [a[i] if j in lists else a for j, a in enumerate(args)]
            results.append(_apply(name, call, kwargs))
        return results

    decomposed.__name__ = f"foreach_{name}"
    return decomposed


def _apply(name: str, args: list[Any], kwargs: dict[str, Any]) -> torch.Tensor:
    if name == "copy":  # _foreach_copy(self, src): src's values in self's dtype and shape
        return args[1].to(args[0].dtype).expand(args[0].shape).clone()
    if name == "zero":
        return torch.zeros_like(args[0])
    if name == "pow" and not isinstance(args[0], torch.Tensor):  # pow(scalar, tensors)
        return torch.pow(args[0], args[1])
    if name in ("addcmul", "addcdiv"):  # x + value * t1 (* or /) t2; value: the 4th argument
        x, t1, t2 = args[:3]
        value = args[3] if len(args) > 3 else kwargs.get("value", 1)
        product = t1 * t2 if name == "addcmul" else t1 / t2
        return x + value * product
    return getattr(torch, name)(*args, **kwargs)


def optimizer_decompositions() -> dict[Any, Callable[..., Any]]:
    """Every functional overload of the ``_foreach_*`` ops in ``_FOREACH_NAMES``."""
    table: dict[Any, Callable[..., Any]] = {}
    for name in _FOREACH_NAMES:
        packet = getattr(aten, f"_foreach_{name}", None)
        if packet is None:
            continue
        fn = _per_tensor(name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if overload != "out" and not op._schema.is_mutable:
                table[op] = fn
    return table


# ---- scalar math of the optimizers' bias corrections -------------------------------------------


def pow_scalar_base(base: float, exponent: torch.Tensor) -> Any:
    """``base ** exponent`` (Adam's ``beta ** step``) as ``exp(exponent * ln(base))`` for a
    positive base (within a few fp32 ulps of libm's pow); other bases stay ``pow.Scalar``."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or base <= 0:
        return NotImplemented
    if not exponent.is_floating_point():
        return NotImplemented
    return torch.exp(exponent * math.log(base))


def fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``prims.fma`` (torch's ``lerp`` reference): a * b + c, rounded twice instead of once."""
    return a * b + c

"""Autocast on the ``hwsim`` device: ``torch.autocast("hwsim", dtype=torch.bfloat16)``.

PyTorch's autocast for a PrivateUse1 backend dispatches to the ``AutocastPrivateUse1`` key, where
PyTorch registers no kernels (a C++ backend brings its own), so every op would fail there. This
module registers them from Python: a fallthrough for every op, and for the ops of the policy
lists below a kernel that casts the op's floating-point hwsim tensors (float64 excepted, as
PyTorch does) and calls the op with autocast off for this device:

- ``LOWER_PRECISION``: to the autocast dtype (``torch.get_autocast_dtype("hwsim")``);
- ``FP32``: to float32 (ops whose range or accuracy suffers in 16 bits);
- ``PROMOTE``: to the widest floating dtype among the arguments.

The lists are CUDA's (aten/src/ATen/autocast_mode.cpp), which is what a user of
``torch.autocast`` expects of an accelerator; a test checks every name is one PyTorch's CUDA
autocast registers. Unlike PyTorch's C++ autocast, casts are not cached within an autocast
region (a weight used twice is cast twice, each cast a simulated op), and ops whose CUDA policy
passes ``dtype=float32`` to the op (softmax, sum, cumsum...) have their inputs cast instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from hwsim.bridge.device_tensor import BACKEND, HwsimTensor

LOWER_PRECISION = (
    "_convolution",
    "_convolution.deprecated",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linalg_vecdot",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "_scaled_dot_product_flash_attention",
    "scaled_dot_product_attention",
)

FP32 = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "rms_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "nuclear_norm.dim",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "upsample_nearest1d",
    "_upsample_nearest_exact1d",
    "upsample_nearest2d",
    "_upsample_nearest_exact2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "_upsample_bilinear2d_aa",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
    "_upsample_bicubic2d_aa",
    "softmax.int",
    "log_softmax.int",
    "cumprod",
    "cumsum",
    "prod",
    "prod.dim_int",
    "sum",
    "sum.dim_IntList",
    "linalg_vector_norm",
    "linalg_matrix_norm",
    "linalg_matrix_norm.str_ord",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
)

PROMOTE = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "vdot",
    "grid_sampler",
    "index_put",
    "tensordot",
    "scatter_add",
)

_KEY = "AutocastPrivateUse1"
_LIBRARIES: list[torch.library.Library] = []


def _eligible(value: Any) -> bool:
    return (
        isinstance(value, HwsimTensor)
        and value.is_floating_point()
        and value.dtype != torch.float64
    )


def _cast_all(values: Any, dtype: torch.dtype) -> Any:
    return pytree.tree_map(
        lambda v: v.to(dtype) if _eligible(v) and v.dtype != dtype else v, values
    )


def _kernel(op: Any, policy: str) -> Callable[..., Any]:
    def autocast_kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            dtype = torch.get_autocast_dtype(BACKEND)
        elif policy == "fp32":
            dtype = torch.float32
        else:
            floats = [v.dtype for v in pytree.tree_leaves((args, kwargs)) if _eligible(v)]
            dtype = floats[0] if floats else torch.float32
            for other in floats[1:]:
                dtype = torch.promote_types(dtype, other)
        args, kwargs = _cast_all((args, kwargs), dtype)
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return op(*args, **kwargs)

    return autocast_kernel


def _overload(name: str) -> Any:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def register() -> None:
    """Register the kernels (once per process)."""
    if _LIBRARIES:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", LOWER_PRECISION), ("fp32", FP32), ("promote", PROMOTE)):
        for name in names:
            kernels.impl(name, _kernel(_overload(name), policy), _KEY)
    _LIBRARIES.extend((fallthrough, kernels))

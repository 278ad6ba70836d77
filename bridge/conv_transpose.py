"""Transposed convolution (``aten.convolution`` with ``transposed=True``: ConvTranspose1d/2d/3d)
as a forward convolution, which the implicit-GEMM lowering (``bridge.lowerings.conv``) takes.

Along each spatial axis, with stride s, padding p, dilation d, output padding op and kernel K,

    out = conv(zero_stuff(x, s) padded by (d(K-1) - p, d(K-1) - p + op),
               flip(w) with in/out channels swapped per group, stride 1, dilation d)

where ``zero_stuff`` puts s - 1 zeros between neighbouring inputs (length (L-1)s + 1) and a
negative padding crops. That is the adjoint of the forward convolution written as one: output
element o receives w[k] * x[i] for every o = i s - p + k d, exactly the scatter-add definition.

Cost, stated plainly: the zero-stuffed input is s^D times larger (D spatial axes), and TensorE
multiplies those zeros too, so the convolution does about s^D times the multiply-adds of the
scatter formulation (stride 2 in 2-D: 4x); stride 1 costs the same as the direct op. The
stuffing itself is one pad per strided axis (a DMA of the input plus the zeros), the flipped
weight one ``index_select`` per spatial axis. A phase (sub-pixel) decomposition into s^D small
convolutions would avoid the zeros; it is not done here. 3-D transposed convolutions become a
5-D forward convolution, which ``model_decompositions.convolution_3d`` turns into 2-D ones;
in bf16/fp16 they run in fp32 (TensorE's fp32 rate) so that the depth sum rounds once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hwsim.bridge.model_decompositions import convolution_3d

aten = torch.ops.aten


def convolution(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Any:
    """Transposed convolutions as forward ones (module docstring); a forward convolution goes
    on to the 3-D decomposition (NotImplemented for 1-D and 2-D: the lowering takes them)."""
    if not transposed:
        return convolution_3d(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
    if isinstance(padding, str):
        return NotImplemented
    dims = input.dim() - 2
    if dims == 3 and input.dtype in (torch.bfloat16, torch.float16):
        # The 3-D convolution sums its depth taps' 2-D convolutions: in a 16-bit dtype each
        # would round before the sum (OpInfo saw 4 ulp errors), where the CPU kernel rounds once.
        wide_bias = bias.float() if bias is not None else None
        out = convolution(
            input.float(), weight.float(), wide_bias, stride, padding, dilation, True,
            output_padding, groups,
        )  # fmt: skip
        return out.to(input.dtype)
    stride, padding, dilation, output_padding = (
        _per_axis(v, dims) for v in (stride, padding, dilation, output_padding)
    )
    x = input
    for axis in range(dims):
        reach = dilation[axis] * (weight.shape[2 + axis] - 1)
        before = reach - padding[axis]
        x = _stuff_and_pad(x, 2 + axis, stride[axis], before, before + output_padding[axis])
    out = aten.convolution.default(
        x, _forward_weight(weight, groups), bias, [1] * dims, [0] * dims, dilation, False,
        [0] * dims, groups,
    )  # fmt: skip
    return out


def _per_axis(values: Sequence[int], dims: int) -> list[int]:
    values = [int(v) for v in values]
    return values * dims if len(values) == 1 else values


def _stuff_and_pad(x: torch.Tensor, dim: int, stride: int, before: int, after: int) -> torch.Tensor:
    """x with stride - 1 zeros between neighbours along ``dim`` and ``before``/``after`` zeros
    at its ends (negative: cropped), in one ``constant_pad_nd`` (and one more to crop)."""
    length = x.shape[dim]
    if stride > 1:
        # [.., L, ..] -> [.., L, 1, ..] padded to [.., L, s, ..] -> [.., L*s, ..]: s - 1
        # trailing zeros per input, the last input's s - 1 counted into ``after``.
        x = x.unsqueeze(dim + 1)
        trailing = x.dim() - 1 - (dim + 1)
        x = aten.constant_pad_nd.default(x, [0, 0] * trailing + [0, stride - 1], 0.0)
        shape = list(x.shape)
        x = x.reshape([*shape[:dim], length * stride, *shape[dim + 2 :]])
        after -= stride - 1
    if before == 0 and after == 0:
        return x
    trailing = x.dim() - 1 - dim
    return aten.constant_pad_nd.default(x, [0, 0] * trailing + [before, after], 0.0)


def _forward_weight(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """[C_in, C_out/g, *K] -> [C_out, C_in/g, *K] with every kernel axis reversed."""
    c_in, c_out_group, kernel = weight.shape[0], weight.shape[1], list(weight.shape[2:])
    w = weight.reshape([groups, c_in // groups, c_out_group, *kernel]).transpose(1, 2)
    w = w.reshape([groups * c_out_group, c_in // groups, *kernel])
    for axis, size in enumerate(kernel):
        if size > 1:
            reverse = torch.arange(size - 1, -1, -1, device=weight.device)
            w = aten.index_select.default(w, 2 + axis, reverse)
    return w


def decompositions() -> dict[Any, Any]:
    """The entry (it replaces and calls ``model_decompositions``' convolution entry)."""
    return {aten.convolution.default: convolution}

"""Decompositions for a CNN's backward graph: ``convolution_backward``,
``max_pool2d_with_indices_backward`` and ``_adaptive_avg_pool2d_backward`` as ops the lowerings
already take (forward convolutions, constant padding, slices, ``cat``, compares, selects, sums).

PyTorch's Core ATen table keeps all three as single ops, which the bridge has no lowering for,
so a CNN's backward ran partly on the CPU. Each decomposition here is exact math (the same sums,
in another order, so equal to torch's kernels within fp32 rounding); their costs:

- ``convolution_backward`` (forward convolutions, 1-D and 2-D, any stride, padding, dilation,
  groups):

  - grad_input is the convolution of grad_output, *zero-stuffed* by the stride (stride - 1
    zeros between elements) and padded by ``dilation * (K - 1) - padding`` (negative: cropped),
    with the weight flipped in space and its in/out channels swapped per group, stride 1, the
    forward's dilation. Cost: stride**2 times the forward convolution's MACs for a 2-D stride
    (the stuffed zeros are multiplied too; a polyphase split into stride**2 sub-convolutions
    would skip them), plus one padding copy of grad_output (stride**2 times its size) and one
    small copy of the flipped weight.
  - grad_weight is the convolution of the input, with images and channels swapped, by
    grad_output as the kernel (stride and dilation exchange roles), groups kept, then cropped to
    the kernel size. Its MACs equal the forward's, but the "kernel" has OH x OW taps each
    contracting over only the batch (N of the 128 TensorE rows), so TensorE runs at N/128 of its
    peak; an im2col matmul contracting over N x OH x OW would use it fully. Plus a transposed
    copy of the input and of grad_output.
  - grad_bias is a sum of grad_output over images and positions.

  Transposed convolutions and 3-D convolutions are not decomposed (``NotImplemented``: the op
  stays and meets the fallback policy by name).
- ``max_pool2d_with_indices_backward`` is an equality mask per window tap: for tap (i, j),
  the outputs whose saved flat index is the position that tap reads keep their gradient
  (``where(indices == position, grad, 0)``), which lands at that position (zero-stuffed by the
  stride, shifted by ``tap * dilation - padding``); the taps' results add up, so overlapping
  windows that picked the same element sum as in torch's kernel. Cost per tap: a compare and a
  select over grad_output, a padding copy to the input's size (stride**2 times grad_output's)
  and an add: ~4 VectorE passes over the input per tap, k_h x k_w taps (9 for a 3x3 pool).
  On tiny_resnet (trn2 defaults) its ops take 157 us of bound time; a ``scatter_add`` at the
  indices (which the bridge lowers as a one-hot search, H W x OH OW per image and channel)
  took 554 us, and the whole backward 4.9 ms instead of 1.35 ms.
- ``_adaptive_avg_pool2d_backward`` when the input's size is a multiple of the output's (every
  window the same k_h x k_w block, no overlap): grad_output broadcast over each block, divided
  by k_h * k_w; one pointwise pass over the input's size. Other sizes (uneven, overlapping
  windows) are not decomposed (``NotImplemented``; the op meets the fallback policy by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def cnn_backward_decompositions() -> dict[Any, Any]:
    """The three entries of the module docstring."""
    return {
        aten.convolution_backward.default: convolution_backward,
        aten.max_pool2d_with_indices_backward.default: max_pool2d_with_indices_backward,
        aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    }


def _per_dim(values: Sequence[int], dims: int) -> list[int]:
    values = list(values)
    return values * dims if len(values) == 1 else values


def _flip_spatial(weight: torch.Tensor) -> torch.Tensor:
    """The weight reversed along its spatial dims, by slices and ``cat`` (no ``flip``
    lowering); kernels are small, so this is a copy of the weight in K pieces per dim."""
    for dim in range(2, weight.dim()):
        size = weight.shape[dim]
        if size > 1:
            pieces = [weight.narrow(dim, k, 1) for k in reversed(range(size))]
            weight = torch.cat(pieces, dim)
    return weight


def _grad_input(
    grad_output: torch.Tensor,
    input_shape: Sequence[int],
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    """grad_output zero-stuffed and padded, convolved with the flipped, channel-swapped weight
    (module docstring)."""
    spatial = grad_output.dim() - 2
    batch, c_out = grad_output.shape[:2]
    out_sizes = list(grad_output.shape[2:])
    stuffed = grad_output
    if any(s > 1 for s in stride):
        # [N, C, O1, 1, O2, 1] padded to [N, C, O1, s1, O2, s2]: each element then s-1 zeros.
        view: list[int] = [batch, c_out]
        for size in out_sizes:
            view += [size, 1]
        pads: list[int] = []
        for s in reversed(stride):
            pads += [0, s - 1, 0, 0]
        stuffed = torch.constant_pad_nd(grad_output.reshape(view), pads, 0.0)
        stuffed = stuffed.reshape(
            [batch, c_out, *(o * s for o, s in zip(out_sizes, stride, strict=True))]
        )
    # A stride-1 convolution with the dilated kernel's extent E gives size L - E + 1: pad the
    # stuffed length (O * s, its trailing s - 1 zeros included) to input + E - 1.
    pads = []
    for d in reversed(range(spatial)):
        extent = dilation[d] * (weight.shape[2 + d] - 1) + 1
        before = extent - 1 - padding[d]
        after = input_shape[2 + d] + extent - 1 - before - out_sizes[d] * stride[d]
        pads += [before, after]
    padded = torch.constant_pad_nd(stuffed, pads, 0.0)
    c_in_group, c_out_group = weight.shape[1], c_out // groups
    kernel = weight.shape[2:]
    swapped = weight.reshape(groups, c_out_group, c_in_group, *kernel).transpose(1, 2)
    swapped = _flip_spatial(swapped.reshape(groups * c_in_group, c_out_group, *kernel))
    ones = [1] * spatial
    zeros = [0] * spatial
    return aten.convolution(padded, swapped, None, ones, zeros, dilation, False, zeros, groups)


def _grad_weight(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight_shape: Sequence[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    """grad_weight[co, ci, k] = sum_{n, o} grad_output[n, co, o] * x_pad[n, ci, o*s + k*d]: a
    convolution over the images as channels, grad_output as the kernel, stride <-> dilation."""
    batch, c_in = input.shape[:2]
    c_out = grad_output.shape[1]
    c_in_group, c_out_group = c_in // groups, c_out // groups
    spatial_in, spatial_out = list(input.shape[2:]), list(grad_output.shape[2:])
    # x [N, g, Ci/g, ...] -> [Ci/g, g * N, ...]: group j's "channels" are its images.
    x = input.reshape(batch, groups, c_in_group, *spatial_in).transpose(0, 2)
    x = x.reshape(c_in_group, groups * batch, *spatial_in)
    # grad_output [N, g, Co/g, ...] -> [g * Co/g, N, ...]: the kernel of each group.
    g = grad_output.reshape(batch, groups, c_out_group, *spatial_out).permute(
        1, 2, 0, *range(3, 3 + len(spatial_out))
    )
    g = g.reshape(c_out, batch, *spatial_out)
    zeros = [0] * len(spatial_in)
    full = aten.convolution(x, g, None, dilation, padding, stride, False, zeros, groups)
    # full [Ci/g, Co, K' ...] with K' >= K (input rows the forward's windows never reached).
    for d, k in enumerate(weight_shape[2:]):
        full = full.narrow(2 + d, 0, k)
    return full.transpose(0, 1)


def convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: Sequence[int] | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> Any:
    """(grad_input, grad_weight, grad_bias) of a forward convolution, each None where
    ``output_mask`` leaves it out (module docstring)."""
    spatial = input.dim() - 2
    if transposed or spatial not in (1, 2) or isinstance(padding, str):
        return NotImplemented
    stride_, padding_ = _per_dim(stride, spatial), _per_dim(padding, spatial)
    dilation_ = _per_dim(dilation, spatial)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = _grad_input(
            grad_output, input.shape, weight, stride_, padding_, dilation_, groups
        )
    if output_mask[1]:
        grad_weight = _grad_weight(
            grad_output, input, weight.shape, stride_, padding_, dilation_, groups
        )
    if output_mask[2]:
        grad_bias = grad_output.sum([0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias


def _tap_positions(
    out_size: int, size: int, stride: int, padding: int, dilation: int, tap: int, device: Any
) -> torch.Tensor:
    """[out_size] int64: the input position window o's tap reads (o * s - p + tap * d), -1
    where that falls in the padding (no index names it)."""
    positions = torch.arange(out_size, dtype=torch.int64, device=device) * stride + (
        tap * dilation - padding
    )
    return torch.where((positions >= 0) & (positions < size), positions, -1)


def _place(
    values: torch.Tensor, size: tuple[int, int], stride: list[int], shift: tuple[int, int]
) -> torch.Tensor:
    """[N, C, OH, OW] put at rows oh * s + shift[0], cols ow * s + shift[1] of zeros [N, C, H,
    W]: zero-stuffed by the stride, then padded (negative: cropped) to the input's size."""
    batch, channels, out_rows, out_cols = values.shape
    if stride[0] > 1 or stride[1] > 1:
        view = values.reshape(batch, channels, out_rows, 1, out_cols, 1)
        values = torch.constant_pad_nd(view, [0, stride[1] - 1, 0, 0, 0, stride[0] - 1], 0.0)
        values = values.reshape(batch, channels, out_rows * stride[0], out_cols * stride[1])
    pads = []
    for d in (1, 0):
        pads += [shift[d], size[d] - shift[d] - values.shape[2 + d]]
    return torch.constant_pad_nd(values, pads, 0.0)


def max_pool2d_with_indices_backward(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: torch.Tensor,
) -> Any:
    """Per window tap: the outputs whose saved index is that tap's position keep their
    gradient, placed at that position; the taps summed (module docstring)."""
    if self.dim() != 4:  # an unbatched [C, H, W] input: decompose its batched form
        return NotImplemented
    rows, cols = self.shape[-2:]
    out_rows, out_cols = grad_output.shape[-2:]
    kernel = _per_dim(kernel_size, 2)
    stride_ = _per_dim(stride, 2) if len(stride) else kernel
    padding_, dilation_ = _per_dim(padding, 2), _per_dim(dilation, 2)
    zero = torch.zeros((), dtype=grad_output.dtype)
    grad_input = None
    for tap_row in range(kernel[0]):
        row = _tap_positions(
            out_rows, rows, stride_[0], padding_[0], dilation_[0], tap_row, self.device
        )
        for tap_col in range(kernel[1]):
            col = _tap_positions(
                out_cols, cols, stride_[1], padding_[1], dilation_[1], tap_col, self.device
            )
            position = torch.where(
                (row[:, None] >= 0) & (col[None, :] >= 0), row[:, None] * cols + col[None, :], -1
            )
            picked = torch.where(indices == position, grad_output, zero)
            shift = (
                tap_row * dilation_[0] - padding_[0],
                tap_col * dilation_[1] - padding_[1],
            )
            placed = _place(picked, (rows, cols), stride_, shift)
            grad_input = placed if grad_input is None else grad_input + placed
    assert grad_input is not None
    return grad_input


def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """Each output's gradient spread evenly over its k_h x k_w block, when the sizes divide
    (module docstring); otherwise ``NotImplemented``."""
    rows, cols = self.shape[-2:]
    out_rows, out_cols = grad_output.shape[-2:]
    if rows % out_rows or cols % out_cols:
        return NotImplemented
    k_rows, k_cols = rows // out_rows, cols // out_cols
    lead = list(grad_output.shape[:-2])
    spread = grad_output.reshape(*lead, out_rows, 1, out_cols, 1).expand(
        *lead, out_rows, k_rows, out_cols, k_cols
    )
    return (spread / (k_rows * k_cols)).reshape(self.shape)

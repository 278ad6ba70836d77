"""Decompositions the Core ATen table lacks for ops real models meet (``bridge.decompositions``
adds them); each computes what the op computes, with the same number of multiply-adds unless
said otherwise.

- ``native_group_norm``: reshape to [N, groups, C/groups * HxW] rows, ``var_mean`` (fp32 for
  16-bit inputs, as the CPU kernel accumulates), normalize, per-channel affine: the row ops and
  pointwise lowerings. (``torch._refs``' version goes through ``as_strided``.)
- ``mkldnn_rnn_layer`` (what ``nn.LSTM`` becomes on the CPU in inference, as
  ``torch._decomp``'s LSTM picks oneDNN's fused layer): the LSTM recurrence unrolled, one
  input projection for all steps ([T * B, I] x [I, 4H] on TensorE), then per step the hidden
  projection, sigmoid/tanh gates and the cell update (PyTorch's ``lstm_cell``), so LSTMs run on
  the simulator step by step. (``nn.GRU`` and ``nn.RNN`` decompose in the Core ATen table.)
- ``convolution`` of 3-D inputs (``Conv3d``): a sum over the kd depth taps of 2-D
  convolutions of depth-strided slices (depth folded into the batch), the same multiply-adds as
  a direct 3-D convolution; other convolutions are left to the 2-D lowering (NotImplemented).
- ``transformers::grouped_mm_fallback``: below. Registered when ``transformers`` has registered
  the op; importing this module imports nothing of ``transformers``.

``transformers::grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E])``: rows
offs[e-1] <= s < offs[e] of the expert-sorted input are multiplied by expert e's weight (rows
past offs[E-1] are zero). Its CPU kernel loops over experts reading ``offs`` on the host (a
value-dependent loop a static program cannot have). Here every expert multiplies every row
(one bmm [E, S, K] x [E, K, N] on TensorE) and a device-built [E, S] mask keeps each row's
own expert: E times the multiply-adds of the grouped product, but each expert's weights are
read once. That is the dense "all experts" strategy small token counts use on Trainium; its
cost is what the simulator reports (it does not pretend to be a grouped kernel).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def grouped_mm_dense(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    rows, experts = input.shape[0], weight.shape[0]
    ends = offs.to(torch.int64)
    starts = torch.cat([torch.zeros_like(ends[:1]), ends[:-1]])
    s = torch.arange(rows, device=input.device).unsqueeze(0)  # [1, S]
    mine = (s >= starts.unsqueeze(1)) & (s < ends.unsqueeze(1))  # [E, S]
    every = torch.bmm(input.unsqueeze(0).expand(experts, *input.shape), weight)  # [E, S, N]
    kept = torch.where(mine.unsqueeze(-1), every, torch.zeros((), dtype=every.dtype))
    return kept.sum(0)


def native_group_norm(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    n: int,
    channels: int,
    hxw: int,
    groups: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, mean [N, G], rstd [N, G]) in the input's dtype, as the CPU kernel returns them."""
    rows = input.contiguous().view(n, groups, -1).float()
    var, mean = torch.var_mean(rows, dim=-1, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    out = ((rows - mean) * rstd).view(input.shape)
    channel_shape = (1, channels) + (1,) * (input.dim() - 2)
    if weight is not None:
        out = out * weight.float().view(channel_shape)
    if bias is not None:
        out = out + bias.float().view(channel_shape)
    dtype = input.dtype
    return out.to(dtype), mean.view(n, groups).to(dtype), rstd.view(n, groups).to(dtype)


def convolution_3d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Any:
    """Conv3d as kd 2-D convolutions (module docstring); NotImplemented for anything else."""
    if transposed or input.dim() != 5 or isinstance(padding, str):
        return NotImplemented
    aten = torch.ops.aten
    stride, padding, dilation = (
        list(v) * 3 if len(v) == 1 else v for v in (stride, padding, dilation)
    )
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    if pd:
        input = aten.constant_pad_nd.default(input, [0, 0, 0, 0, pd, pd], 0.0)
    n, c, depth = input.shape[:3]
    taps, out_channels = weight.shape[2], weight.shape[0]
    out_depth = (depth - dd * (taps - 1) - 1) // sd + 1
    total = None
    for t in range(taps):
        start = t * dd
        planes = input[:, :, start : start + sd * (out_depth - 1) + 1 : sd]  # [N, C, Do, H, W]
        planes = planes.transpose(1, 2).reshape(n * out_depth, c, *input.shape[3:])
        y = aten.convolution.default(
            planes, weight[:, :, t], None, [sh, sw], [ph, pw], [dh, dw], False, [0, 0], groups
        )
        total = y if total is None else total + y
    assert total is not None
    out = total.reshape(n, out_depth, out_channels, *total.shape[2:]).transpose(1, 2)
    if bias is not None:
        out = out + bias.view(1, out_channels, 1, 1, 1)
    return aten.clone.default(out, memory_format=torch.contiguous_format)


def mkldnn_lstm_layer(
    inp: torch.Tensor,
    w_ih: torch.Tensor,
    w_hh: torch.Tensor,
    b_ih: torch.Tensor,
    b_hh: torch.Tensor,
    hx: torch.Tensor,
    cx: torch.Tensor,
    reverse: bool,
    batch_sizes: Any,
    mode: int,
    hidden_size: int,
    num_layers: int,
    has_biases: bool,
    bidirectional: bool,
    batch_first: bool,
    train: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One LSTM layer over inp [T, B, I] from hx, cx [1, B, H] (biases are zeros when the
    module has none): (output [T, B, H], hy, cy, an empty workspace), steps taken backwards
    when ``reverse`` (the second direction of a bidirectional LSTM)."""
    from torch._decomp.decompositions import lstm_cell

    torch._check(mode == LSTM_MODE, lambda: f"mkldnn_rnn_layer mode {mode} is not an LSTM")
    torch._check(not batch_first and not batch_sizes, lambda: "packed or batch-first input")
    projected = torch.nn.functional.linear(inp, w_ih, b_ih)  # [T, B, 4H], one matmul
    steps = range(inp.shape[0] - 1, -1, -1) if reverse else range(inp.shape[0])
    outputs: dict[int, torch.Tensor] = {}
    for t in steps:
        hx, cx = lstm_cell(projected[t : t + 1], hx, cx, w_hh, b_hh, None, chunk_dim=2)
        outputs[t] = hx
    out = torch.cat([outputs[t] for t in range(inp.shape[0])], 0)
    return out, hx, cx, inp.new_empty((0,), dtype=torch.uint8)  # metadata only: no bytes


#: oneDNN's rnn_kind for an LSTM (third_party/ideep abstract_types.hpp, as torch._decomp says).
LSTM_MODE = 2


def model_decompositions() -> dict[Any, Any]:
    """The entries (``transformers``' only if it has registered its ops in this process)."""
    aten = torch.ops.aten
    table: dict[Any, Any] = {
        aten.native_group_norm.default: native_group_norm,
        aten.mkldnn_rnn_layer.default: mkldnn_lstm_layer,
        aten.convolution.default: convolution_3d,
    }
    from hwsim.bridge import conv_transpose, embedding_bag  # they import convolution_3d

    table.update({**conv_transpose.decompositions(), **embedding_bag.decompositions()})
    namespace = torch.ops.transformers
    with contextlib.suppress(AttributeError, RuntimeError):  # transformers' MoE not imported
        table[namespace.grouped_mm_fallback.default] = grouped_mm_dense
    return table

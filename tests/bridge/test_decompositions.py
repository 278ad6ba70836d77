"""The bridge's decomposition table: SDPA's CPU op and its backward, against the CPU kernels
(values, dtypes and layouts), and the stock entry the table replaces."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.decompositions import (
    decomposition_table,
    sdpa_flash_cpu,
    sdpa_flash_cpu_backward,
)

aten = torch.ops.aten
FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _qkv(dtype: torch.dtype, permuted: bool) -> tuple[torch.Tensor, ...]:
    """q, k, v [2, 4, 16, 32]; ``permuted``: views of one [2, 16, 384] projection, as a
    transformer's attention makes them (strides of (N, L, H, E) memory)."""
    gen = torch.Generator().manual_seed(0)
    if not permuted:
        return tuple(torch.randn(2, 4, 16, 32, generator=gen).to(dtype) for _ in range(3))
    qkv = torch.randn(2, 16, 384, generator=gen).to(dtype)
    return tuple(t.view(2, 16, 4, 32).transpose(1, 2) for t in qkv.split(128, -1))


def _float_mask(fully_masked_row: bool) -> torch.Tensor:
    mask = torch.zeros(2, 1, 16, 16)
    mask[1, :, :, :5] = float("-inf")  # left padding of the second sequence
    if fully_masked_row:
        mask[0, :, 3, :] = float("-inf")
    return mask


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "padding mask": {"attn_mask": _float_mask(False)},
    "fully masked row": {"attn_mask": _float_mask(True), "is_causal": True},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("permuted", [False, True], ids=["contiguous", "projection views"])
@pytest.mark.parametrize("case", CASES)
def test_forward_matches_the_cpu_kernel_in_value_dtype_and_layout(case, permuted):
    q, k, v = _qkv(torch.float32, permuted)
    kwargs = CASES[case]
    want_out, want_lse = FLASH(q, k, v, **kwargs)
    got_out, got_lse = sdpa_flash_cpu(q, k, v, **kwargs)
    torch.testing.assert_close(got_out, want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_lse, want_lse, rtol=1e-5, atol=1e-5)
    assert got_out.stride() == want_out.stride() and got_lse.stride() == want_lse.stride()
    assert got_lse.shape == (2, 4, 16) and got_lse.dtype == torch.float32


def test_bf16_inputs_give_a_bf16_output_and_an_fp32_logsumexp():
    q, k, v = _qkv(torch.bfloat16, permuted=False)
    want_out, want_lse = FLASH(q, k, v, is_causal=True)
    got_out, got_lse = sdpa_flash_cpu(q, k, v, is_causal=True)
    assert (got_out.dtype, got_lse.dtype) == (torch.bfloat16, torch.float32)
    torch.testing.assert_close(got_out, want_out, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(got_lse, want_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case", CASES)
def test_backward_matches_the_cpu_kernel(case):
    q, k, v = _qkv(torch.float32, permuted=True)
    kwargs = CASES[case]
    out, lse = FLASH(q, k, v, **kwargs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    flags = (0.0, kwargs.get("is_causal", False))
    extra = {key: kwargs[key] for key in ("attn_mask", "scale") if key in kwargs}
    want = FLASH_BACKWARD(grad, q, k, v, out, lse, *flags, **extra)
    got = sdpa_flash_cpu_backward(grad, q, k, v, out, lse, *flags, **extra)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        assert g.stride() == w.stride()


def test_grouped_query_heads_match_sdpa_and_autograd():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 8, 16, generator=gen, requires_grad=True)
    k = torch.randn(1, 2, 8, 16, generator=gen, requires_grad=True)
    v = torch.randn(1, 2, 8, 16, generator=gen, requires_grad=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    out, lse = sdpa_flash_cpu(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    grad = torch.randn(want.shape, generator=gen)
    want_grads = torch.autograd.grad(want, (q, k, v), grad)
    got = sdpa_flash_cpu_backward(grad, q, k, v, out.detach(), lse.detach(), 0.0, True)
    for g, w in zip(got, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_the_table_replaces_the_stock_entry_that_broke_training():
    """torch 2.13's own entry returns the attention probabilities where the op returns the
    log-sum-exp (if this fails, torch fixed it and the override could go)."""
    from torch._decomp import core_aten_decompositions

    q, k, v = _qkv(torch.float32, permuted=False)
    _, stock_second = core_aten_decompositions()[FLASH](q, k, v)
    assert stock_second.shape == (2, 4, 16, 16)  # probabilities, not [2, 4, 16]
    table = decomposition_table()
    assert table[FLASH] is sdpa_flash_cpu and table[FLASH_BACKWARD] is sdpa_flash_cpu_backward


def test_the_decomposition_table_builds_in_a_fresh_process():
    """Built before dynamo or inductor has loaded (``hwsim export``'s path): every op it names
    must exist then (prims.fma is registered by inductor's prims, not by torch itself)."""
    import subprocess
    import sys

    code = (
        "import hwsim.bridge\n"
        "from hwsim.bridge.decompositions import decomposition_table\n"
        "print(len(decomposition_table()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0

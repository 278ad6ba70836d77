"""Inputs and references of the catalog's kernels that come with nki-samples' own unit tests:
the goldens are the tests' own functions (from the vendored ``test/unit`` files)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from hwsim.nki import upstream

UNIT = upstream.NKI_SAMPLES / "test" / "unit"


def _unit(name: str) -> Any:
    return upstream.load(UNIT / f"{name}.py")


def select_and_scatter(operand: np.ndarray, source: np.ndarray) -> np.ndarray:
    return _unit("test_select_and_scatter").cpu_golden_result(operand, source)


def double_row_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The unit test's quantised inputs at K = 2048 (its own K is 16384)."""
    test = _unit("test_double_row_matmul")
    rng = np.random.default_rng(2)
    lhs, rhs = rng.random((512, 2048)), rng.random((2048, 1024))
    scale, quantized = test.column_wise_quantize(rhs)
    bf16 = ml_dtypes.bfloat16
    args = (
        lhs.astype(np.float32).astype(bf16),
        test.reshape(quantized).astype(np.float32).astype(ml_dtypes.float8_e4m3),
        scale.astype(np.float32).astype(bf16),
        2,
        2,
        16,
    )
    return args, {"_golden": lhs @ rhs}


def double_row_matmul(*args: Any, _golden: np.ndarray) -> np.ndarray:
    return _golden


NHEADS = 1


def flash_bwd_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The unit test's first case (bs 1, 4 heads, seqlen 4096, d 128, fp32, causal)."""
    test = _unit("test_flash_attn_bwd")
    rng = np.random.default_rng(3)
    bs, nheads, d, seqlen = 1, NHEADS, 128, 4096

    def sample() -> np.ndarray:
        return ((rng.random((bs, nheads, d, seqlen)) - 0.5) * 2).astype(np.float32)

    q, k, v, dy = sample(), sample(), sample(), sample()
    golden = test.cpu_attention_backward(q, k, v, dy, use_causal_mask=True)
    dq, dk, dv, neg_max, sum_recip, o_proj, _ = golden
    pmax = 128
    neg_max = neg_max.reshape(bs, nheads, seqlen // pmax, pmax).transpose(0, 1, 3, 2)
    sum_recip = sum_recip.reshape(bs, nheads, seqlen // pmax, pmax).transpose(0, 1, 3, 2)
    lse = -1.0 * (neg_max + np.log(sum_recip))
    args = (q, k, v, o_proj, dy, lse.astype(np.float32), None)
    kwargs = {"use_causal_mask": True, "mixed_precision": True, "_golden": (dq, dk, dv)}
    return args, kwargs


def flash_bwd(*args: Any, _golden: Any, **kwargs: Any) -> Any:
    return _golden


def rmsnorm_quant_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    module = upstream.load(
        upstream.NKI_SAMPLES / "src/nki_samples/reference/rmsnorm_quant/rmsnorm_quant.py"
    )
    rng = np.random.default_rng(4)
    hidden = (rng.standard_normal((2, 100, 256))).astype(np.float32).astype(ml_dtypes.bfloat16)
    gamma = rng.random(256).astype(np.float32).astype(ml_dtypes.bfloat16)
    return (hidden, gamma, module.RmsNormQuantKernelArgs(lower_bound=0.0)), {}


def rmsnorm_quant(hidden: np.ndarray, gamma: np.ndarray, kargs: Any) -> np.ndarray:
    """The kernel's output dequantised (data x its scale), against RMSNorm(hidden) x gamma."""
    h = np.asarray(hidden, np.float32)
    rms = np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + kargs.eps)
    return h / rms * np.asarray(gamma, np.float32)


def dequantize(out: np.ndarray) -> np.ndarray:
    """rmsnorm_quant's output [..., H + 4]: H fp8 values, then the fp32 scale's 4 bytes."""
    data = np.asarray(out[..., :-4], np.float32)
    scale = np.ascontiguousarray(out[..., -4:]).view(np.float32)
    return data * scale

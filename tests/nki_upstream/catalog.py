"""The 63 public NKI kernels the conformance harness runs unmodified, with inputs and a numpy
reference for each (the kernel file's own, where it has one).

Sources (docs/nki-support.md "Upstream kernels"): nki-samples at 7af4e4d, its
``src/nki_samples/reference/`` (11), ``src/nki_samples/tutorials/`` (31) and the five top-level
``contributed/`` kernels (5); the NKI tutorial code of the Neuron SDK docs (13); the three
runnable kernels of Stanford CS149's Trainium assignment (3; read from a local mirror, the
repository has no licence to copy it). Shapes are the kernel files' own where they are small,
else the smallest their assertions allow; ``slow`` marks the ones that take long to simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from tests.nki_upstream import refs

SAMPLES = "nki-samples/src/nki_samples/"
REF, TUT = SAMPLES + "reference/", SAMPLES + "tutorials/"
CONTRIB = "nki-samples/contributed/"
SDK = "aws-neuron-sdk/nki/examples/"
#: The course's files: (mirror repository, path) — no licence to vendor them.
COURSE = ("stanford-cs149+asst4-trainium2", "part1/kernels.py")


@dataclass
class Case:
    """One kernel: ``file`` (under third_party/, or COURSE), the ``kernel`` name, ``inputs()``
    -> (args, kwargs), ``reference(*args, **kwargs)`` -> the expected output(s)."""

    id: str
    file: Any
    kernel: str
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    reference: Callable[..., Any]
    grid: tuple[int, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    slow: bool = False
    #: Simulator options (e.g. ``config="trn2"``).
    options: dict[str, Any] = field(default_factory=dict)
    #: Applied to the kernel's output before the comparison (e.g. dequantisation).
    post: Callable[[Any], Any] | None = None
    #: ``kernel`` is a host function that launches the kernel itself (the SPMD tutorials).
    host: bool = False


RNG = np.random.default_rng(29)


def rand(*shape: int, dtype: Any = np.float32, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    return (RNG.random(shape) * (hi - lo) + lo).astype(np.float32).astype(dtype)


def f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- references ------------------------------------------------------------------------------
def add_ref(a: np.ndarray, b: np.ndarray, *rest: Any) -> np.ndarray:
    return (f32(a) + f32(b)).astype(a.dtype)


def matmul_ref(lhsT: np.ndarray, rhs: np.ndarray, *rest: Any, **kw: Any) -> np.ndarray:
    return (f32(lhsT).T @ f32(rhs)).astype(lhsT.dtype)


def transpose2d_ref(a: np.ndarray, shape2d: tuple[int, int]) -> np.ndarray:
    p = a.shape[0]
    x, y = shape2d
    return np.transpose(a.reshape(p, x, y), (0, 2, 1)).reshape(p, x * y)


def avgpool_ref(a: np.ndarray, pool: int) -> np.ndarray:
    c, h, w = a.shape
    v = f32(a).reshape(c, h // pool, pool, w // pool, pool)
    return v.mean(axis=(2, 4)).astype(a.dtype)


def mamba_ref(delta, u, A, B, C):
    delta, u, A, B, C = map(f32, (delta, u, A, B, C))
    batch, channels, seq = delta.shape
    out = np.zeros((batch, channels, seq), np.float32)
    for b in range(batch):
        for s in range(A.shape[1]):
            dA = np.exp(delta[b] * A[:, s : s + 1])
            dBu = delta[b] * u[b] * B[b, s][None, :]
            state = np.zeros(channels, np.float32)
            for t in range(seq):
                state = dA[:, t] * state + dBu[:, t]
                out[b, :, t] += state * C[b, s, t]
    return out


def layernorm_ref(x, eps, gamma, beta):
    x = f32(x)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rmsnorm_ref(a, g):
    a = f32(a)
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g


def sd_attention_ref(q, k, v, **kw):
    q, k, v = map(f32, (q, k, v))
    return softmax((q * 0.125) @ k.T) @ v


def attention_tutorial_ref(q, k, v):
    q, k, v = map(f32, (q, k, v))
    return softmax(q.T @ k, axis=1) @ v.T


def maxpool_ref(x, pool):
    windows = np.lib.stride_tricks.sliding_window_view(f32(x), (pool, pool))
    return windows.max(axis=(2, 3))


def bilinear_2x_ref(src):
    import torch

    return torch.nn.functional.interpolate(
        torch.from_numpy(f32(src)), scale_factor=2, mode="bilinear"
    ).numpy()


def trilinear_2x_ref(src):
    import torch

    return torch.nn.functional.interpolate(
        torch.from_numpy(f32(src)), scale_factor=2, mode="trilinear"
    ).numpy()


def contributed_matmul_ref(A, B, *rest):
    return (f32(A).T @ f32(B)).astype(A.dtype)


def sd_ref_batched(q, k, v, **kw):
    """reference/attention.py fused_self_attn_for_SD_small_head_size: q [b, d, s], k [b, s, d],
    v [b, s, d] -> [b, s, d] (the unit test's golden)."""
    q, k, v = map(f32, (q, k, v))
    return np.stack([softmax((q[i] * 0.125).T @ k[i].T) @ v[i] for i in range(q.shape[0])])


def allocated_sd_ref(q, k, v):
    q, k, v = map(f32, (q, k, v))
    return np.stack([(softmax((q[i] * 0.125).T @ k[i]) @ v[i]).T for i in range(q.shape[0])])


def rms_qkv_ref(hidden, weights):
    h = f32(hidden)
    rms = np.sqrt(np.mean(h * h, axis=-1, keepdims=True))
    return (h / (rms + 1e-6)) @ f32(weights)


def flash_fwd_ref(q, k, v, seed, use_causal_mask=True, mixed_precision=True, **kw):
    """o (bs, heads, seq_q, d) and, as the kernel returns in training (its default config),
    the rows' log-sum-exp as (bs, heads, 128, seq_q // 128): row t * 128 + p at [p, t]."""
    q, k, v = map(f32, (q, k, v))
    b, h, d, s = q.shape
    out = np.zeros((b, h, s, d), np.float32)
    lse = np.zeros((b, h, 128, s // 128), np.float32)
    for i in range(b):
        for j in range(h):
            score = (q[i, j] / np.sqrt(d)).T @ k[i, j]
            if use_causal_mask:
                score[np.triu_indices(s, 1)] = -9984.0
            out[i, j] = softmax(score) @ v[i, j]
            peak = score.max(axis=1)
            rows = peak + np.log(np.exp(score - peak[:, None]).sum(axis=1))
            lse[i, j] = rows.reshape(s // 128, 128).T
    return out, lse


def resize_nearest_ref(data, out_shape):
    _, in_h, in_w, _ = data.shape
    _, out_h, out_w, _ = out_shape
    hi = np.floor(np.arange(out_h) * (in_h / out_h)).astype(int)
    wi = np.floor(np.arange(out_w) * (in_w / out_w)).astype(int)
    return data[:, hi][:, :, wi]


def adaptive_pool_ref(x, output_size):
    n, c, h, w = x.shape
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            hs, he = (i * h) // oh, ((i + 1) * h + oh - 1) // oh
            ws, we = (j * w) // ow, ((j + 1) * w + ow - 1) // ow
            out[:, :, i, j] = f32(x)[:, :, hs:he, ws:we].mean(axis=(2, 3))
    return out


def select_scatter_ref(operand, source):
    return refs.select_and_scatter(f32(operand), f32(source))


def rotary_ref(q, k, cos, sin):
    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    q, k, cos, sin = map(f32, (q, k, cos, sin))
    cos, sin = cos[:, None], sin[:, None]
    return np.stack([q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin])


def bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


# ---- the catalog -----------------------------------------------------------------------------
def _attn_inputs(seqlen: int) -> Callable[[], Any]:
    return lambda: (
        (rand(128, seqlen, lo=-1), rand(128, seqlen, lo=-1), rand(128, seqlen, lo=-1)),
        {},
    )


_MATMUL_TUTORIAL = [
    ("basic", "nki_matmul_basic_", lambda: ((rand(128, 64), rand(128, 512)), {})),
    ("tiled", "nki_matmul_tiled_", lambda: ((rand(256, 256), rand(256, 1024)), {})),
    ("hoist_load", "nki_matmul_hoist_load_", lambda: ((rand(256, 256), rand(256, 1024)), {})),
    (
        "block_free_dimension",
        "nki_matmul_block_free_dimension_",
        lambda: ((rand(256, 256), rand(256, 1024)), {}),
    ),
    (
        "fully_optimized",
        "nki_matmul_fully_optimized_",
        lambda: (
            (rand(256, 256), rand(256, 2048)),
            {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 2},
        ),
    ),
]


def _mamba_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    batch, channels, seq, state = 1, 256, 512, 2
    return (
        (
            rand(batch, channels, seq, lo=0.0, hi=0.2),
            rand(batch, channels, seq),
            -rand(channels, state),
            rand(batch, state, seq),
            rand(batch, state, seq),
        ),
        {},
    )


def cases() -> list[Case]:
    out: list[Case] = [
        # -- nki-samples reference/ (11)
        Case(
            "reference/allocated_attention",
            REF + "allocated_attention.py",
            "allocated_fused_self_attn_for_SD_small_head_size",
            lambda: ((rand(1, 128, 4096), rand(1, 128, 4096), rand(1, 4096, 128)), {}),
            allocated_sd_ref,
            grid=(1,),
            atol=1e-2,
            slow=True,
        ),
        Case(
            "reference/allocated_fused_linear",
            REF + "allocated_fused_linear.py",
            "allocated_fused_rms_norm_qkv",
            lambda: ((rand(1, 128, 512, dtype=np.float16), rand(512, 512, dtype=np.float16)), {}),
            rms_qkv_ref,
            atol=1e-2,
            rtol=1e-2,
        ),
        Case(
            "reference/attention.flash_fwd",
            REF + "attention.py",
            "flash_fwd",
            lambda: (
                (
                    rand(1, 1, 128, 4096, lo=-1),
                    rand(1, 1, 128, 4096, lo=-1),
                    rand(1, 1, 4096, 128, lo=-1),
                    None,
                ),
                {"use_causal_mask": True, "mixed_precision": True},
            ),
            flash_fwd_ref,  # v (bs, heads, seq, d) and o (bs, heads, seq_q, d): the file's layouts
            grid=(1, 1),
            atol=1e-2,
            slow=True,
        ),
        Case(
            "reference/attention.flash_attn_bwd",
            REF + "attention.py",
            "flash_attn_bwd",
            refs.flash_bwd_inputs,
            refs.flash_bwd,
            grid=(1, 1),
            atol=1e-2,
            slow=True,
        ),
        Case(
            "reference/attention.fused_self_attn_for_SD_small_head_size",
            REF + "attention.py",
            "fused_self_attn_for_SD_small_head_size",
            lambda: ((rand(1, 128, 4096), rand(1, 4096, 128), rand(1, 4096, 128)), {}),
            sd_ref_batched,
            grid=(1,),
            atol=1e-2,
            slow=True,
        ),
        Case(
            "reference/double_row_matmul",
            REF + "double_row_matmul.py",
            "quantized_double_row_matmul",
            refs.double_row_inputs,
            refs.double_row_matmul,
            atol=1.0,
            rtol=2e-2,
            slow=True,
        ),
        Case(
            "reference/rmsnorm_quant",
            REF + "rmsnorm_quant/rmsnorm_quant.py",
            "rmsnorm_quant_kernel",
            refs.rmsnorm_quant_inputs,
            refs.rmsnorm_quant,
            atol=0.1,
            rtol=0.07,
            post=refs.dequantize,
        ),
        Case(
            "reference/tutorial.add_kernel_nx8x128x512",
            REF + "tutorial.py",
            "add_kernel_nx8x128x512",
            # n_elements ends on a whole row: masks keep boxes here (docs/nki-support.md)
            lambda: ((rand(2, 8, 128, 512), rand(2, 8, 128, 512), 2 * 8 * 128 * 512 - 3 * 512), {}),
            lambda a, b, n: np.where(np.arange(a.size).reshape(a.shape) < n, a + b, np.nan),
            grid=(2,),
            # the kernel leaves the output past n_elements unwritten (its mask): initcheck would
            # rightly report those bytes; the reference's NaN there are not compared
            options={"initcheck": False},
        ),
        Case(
            "reference/vision.select_and_scatter",
            REF + "vision.py",
            "select_and_scatter_kernel",
            lambda: ((rand(2, 64, 16, 16), rand(2, 64, 8, 8)), {}),
            select_scatter_ref,
            atol=1e-2,
        ),
        Case(
            "reference/vision.resize_nearest",
            REF + "vision.py",
            "resize_nearest_fixed_dma_kernel",
            lambda: ((rand(1, 30, 20, 256), (1, 59, 38, 256)), {}),
            resize_nearest_ref,
            grid=(1,),
        ),
        Case(
            "reference/vision.adaptive_avg_pool2d",
            REF + "vision.py",
            "adaptive_avg_pool2d_kernel",
            lambda: ((rand(1, 128, 13, 13), 6), {}),
            adaptive_pool_ref,
            atol=1e-5,
        ),
    ]
    # -- nki-samples tutorials/ (31)
    versions = ["v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11"]
    for v in versions:
        seqlen = 128 if v in ("v1", "v2") else 4096
        out.append(
            Case(
                f"tutorials/attention_fwd_performance.attn_fwd_{v}",
                TUT + "attention_fwd_performance/attention_kernels.py",
                f"attn_fwd_{v}",
                _attn_inputs(seqlen),
                attention_tutorial_ref,
                atol=1e-2,  # test_attention.py's own tolerance
                slow=seqlen > 128,
            )
        )
    out += [
        Case(
            "tutorials/average_pool2d",
            TUT + "average_pool2d/average_pool2d_nki_kernels.py",
            "tensor_avgpool_kernel",
            lambda: ((np.arange(2 * 6 * 6, dtype=np.float16).reshape(2, 6, 6), 2), {}),
            avgpool_ref,
            atol=0,
            rtol=0,
        ),
    ]
    for v in ("v1", "v2", "v3"):
        out.append(
            Case(
                f"tutorials/fused_mamba.mamba_{v}",
                TUT + "fused_mamba/mamba_nki_kernels.py",
                f"mamba_{v}",
                _mamba_inputs,
                mamba_ref,
                atol=1e-3,
            )
        )
    for v in ("v1", "v2"):
        out.append(
            Case(
                f"tutorials/layernorm.{v}",
                TUT + "layernorm/layernorm_nki_kernel.py",
                f"nki_layernorm_kernel_{v}",
                lambda: ((rand(256, 512), 1e-5, rand(512), rand(512)), {}),
                layernorm_ref,
                atol=1e-3,
            )
        )
    for name, fn, inputs in _MATMUL_TUTORIAL:
        out.append(
            Case(
                f"tutorials/matrix_multiplication.{name}",
                TUT + "matrix_multiplication/matrix_multiplication_nki_kernels.py",
                fn,
                inputs,
                matmul_ref,
                atol=1e-3,
            )
        )
    out += [
        Case(
            "tutorials/rmsnorm",
            TUT + "rmsnorm/rmsnorm_nki_kernels.py",
            "nki_rmsnorm_kernel",
            lambda: ((rand(128, 512), rand(512)), {}),
            rmsnorm_ref,
            atol=1e-4,
            rtol=1e-2,
        ),
        Case(
            "tutorials/rotary",
            TUT + "rotary/rotary_nki_kernels.py",
            "nki_apply_rotary_embedding",
            lambda: (
                (
                    rand(1, 2, 128, 64, lo=-1),
                    rand(1, 2, 128, 64, lo=-1),
                    rand(1, 128, 64, lo=-1),
                    rand(1, 128, 64, lo=-1),
                ),
                {},
            ),
            rotary_ref,
            grid=(1, 2),
            atol=1e-4,
        ),
        Case(
            "tutorials/sd_attention",
            TUT + "sd_attention/sd_attention_nki_kernels.py",
            "fused_self_attn_for_SD_small_head_size",
            lambda: ((rand(4096, 64), rand(4096, 64), rand(4096, 64)), {}),
            sd_attention_ref,
            atol=1e-5,
            rtol=1e-3,
            slow=True,
        ),
        Case(
            "tutorials/softmax",
            TUT + "softmax/softmax_nki_kernels.py",
            "nki_softmax_kernel",
            lambda: ((rand(128, 512, lo=-1),), {}),
            lambda a: softmax(f32(a), axis=1),
            atol=1e-5,
        ),
        Case(
            "tutorials/tensor_addition",
            TUT + "tensor_addition/tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda: ((rand(256, 1024, dtype=np.float16), rand(256, 1024, dtype=np.float16)), {}),
            add_ref,
            atol=1e-3,
            host=True,
        ),
        Case(
            "tutorials/spmd_tensor_addition",
            TUT + "tensor_addition/spmd_tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda: ((rand(256, 1024, dtype=np.float16), rand(256, 1024, dtype=np.float16)), {}),
            add_ref,
            atol=1e-3,
            host=True,
        ),
        Case(
            "tutorials/spmd_multiple_nc_tensor_addition",
            TUT + "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
            "nki_tensor_add_nc2",
            lambda: ((rand(512, 2048, dtype=np.float16), rand(512, 2048, dtype=np.float16)), {}),
            add_ref,
            atol=1e-3,
            host=True,
        ),
        Case(
            "tutorials/transpose2d",
            TUT + "transpose2d/transpose2d_nki_kernels.py",
            "tensor_transpose2D_kernel_",
            lambda: ((np.arange(5 * 3 * 4, dtype=np.int8).reshape(5, 12), (3, 4)), {}),
            transpose2d_ref,
            atol=0,
            rtol=0,
        ),
        # -- nki-samples contributed/ (5)
        Case(
            "contributed/interpolate_bilinear_fwd",
            CONTRIB + "interpolate_bilinear_fwd.py",
            "interpolate_bilinear_2x_fwd",
            lambda: ((rand(2, 64, 32, 32),), {}),
            bilinear_2x_ref,
            atol=1e-4,
            rtol=1e-2,
        ),
        Case(
            "contributed/interpolate_trilinear_fwd",
            CONTRIB + "interpolate_trilinear_fwd.py",
            "interpolate_trilinear_2x_fwd",
            lambda: ((rand(2, 64, 8, 8, 8),), {}),
            trilinear_2x_ref,
            atol=1e-4,
            rtol=1e-2,
        ),
        Case(
            "contributed/matmul",
            CONTRIB + "matmul.py",
            "matmul",
            lambda: ((rand(1024, 512, dtype=np.float16), rand(1024, 2048, dtype=np.float16)), {}),
            contributed_matmul_ref,
            atol=1e-1,
            rtol=1e-2,
        ),
        Case(
            "contributed/maxpooling",
            CONTRIB + "maxpooling.py",
            "max_pooling_2d_stride_1",
            lambda: ((rand(200, 200), 3), {}),
            maxpool_ref,
            atol=1e-6,
            # its last row tile reduces two rows it never loaded (and never stores them)
            options={"initcheck": False},
        ),
        Case(
            "contributed/pipelined_attention",
            CONTRIB + "pipelined_attention.py",
            "flash_fwd",
            None,  # type: ignore[arg-type]  # the file runs and checks itself at import
            None,  # type: ignore[arg-type]
            slow=True,
        ),
    ]
    # -- SDK docs tutorial code (13)
    out += [
        Case(
            "sdk/getting_started_baremetal",
            SDK + "getting_started_baremetal.py",
            "nki_tensor_add_kernel",
            lambda: ((np.ones((4, 3), np.float16), np.ones((4, 3), np.float16)), {}),
            add_ref,
            atol=0,
        ),
        Case(
            "sdk/simulate/nki_simulate_example",
            SDK + "simulate/nki_simulate_example.py",
            "add_kernel",
            lambda: ((rand(128, 512), rand(128, 512)), {}),
            add_ref,
            atol=1e-6,
        ),
        Case(
            "sdk/tensor_addition",
            SDK + "tensor_addition/tensor_addition_nki_kernels.py",
            "nki_tensor_add",
            lambda: ((rand(256, 1024, dtype=np.float16), rand(256, 1024, dtype=np.float16)), {}),
            add_ref,
            atol=1e-3,
            host=True,
        ),
        Case(
            "sdk/transpose2d",
            SDK + "transpose2d/transpose2d_nki_kernels.py",
            "tensor_transpose2D_kernel_",
            lambda: ((np.arange(5 * 3 * 4, dtype=np.int8).reshape(5, 12), (3, 4)), {}),
            transpose2d_ref,
            atol=0,
            rtol=0,
        ),
        Case(
            "sdk/average_pool2d",
            SDK + "average_pool2d/average_pool2d_nki_kernels.py",
            "tensor_avgpool_kernel",
            lambda: ((np.arange(2 * 6 * 6, dtype=np.float16).reshape(2, 6, 6), 2), {}),
            avgpool_ref,
            atol=0,
            rtol=0,
        ),
    ]
    for v in ("v1", "v2", "v3"):
        out.append(
            Case(
                f"sdk/fused_mamba.mamba_{v}",
                SDK + "fused_mamba/mamba_nki_kernels.py",
                f"mamba_{v}",
                _mamba_inputs,
                mamba_ref,
                atol=1e-3,
            )
        )
    for name, fn, inputs in _MATMUL_TUTORIAL:
        out.append(
            Case(
                f"sdk/matrix_multiplication.{name}",
                SDK + "matrix_multiplication/matrix_multiplication_nki_kernels.py",
                fn,
                inputs,
                matmul_ref,
                atol=1e-3,
            )
        )
    # -- the course (3)
    out += [
        Case(
            "course/vector_add_naive",
            COURSE,
            "vector_add_naive",
            lambda: ((rand(128), rand(128)), {}),
            add_ref,
            atol=1e-6,
        ),
        Case(
            "course/vector_add_tiled",
            COURSE,
            "vector_add_tiled",
            lambda: ((rand(256), rand(256)), {}),
            add_ref,
            atol=1e-6,
        ),
        Case(
            "course/vector_add_stream",
            COURSE,
            "vector_add_stream",
            lambda: ((rand(128 * 64), rand(128 * 64)), {}),
            add_ref,
            atol=1e-6,
        ),
    ]
    return out

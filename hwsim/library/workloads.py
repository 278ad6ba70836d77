"""The library kernels as named workloads (``hwsim run softmax``): default shape, seeded inputs,
and a numerics check against an independent NumPy reference (fp64, from the same
dtype-rounded inputs), with a tolerance that follows the kernel's compute dtype.

``WORKLOADS`` is the table of built-in names that ``hwsim.workloads.resolve`` looks names up in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from hwsim.config.schema import HardwareConfig
from hwsim.lang import Kernel
from hwsim.library.attention import attention
from hwsim.library.conv import conv2d_3x3
from hwsim.library.matmul import matmul_basic, matmul_blocked, matmul_optimized
from hwsim.library.mlp import mlp
from hwsim.library.norm import layernorm, rmsnorm
from hwsim.library.softmax import softmax
from hwsim.library.tutorial_matmul import matmul_block_free, matmul_hoisted, matmul_tiled
from hwsim.program import Program
from hwsim.workloads.registry import NumericsVerdict, Workload

BF16 = ml_dtypes.bfloat16
#: Allowed max |error| as a share of max |reference|, per compute dtype: a few roundings of the
#: dtype (bf16 keeps 8 bits, so 2^-8 per rounding) on top of fp32 accumulation.
RELATIVE_TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(BF16): 3e-2}


@dataclass(frozen=True)
class LibraryWorkload:
    """A kernel with a default problem: inputs(seed) -> args; reference(*args) -> expected."""

    name: str
    description: str
    kernel: Kernel
    inputs: Callable[[np.random.Generator], tuple[Any, ...]]
    reference: Callable[..., np.ndarray]
    flops: int
    kwargs: dict[str, Any] = field(default_factory=dict)

    def args(self, seed: int = 0) -> tuple[Any, ...]:
        return self.inputs(np.random.default_rng(seed))

    def build(self, config: HardwareConfig, seed: int = 0) -> Program:
        program = self.kernel.build(*self.args(seed), config=config, **self.kwargs).program
        program.meta.update(workload=self.name, model_flops=self.flops)
        return program

    def check(self, outputs: dict[str, np.ndarray], seed: int = 0) -> NumericsVerdict:
        args = self.args(seed)
        expected = self.reference(*(_f64(a) for a in args), **self.kwargs)
        got = outputs["out"].astype(np.float64)
        err = float(np.max(np.abs(got - expected)))
        tolerance = RELATIVE_TOLERANCE[np.dtype(args[0].dtype)] * float(np.max(np.abs(expected)))
        return NumericsVerdict(err, err <= tolerance, tolerance)

    def workload(self) -> Workload:
        return Workload(self.name, self.description, self.build, self.check)


def _f64(value: Any) -> Any:
    return value.astype(np.float64) if isinstance(value, np.ndarray) else value


def _normal(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: float = 1.0
) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---- references (NumPy, fp64) ---------------------------------------------------------------
def matmul_reference(lhsT: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhsT.T @ rhs


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_reference(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> np.ndarray:
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rmsnorm_reference(x: np.ndarray, gamma: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * gamma


_ERF = np.vectorize(math.erf)


def mlp_reference(
    x: np.ndarray, w1: np.ndarray, w2: np.ndarray, activation: str = "gelu"
) -> np.ndarray:
    h = x @ w1
    if activation == "gelu":
        h = 0.5 * h * (1.0 + _ERF(h / math.sqrt(2.0)))
    elif activation == "silu":
        h = h / (1.0 + np.exp(-h))
    elif activation == "relu":
        h = np.maximum(h, 0.0)
    else:
        h = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
    return h @ w2


def attention_reference(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True, scale: float | None = None
) -> np.ndarray:
    scores = q @ k.T * (1.0 / math.sqrt(q.shape[1]) if scale is None else scale)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    return softmax_reference(scores) @ v


def conv2d_3x3_reference(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None
) -> np.ndarray:
    n, _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, :, dy : dy + h, dx : dx + wd]
            out += np.einsum("oc,nchw->nohw", w[:, :, dy, dx], window)
    return out if bias is None else out + bias[None, :, None, None]


# ---- the default problems -------------------------------------------------------------------
def _matmul(kernel: Kernel, description: str) -> LibraryWorkload:
    k, m, n = 1024, 512, 1024
    return LibraryWorkload(
        kernel.name,
        f"{description}: lhsT [{k}, {m}] x rhs [{k}, {n}] bf16",
        kernel,
        lambda rng: (_normal(rng, (k, m), BF16), _normal(rng, (k, n), BF16)),
        matmul_reference,
        2 * m * k * n,
    )


ROWS, COLS = 1024, 1024
T, D, F = 512, 512, 2048
S, HEAD = 1024, 128
IMAGES, CHANNELS, SIDE = 1, 128, 32


def _row_norm(
    kernel: Kernel, reference: Callable[..., np.ndarray], params: tuple[str, ...]
) -> LibraryWorkload:
    """A norm of each row of x [ROWS, COLS] fp32, with per-column ``params`` (gamma, beta)."""
    return LibraryWorkload(
        kernel.name,
        f"{kernel.name} of [{ROWS}, {COLS}] fp32 with {', '.join(params)}",
        kernel,
        lambda rng: (
            _normal(rng, (ROWS, COLS), np.float32, 2.0),
            *(_normal(rng, (COLS,), np.float32) for _ in params),
        ),
        reference,
        0,
    )


WORKLOADS = [
    _matmul(matmul_basic, "matmul, one tile at a time"),
    _matmul(matmul_blocked, "matmul with stationary reuse"),
    _matmul(matmul_optimized, "matmul as nki_matmul_fully_optimized_"),
    _matmul(matmul_tiled, "matmul as nki_matmul_tiled_ (HARDWARE.md §5 V1a)"),
    _matmul(matmul_hoisted, "matmul as nki_matmul_hoist_load_ (V1b)"),
    _matmul(matmul_block_free, "matmul as nki_matmul_block_free_dimension_ (V1c)"),
    LibraryWorkload(
        "softmax",
        f"row softmax of [{ROWS}, {COLS}] fp32",
        softmax,
        lambda rng: (_normal(rng, (ROWS, COLS), np.float32, 3.0),),
        softmax_reference,
        0,
    ),
    _row_norm(layernorm, layernorm_reference, ("gamma", "beta")),
    _row_norm(rmsnorm, rmsnorm_reference, ("gamma",)),
    LibraryWorkload(
        "mlp",
        f"GELU MLP x [{T}, {D}] @ w1 [{D}, {F}] @ w2 [{F}, {D}] bf16",
        mlp,
        lambda rng: (
            _normal(rng, (T, D), BF16),
            _normal(rng, (D, F), BF16, 1 / math.sqrt(D)),
            _normal(rng, (F, D), BF16, 1 / math.sqrt(F)),
        ),
        mlp_reference,
        2 * T * (D * F + F * D),
        {"activation": "gelu"},
    ),
    LibraryWorkload(
        "attention",
        f"causal flash attention, one head, q/k/v [{S}, {HEAD}] bf16",
        attention,
        lambda rng: tuple(_normal(rng, (S, HEAD), BF16) for _ in range(3)),
        attention_reference,
        2 * S * S * HEAD,  # q k^T and p v, each S*S*d multiply-adds, halved by the causal mask
    ),
    LibraryWorkload(
        "conv2d_3x3",
        f"3x3 conv, x [{IMAGES}, {CHANNELS}, {SIDE}, {SIDE}], w [{CHANNELS}, {CHANNELS}, 3, 3] "
        "bf16, with bias",
        conv2d_3x3,
        lambda rng: (
            _normal(rng, (IMAGES, CHANNELS, SIDE, SIDE), BF16),
            _normal(rng, (CHANNELS, CHANNELS, 3, 3), BF16, 1 / math.sqrt(9 * CHANNELS)),
            _normal(rng, (CHANNELS,), BF16),
        ),
        conv2d_3x3_reference,
        2 * IMAGES * CHANNELS * CHANNELS * 9 * SIDE * SIDE,
    ),
]

"""Precision of a bridge run (compute and accumulation dtypes) and the one tolerance table.

``compute`` is the dtype of on-chip operand tiles: loads cast to it (DMA casting, round to
nearest even), TensorE multiplies in it, and elementwise engines read it (they compute in fp32
internally [HARDWARE.md §3]). ``auto`` keeps each op's own dtype, which is what PyTorch does on the
CPU, so results match CPU up to rounding order. ``bf16`` on an fp32 model simulates running it in
bf16 on Trainium. Accumulation (PSUM, reduction accumulators, softmax statistics) is fp32: the only
PSUM accumulation dtype on NeuronCore-v2/v3 [HARDWARE.md §1.4].

Numerics are judged with the tolerance of the lowest-precision dtype the run computed in, from
``TOLERANCES``; there is no other table. A bf16/fp16 result off the CPU's is judged against the op
in float64 as well (``judged_with_exact``): it passes only if it is within that tolerance of the
exact result and no further from it than the CPU's own low-precision kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as hw_dtype

COMPUTE_CHOICES = ("auto", "fp32", "bf16", "fp16")
ACCUMULATE_CHOICES = ("fp32",)


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= atol * scale + rtol * |expected|, elementwise, where scale is the
    root-mean-square of the expected tensor (at least 1). Scaling atol by the tensor's size makes
    the check independent of the model's units and admits the summation-order differences of
    long reductions (a K=4096 matmul) in elements that happen to be near zero."""

    rtol: float
    atol: float


#: Tolerance by the dtype a result was computed in. fp32 is looser than torch.testing's default
#: (rtol 1.3e-6) because the simulator sums in another order (PSUM tiles of K <= 128, free-axis
#: reductions) and ScalarE functions are within one fp32 ulp, not correctly rounded. bf16/fp16
#: follow torch.testing's rtol with an atol that allows one rounding of values near 1.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(rtol=1e-5, atol=1e-5),
    "fp16": Tolerance(rtol=1e-3, atol=1e-3),
    "bf16": Tolerance(rtol=1.6e-2, atol=1e-2),
}
_RANK = {"fp32": 0, "fp16": 1, "bf16": 2}  # higher = less precise


@dataclass(frozen=True)
class Precision:
    """compute: 'auto' | 'fp32' | 'bf16' | 'fp16'; accumulate: 'fp32'."""

    compute: str = "auto"
    accumulate: str = "fp32"

    def __post_init__(self) -> None:
        if self.compute not in COMPUTE_CHOICES:
            raise ValueError(
                f"precision compute={self.compute!r} is not one of {', '.join(COMPUTE_CHOICES)}"
            )
        if self.accumulate not in ACCUMULATE_CHOICES:
            raise ValueError(
                f"precision accumulate={self.accumulate!r}: PSUM accumulates in fp32 only "
                "(NeuronCore-v2/v3); use 'fp32'"
            )

    @classmethod
    def parse(cls, value: Precision | str | dict[str, Any] | None) -> Precision:
        """From a Precision, a compute dtype name ('bf16'), a dict of fields, or None (auto)."""
        if value is None:
            return cls()
        if isinstance(value, Precision):
            return value
        if isinstance(value, str):
            return cls(compute=_canonical(value))
        if isinstance(value, dict):
            unknown = set(value) - {"compute", "accumulate"}
            if unknown:
                raise ValueError(
                    f"precision has unknown keys {sorted(unknown)}; valid: compute, accumulate"
                )
            fields = {k: _canonical(str(v)) for k, v in value.items()}
            return cls(**fields)
        raise TypeError(f"precision must be a str, dict or Precision, not {type(value).__name__}")

    def tile_dtype(self, dtype: DType) -> DType:
        """The on-chip dtype for operands of an op whose own dtype is ``dtype``."""
        if self.compute == "auto" or not dtype.is_float:
            return dtype
        return hw_dtype(self.compute)

    def result_dtype_name(self, dtype: torch.dtype) -> str:
        """The least precise dtype a result of torch dtype ``dtype`` went through."""
        own = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
            dtype, "fp32"
        )
        if self.compute == "auto":
            return own
        return max(own, self.compute, key=lambda name: _RANK.get(name, 0))

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        return TOLERANCES[self.result_dtype_name(dtype)]

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


#: torch dtype of each compute dtype name ('auto' has none: each op keeps its own).
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cast_floats(tree: Any, dtype: torch.dtype | None) -> Any:
    """``tree`` (args, a pytree) with its floating tensors in ``dtype`` (as is for None): the
    inputs of a CPU reference run at a given precision."""
    if dtype is None:
        return tree
    from torch.utils import _pytree as pytree

    return pytree.tree_map_only(
        torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t, tree
    )


def _canonical(name: str) -> str:
    aliases = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
    return aliases.get(name, name)


@dataclass(frozen=True)
class ErrorStats:
    """How far ``actual`` is from ``expected`` (both compared in fp64)."""

    max_abs: float
    max_rel: float
    mismatched: int  # elements outside the tolerance
    elements: int
    rtol: float
    atol: float
    #: The output was of tiny magnitude (its RMS below ``atol``), so it was judged relative to
    #: that magnitude (``compare``), not with the absolute tolerance every value would pass.
    relative: bool = False
    #: Off the CPU, yet judged correct against the op in float64 (``judged_with_exact``): the
    #: largest distance of the simulated result and of the CPU's to that exact result.
    exact_max_abs: float | None = None
    cpu_exact_max_abs: float | None = None

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def compare(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> ErrorStats:
    """Elementwise comparison; NaNs in the same places count as equal, a shape mismatch fails."""
    if tuple(actual.shape) != tuple(expected.shape):
        n = max(actual.numel(), expected.numel())
        return ErrorStats(math.inf, math.inf, n, n, tolerance.rtol, tolerance.atol)
    if actual.numel() == 0:
        return ErrorStats(0.0, 0.0, 0, 0, tolerance.rtol, tolerance.atol)
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    same = (torch.isnan(a) & torch.isnan(e)) | (a == e)  # also equal infinities
    diff = torch.where(same, torch.zeros_like(a), (a - e).abs())
    diff = torch.nan_to_num(diff, nan=math.inf, posinf=math.inf)
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float32).tiny)
    finite = e[torch.isfinite(e)]
    rms = float(finite.square().mean().sqrt()) if finite.numel() else 1.0
    # An output whose RMS is below atol would pass with any values of its magnitude (1e-10
    # against 1e-5): it is judged relative to its RMS instead, the absolute bound scaled down
    # to it (max(rtol, atol) x RMS; an all-zero output stays absolute).
    relative = 0.0 < rms < tolerance.atol
    if relative:
        floor = max(tolerance.rtol, tolerance.atol) * rms
    else:
        floor = tolerance.atol * max(1.0, rms)
    # where a NaN or an infinity is expected, the bound is NaN or inf: only the same value passes
    bad = (diff > floor + tolerance.rtol * e.abs()) | (~same & ~torch.isfinite(e))
    return ErrorStats(
        float(diff.max()),
        float(rel.max()),
        int(bad.sum()),
        a.numel(),
        tolerance.rtol,
        tolerance.atol,
        relative,
    )


def judged_with_exact(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tolerance: Tolerance,
    exact: Callable[[], torch.Tensor | None],
) -> ErrorStats:
    """``compare``, with the op in float64 as the arbiter when a bf16/fp16 result is off the CPU.

    The CPU's own low-precision kernel rounds too: where the exact result is 0 or tiny (a
    cancellation such as the layer norm of one element) its output is rounding noise, and the
    tiny-output rule of ``compare`` then fails a simulator that computed the exact value. Such a
    result passes only if it is within the tolerance of ``exact()`` (the op on the same inputs in
    float64, None when the op refuses float64) rounded to its dtype, and no further from it than
    the CPU's result is. Both distances are kept in the stats, so a report shows why it passed.
    """
    stats = compare(actual, expected, tolerance)
    if stats.ok or actual.dtype not in (torch.bfloat16, torch.float16):
        return stats
    wide = exact()
    if wide is None or tuple(wide.shape) != tuple(actual.shape):
        return stats
    truth = wide.detach().to(torch.float64)
    if not compare(actual, truth.to(actual.dtype), tolerance).ok:
        return stats
    ours = _max_distance(actual, truth)
    theirs = _max_distance(expected, truth)
    if ours > theirs:
        return stats
    return replace(stats, mismatched=0, exact_max_abs=ours, cpu_exact_max_abs=theirs)


def lazy_leaves(outputs: Callable[[], Any] | None) -> Callable[[int], torch.Tensor | None]:
    """Tensor leaf i of the tree ``outputs()`` returns (None: no tree, or no tensor there).
    ``outputs`` is called on the first lookup only: an arbiter's run costs nothing unless an
    output needs it."""
    from torch.utils import _pytree as pytree

    leaves: list[Any] | None = None

    def leaf(i: int) -> torch.Tensor | None:
        nonlocal leaves
        if outputs is None:
            return None
        if leaves is None:
            tree = outputs()
            leaves = [] if tree is None else pytree.tree_leaves(tree)
        found = leaves[i] if i < len(leaves) else None
        return found if isinstance(found, torch.Tensor) else None

    return leaf


def _max_distance(values: torch.Tensor, truth: torch.Tensor) -> float:
    """The largest |values - truth| (NaNs in the same places count as equal)."""
    v = values.detach().to(torch.float64)
    same = (torch.isnan(v) & torch.isnan(truth)) | (v == truth)
    diff = torch.where(same, torch.zeros_like(v), (v - truth).abs())
    return float(torch.nan_to_num(diff, nan=math.inf).max()) if diff.numel() else 0.0

"""Precision of a bridge run — Neuron's auto-cast — and the one tolerance table.

The options are those of ``neuronx-cc`` (``--auto-cast``, ``--auto-cast-type``; the compiler's
mixed-precision guide): ``auto_cast`` says which FP32 operations run in a lower-precision dtype,
``auto_cast_type`` which one.

- ``"none"``: every op in the dtypes the model gives.
- ``"matmult"`` (the front doors' default, as the compiler's): the FP32 inputs of operations that
  run on TensorE (matmuls, batched matmuls, convolutions, attention's two products) are cast to
  ``auto_cast_type``; TensorE accumulates in fp32 (PSUM), and everything else keeps its dtype.
- ``"all"``: every FP32 operation's operand tiles are in ``auto_cast_type`` (VectorE/ScalarE
  still compute in fp32 internally and cast on the way in and out [HARDWARE.md §3]).

Only FP32 operations are cast (a bf16 or fp16 model keeps its dtypes), and the graph's inputs and
outputs keep their dtypes, as the compiler preserves the framework's i/o types. Constants that
feed a cast operation are cast once, when the graph is compiled (``passes.prepare_constants``).
``auto_cast_type``: ``bf16``, ``fp16``, ``tf32`` (fp32 storage, 10-bit mantissa, TensorE at the
bf16 rate) or ``fp8_e4m3``. Accumulation (PSUM, reduction accumulators, softmax statistics) is
fp32: the only PSUM accumulation dtype on NeuronCore-v2/v3 [HARDWARE.md §1.4].

Numerics are judged against the graph (or the model) run on the CPU with the same casts
(``bridge.auto_cast.reference_casts``), with the tolerance of the lowest-precision dtype each
result went through, from ``TOLERANCES``; there is no other table. A bf16/fp16 result off the
CPU's is judged against the op in float64 as well (``judged_with_exact``): it passes only if it
is within that tolerance of the exact result and no further from it than the CPU's own
low-precision kernel.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as hw_dtype

AUTO_CAST_MODES = ("none", "matmult", "all")
AUTO_CAST_TYPES = ("bf16", "fp16", "tf32", "fp8_e4m3")
ACCUMULATE_CHOICES = ("fp32",)
#: The spelling the compiler's reference page also uses for ``matmult``.
_MODE_ALIASES = {"matmul": "matmult"}


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
#: follow torch.testing's rtol with an atol that allows one rounding of values near 1; tf32 has
#: fp16's 10-bit mantissa; fp8_e4m3 (3-bit mantissa) allows one rounding of values near 1 (2**-3).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(rtol=1e-5, atol=1e-5),
    "tf32": Tolerance(rtol=1e-3, atol=1e-3),
    "fp16": Tolerance(rtol=1e-3, atol=1e-3),
    "bf16": Tolerance(rtol=1.6e-2, atol=1e-2),
    "fp8_e4m3": Tolerance(rtol=1.25e-1, atol=1.25e-1),
}
_RANK = {"fp32": 0, "tf32": 1, "fp16": 1, "bf16": 2, "fp8_e4m3": 3}  # higher = less precise
_TORCH_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class Precision:
    """auto_cast: 'none' | 'matmult' | 'all'; auto_cast_type: 'bf16' | 'fp16' | 'tf32' |
    'fp8_e4m3'; accumulate: 'fp32' (module docstring). ``Precision()`` casts nothing (the
    lowering core's default); the front doors default to ``NEURON_DEFAULT``."""

    auto_cast: str = "none"
    auto_cast_type: str = "bf16"
    accumulate: str = "fp32"

    def __post_init__(self) -> None:
        if self.auto_cast not in AUTO_CAST_MODES:
            raise ValueError(
                f"auto_cast={self.auto_cast!r} is not one of {', '.join(AUTO_CAST_MODES)} "
                "(neuronx-cc --auto-cast)"
            )
        if self.auto_cast_type not in AUTO_CAST_TYPES:
            raise ValueError(
                f"auto_cast_type={self.auto_cast_type!r} is not one of "
                f"{', '.join(AUTO_CAST_TYPES)} (neuronx-cc --auto-cast-type)"
            )
        if self.accumulate not in ACCUMULATE_CHOICES:
            raise ValueError(
                f"accumulate={self.accumulate!r}: PSUM accumulates in fp32 only "
                "(NeuronCore-v2/v3); use 'fp32'"
            )

    @classmethod
    def of(cls, auto_cast: Any = None, auto_cast_type: Any = None) -> Precision:
        """From the two option values (None: the front doors' default for that one)."""
        mode = NEURON_DEFAULT.auto_cast if auto_cast is None else auto_cast
        kind = NEURON_DEFAULT.auto_cast_type if auto_cast_type is None else auto_cast_type
        for name, value in (("auto_cast", mode), ("auto_cast_type", kind)):
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a str, not {type(value).__name__}")
        return cls(_MODE_ALIASES.get(mode, mode), _canonical(kind))

    @property
    def casts(self) -> bool:
        return self.auto_cast != "none"

    @property
    def cast_dtype(self) -> DType:
        return hw_dtype(self.auto_cast_type)

    def matmul_dtype(self, dtype: DType) -> DType:
        """The dtype TensorE multiplies operands of an op computing in ``dtype`` in."""
        if self.casts and dtype.name == "fp32":
            return self.cast_dtype
        return dtype

    def tile_dtype(self, dtype: DType) -> DType:
        """The on-chip dtype for operands of any other op whose own dtype is ``dtype``."""
        if self.auto_cast == "all" and dtype.name == "fp32":
            return self.cast_dtype
        return dtype

    def result_dtype_name(self, dtype: torch.dtype, *, cast: bool = True) -> str:
        """The least precise dtype a result of torch dtype ``dtype`` went through; ``cast``:
        whether an auto-cast op is among the ops it came from (``auto_cast.reference_casts``
        tracks it)."""
        own = _TORCH_NAMES.get(dtype, "fp32")
        if not (self.casts and cast):
            return own
        return max(own, self.auto_cast_type, key=lambda name: _RANK.get(name, 0))

    def tolerance(self, dtype: torch.dtype, *, cast: bool = True) -> Tolerance:
        return TOLERANCES[self.result_dtype_name(dtype, cast=cast)]

    def label(self) -> str:
        """'matmult/bf16', 'none'."""
        return self.auto_cast if not self.casts else f"{self.auto_cast}/{self.auto_cast_type}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


#: The front doors' default: neuronx-cc's own (``--auto-cast matmult --auto-cast-type bf16``).
NEURON_DEFAULT = Precision("matmult", "bf16")

#: The option this module replaced; passing it is one clear error (``retired_precision``).
RETIRED_OPTION = "precision"


def retired_precision(value: Any) -> ValueError:
    """The error for the retired ``precision`` option, saying what to write instead."""
    name = value if isinstance(value, str) else None
    if isinstance(value, dict):
        name = value.get("compute")
    name = _canonical(str(name)) if name is not None else None
    if name in ("bf16", "fp16"):
        instead = f"auto_cast='all', auto_cast_type='{name}'"
    else:
        instead = "auto_cast='none' (every op in the model's own dtypes)"
    return ValueError(
        f"the hwsim option precision={value!r} is retired: precision now follows neuronx-cc's "
        f"auto-cast. Write {instead}; auto_cast is 'none', 'matmult' (the default: FP32 "
        f"matmul/convolution inputs in auto_cast_type) or 'all', auto_cast_type one of "
        f"{', '.join(AUTO_CAST_TYPES)}"
    )


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
    aliases = {
        "float32": "fp32",
        "bfloat16": "bf16",
        "float16": "fp16",
        "half": "fp16",
        "tfloat32": "tf32",
        "float8_e4m3": "fp8_e4m3",
    }
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


#: Elements ``compare`` widens to float64 at a time. Whole outputs took about ten float64 copies
#: of themselves at once (GPT-2 small's embedding gradient: 3 GB, per rank of a DDP run on
#: threads); a chunk keeps that to a few MB and in the CPU's cache.
COMPARE_CHUNK_ELEMENTS = 1 << 20


def compare(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> ErrorStats:
    """Elementwise comparison; NaNs in the same places count as equal, a shape mismatch fails.
    Judged in float64, ``COMPARE_CHUNK_ELEMENTS`` at a time."""
    if tuple(actual.shape) != tuple(expected.shape):
        n = max(actual.numel(), expected.numel())
        return ErrorStats(math.inf, math.inf, n, n, tolerance.rtol, tolerance.atol)
    if actual.numel() == 0:
        return ErrorStats(0.0, 0.0, 0, 0, tolerance.rtol, tolerance.atol)
    flat_a, flat_e = actual.detach().reshape(-1), expected.detach().reshape(-1)
    chunks = range(0, flat_a.numel(), COMPARE_CHUNK_ELEMENTS)
    pieces = [(start, start + COMPARE_CHUNK_ELEMENTS) for start in chunks]
    squares, finite = 0.0, 0
    for start, end in pieces:
        e = flat_e[start:end].to(torch.float64)
        kept = e[torch.isfinite(e)]
        squares, finite = squares + float(kept.square().sum()), finite + kept.numel()
    rms = math.sqrt(squares / finite) if finite else 1.0
    relative, floor = _bound(rms, tolerance)
    diffs, rels, bad = [], [], 0
    for start, end in pieces:
        a, e = flat_a[start:end].to(torch.float64), flat_e[start:end].to(torch.float64)
        outside, diff = _outside_bound(a, e, floor, tolerance)
        diffs.append(diff.max())
        rels.append((diff / e.abs().clamp_min(torch.finfo(torch.float32).tiny)).max())
        bad += int(outside.sum())
    return ErrorStats(
        float(torch.stack(diffs).max()),  # a NaN in any chunk is the maximum, as in one tensor
        float(torch.stack(rels).max()),
        bad,
        actual.numel(),
        tolerance.rtol,
        tolerance.atol,
        relative,
    )


def _bound(rms: float, tolerance: Tolerance) -> tuple[bool, float]:
    """Whether an output of this RMS is judged relative to it, and the absolute part of the
    bound. An output whose RMS is below atol would pass with any values of its magnitude (1e-10
    against 1e-5): it is judged relative to its RMS instead, the absolute bound scaled down to it
    (max(rtol, atol) x RMS; an all-zero output stays absolute)."""
    relative = 0.0 < rms < tolerance.atol
    if relative:
        return True, max(tolerance.rtol, tolerance.atol) * rms
    return False, tolerance.atol * max(1.0, rms)


def _outside_bound(
    a: torch.Tensor, e: torch.Tensor, floor: float, tolerance: Tolerance
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element of ``a`` (float64), whether it is outside ``floor + rtol |e|`` of ``e``, and
    the distances (NaN against NaN and equal infinities: 0)."""
    same = (torch.isnan(a) & torch.isnan(e)) | (a == e)  # also equal infinities
    diff = torch.where(same, torch.zeros_like(a), (a - e).abs())
    diff = torch.nan_to_num(diff, nan=math.inf, posinf=math.inf)
    # where a NaN or an infinity is expected, the bound is NaN or inf: only the same value passes
    bad = (diff > floor + tolerance.rtol * e.abs()) | (~same & ~torch.isfinite(e))
    return bad, diff


def _outside(
    a: torch.Tensor, e: torch.Tensor, tolerance: Tolerance
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Per element of ``a`` (float64), whether it is outside ``tolerance`` of ``e``; the
    distances; whether the bound was relative to ``e``'s RMS (``compare``)."""
    finite = e[torch.isfinite(e)]
    rms = float(finite.square().mean().sqrt()) if finite.numel() else 1.0
    relative, floor = _bound(rms, tolerance)
    bad, diff = _outside_bound(a, e, floor, tolerance)
    return bad, diff, relative


def judged_with_exact(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tolerance: Tolerance,
    exact: Callable[[], torch.Tensor | None],
    *,
    cast: bool = False,
) -> ErrorStats:
    """``compare``, with a more precise run as the arbiter when a low-precision result is off
    the CPU's.

    The CPU's own low-precision kernel rounds too: where the exact result is 0 or tiny (a
    cancellation such as the layer norm of one element) its output is rounding noise, and the
    tiny-output rule of ``compare`` then fails a simulator that computed the exact value. Such a
    result passes only if it is within the tolerance of ``exact()`` (the op on the same inputs in
    float64, None when the op refuses float64) rounded to its dtype, and no further from it than
    the CPU's result is. Both distances are kept in the stats, so a report shows why it passed.

    ``cast``: the result went through auto-cast ops (``auto_cast``), whatever its dtype. The
    CPU reference with the same casts rounds where the simulator does, but not always at the
    same values: a sum in another order can round the other way before the next cast, and a
    fused kernel may round at another point of the same computation (flash attention casts the
    unnormalised probabilities); through many layers such differences exceed one rounding.
    ``exact()`` is then the computation without the casts, and an element off the reference
    passes only where it is no further from that than the reference is (``_judged_by_uncast``).
    """
    stats = compare(actual, expected, tolerance)
    if cast and not stats.ok:
        return _judged_by_uncast(actual, expected, tolerance, exact, stats)
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


#: Two fp32 runs of a cancellation (a result that is 0 in exact arithmetic and left with rounding
#: noise, such as the gradient of an attention key projection's bias, which the softmax cancels)
#: sum in different orders, so their noise differs by a small factor; the simulator's distance
#: from the float64 result must stay within this factor of the CPU's own.
CANCELLATION_NOISE_FACTOR = 8.0


def float64_copy(gm: Any) -> Any:
    """A copy of ``gm`` computing in float64 what it computes in float32: its parameters,
    constants and the float32 dtypes its nodes name (``_to_copy``, ``full``, ...)."""
    wide = copy.deepcopy(gm).to(torch.float64)
    for name, value in list(vars(wide).items()):  # tensors kept as plain attributes
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            setattr(wide, name, value.to(torch.float64))

    def widen(value: Any) -> Any:
        if value is torch.float32:
            return torch.float64
        if isinstance(value, (list, tuple)):
            return type(value)(widen(v) for v in value)
        return value

    for node in wide.graph.nodes:
        node.args = widen(node.args)
        node.kwargs = {k: widen(v) for k, v in node.kwargs.items()}
    wide.recompile()
    return wide


def judged_as_cancellation(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tolerance: Tolerance,
    exact: Callable[[], torch.Tensor | None],
) -> ErrorStats:
    """``compare``, with the float64 result as the arbiter of an fp32 result that is rounding
    noise: one judged relative to its own tiny magnitude (``ErrorStats.relative``) whose exact
    value ``exact()`` is itself within the noise of the CPU's fp32 run. Such a result passes if
    its distance from ``exact()`` is within ``CANCELLATION_NOISE_FACTOR`` of the CPU's distance;
    a real small value (exact far above the CPU's noise) is judged as before, and ``exact()`` runs
    only for a result that failed."""
    stats = compare(actual, expected, tolerance)
    if stats.ok or not stats.relative or actual.dtype != torch.float32:
        return stats
    wide = exact()
    if wide is None or tuple(wide.shape) != tuple(actual.shape):
        return stats
    truth = wide.detach().to(torch.float64)
    theirs = _max_distance(expected, truth)
    ours = _max_distance(actual, truth)
    magnitude = float(truth.abs().max()) if truth.numel() else 0.0
    if not math.isfinite(ours) or magnitude > CANCELLATION_NOISE_FACTOR * theirs:
        return stats
    if ours > CANCELLATION_NOISE_FACTOR * theirs:
        return stats
    return replace(stats, mismatched=0, exact_max_abs=ours, cpu_exact_max_abs=theirs)


def _judged_by_uncast(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tolerance: Tolerance,
    exact: Callable[[], torch.Tensor | None],
    stats: ErrorStats,
) -> ErrorStats:
    """An auto-cast result against its same-cast reference ``expected``: each element outside
    the tolerance passes if it is at least as close to the uncast result ``exact()`` as the
    reference's element is (the simulator rounded no worse than the CPU did)."""
    wide = exact()
    if wide is None or tuple(wide.shape) != tuple(actual.shape):
        return stats
    truth = wide.detach().to(torch.float64)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    finite = torch.isfinite(a) & torch.isfinite(e) & torch.isfinite(truth)
    outside, _, _ = _outside(a, e, tolerance)
    no_worse = finite & ((a - truth).abs() <= (e - truth).abs())
    left = int((outside & ~no_worse).sum())
    if left:
        return replace(stats, mismatched=left)
    ours, theirs = _max_distance(actual, truth), _max_distance(expected, truth)
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

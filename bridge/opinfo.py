"""OpInfo conformance: PyTorch's own OpInfo samples for every lowered overload, run eagerly on the
simulator (``HwsimMode``) and compared with the CPU, sample by sample.

Which OpInfo entries exercise a lowered overload is ``bridge.opinfo_map``.

Per sample (``run_sample``): the OpInfo's op runs on the CPU (the reference; for ``topk`` and
``sort``, whose order of ties torch leaves open, a stable sort's: ``bridge.tie_order``), then under
``HwsimMode(fallback="cpu", check=True, auto_cast="none")`` (each lowering in the op's own
dtypes). It *passed* when every op that ran on the simulator matched the CPU within the
precision's tolerance (``bridge.precision.TOLERANCES``) and the final output matches the
reference; it *failed* on a mismatch or an exception (the message is kept); it is *skipped* when
it cannot be meaningful here: more tensor elements than ``max_elements`` (a cap for speed), or
the reference itself raises. Per OpInfo x dtype the support class is *native*
(one of its own overloads ran on the simulator), *decomposed* (only other lowered ops did) or
*CPU* (nothing did; the fallback reasons are kept).

Per lowered overload, the samples that reached it on the simulator and how many of them passed;
the target is ``TARGET`` of them. Samples are generated with the global RNG seeded per OpInfo x
dtype, so a run is deterministic. Rendering (lines, the docs table, JSON) is ``bridge.opinfo_docs``.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from hwsim.bridge.errors import BridgeError
from hwsim.bridge.offload import VIEW_OPS, HwsimMode
from hwsim.bridge.opinfo_map import OpInfoMap, full_name, opinfo_db, opinfo_map, select_entries
from hwsim.bridge.precision import Precision, cast_floats, judged_with_exact, lazy_leaves
from hwsim.bridge.tie_order import OPINFO_REFERENCES, UNINITIALIZED_OPINFOS
from hwsim.config import HardwareConfig, load_config

#: Fraction of the samples reaching a lowered overload that must pass (the issue's target).
TARGET = 0.9
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: Samples with more tensor elements than this (inputs or outputs) are skipped, for speed.
DEFAULT_MAX_ELEMENTS = 1 << 15

#: Why a lowered overload can never run on the simulator in eager mode.
EAGER_VIEW = (
    "a metadata-only view: eager mode keeps it a CPU view (aliasing), only compile lowers it"
)


# ---- one sample ---------------------------------------------------------------------------


@dataclass
class SampleResult:
    """One sample: 'passed', 'failed' or 'skipped' (with why), and where its ops ran."""

    status: str
    reason: str = ""
    simulated: frozenset[str] = frozenset()  # lowered overloads that ran on the simulator
    fallbacks: tuple[tuple[str, str], ...] = ()  # (overload, reason) of each CPU fallback
    views: frozenset[str] = frozenset()  # metadata-only views (CPU views in eager mode)
    mismatched: frozenset[str] = frozenset()  # overloads whose own result was off
    seconds: float = 0.0


def describe(sample: Any) -> str:
    """A short description of a sample's arguments: shapes for tensors, values otherwise."""

    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}" + ("" if x.is_contiguous() else "nc")
        return repr(x)

    parts = [one(sample.input), *(one(a) for a in sample.args)]
    parts += [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 100 else text[:97] + "..."


def _elements(tree: Any) -> int:
    return sum(t.numel() for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


def _clone(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def run_sample(
    info: Any,
    sample: Any,
    config: HardwareConfig,
    *,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    seed: int = 0,
    mode: HwsimMode | None = None,
) -> SampleResult:
    """Run one OpInfo sample on the CPU and under ``HwsimMode`` and judge it (module docstring).
    ``mode`` may be reused across the samples of one op (its lowering cache)."""
    start = time.perf_counter()
    args = (sample.input, *sample.args)
    if _elements((args, sample.kwargs)) > max_elements:
        return SampleResult("skipped", f"more than {max_elements} input elements (speed cap)")
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            reference = OPINFO_REFERENCES.get(info.name, info.op)  # open tie orders fixed
            expected = reference(*_clone(args), **_clone(sample.kwargs))
    except Exception as error:
        return SampleResult("skipped", f"the CPU reference raises {type(error).__name__}")
    if _elements(expected) > max_elements:
        return SampleResult("skipped", f"more than {max_elements} output elements (speed cap)")
    mode = mode or HwsimMode(config=config, fallback="cpu", check=True, auto_cast="none")
    first = len(mode.report.ops)
    torch.manual_seed(seed)
    failure = ""
    try:
        with torch.no_grad(), mode:
            got = info.op(*args, **sample.kwargs)
    except Exception as error:
        failure = f"raises {type(error).__name__}: {_one_line(error)}"
        got = None
    records = mode.report.ops[first:]
    simulated = frozenset(r.op for r in records if r.status == "simulator")
    fallbacks = tuple((r.op, r.reason) for r in records if r.status == "cpu")
    views = frozenset(r.op for r in records if r.status == "view")
    off = [r for r in records if r.error is not None and not r.error["ok"]]
    if off and not failure:
        e = off[0].error or {}
        failure = (
            f"{off[0].op} on the simulator: {e['mismatched']}/{e['elements']} elements off "
            f"(max_abs {e['max_abs']:.3g}, rtol {e['rtol']:g}, atol {e['atol']:g}; "
            f"inputs {off[0].shapes})"
        )
    if not failure:
        failure = _compare_outputs(
            got,
            expected,
            values=info.name not in UNINITIALIZED_OPINFOS,
            exact=lambda: _reference_in_fp64(reference, args, sample.kwargs),
        )
    status = "failed" if failure else "passed"
    where = f" [{describe(sample)}]" if failure else ""
    return SampleResult(
        status,
        failure + where,
        simulated,
        fallbacks,
        views,
        frozenset(r.op for r in off),
        time.perf_counter() - start,
    )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _reference_in_fp64(reference: Any, args: Any, kwargs: Any) -> Any:
    """The reference's outputs on the sample's float inputs in float64 (None if it refuses
    them)."""
    try:
        with torch.no_grad():
            wide = reference(*cast_floats(_clone(args), torch.float64), **_clone(kwargs))
    except Exception:  # any refusal of float64 inputs: no arbiter, the CPU result stands
        return None
    return wide


def _compare_outputs(
    got: Any, expected: Any, *, values: bool = True, exact: Callable[[], Any] | None = None
) -> str:
    """'' when ``got`` matches the reference ``expected``, else what differs (``values``
    False: shapes, dtypes and strides only, for outputs torch leaves uninitialized). ``exact``:
    the reference's outputs in float64, the arbiter of a bf16/fp16 output off the CPU
    (``judged_with_exact``)."""
    exact_leaf = lazy_leaves(exact)
    got_leaves, want_leaves = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    if len(got_leaves) != len(want_leaves):
        return f"returns {len(got_leaves)} values, the CPU {len(want_leaves)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        if not isinstance(w, torch.Tensor):
            if g != w:
                return f"output {i} is {g!r}, the CPU's {w!r}"
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            what = f"{g.dtype} {list(g.shape)}" if isinstance(g, torch.Tensor) else type(g).__name__
            return f"output {i} is {what}, the CPU's {w.dtype} {list(w.shape)}"
        if not values:
            if g.stride() != w.stride():
                return f"output {i} has strides {g.stride()}, the CPU's {w.stride()}"
            continue
        stats = judged_with_exact(
            g, w, Precision().tolerance(w.dtype), functools.partial(exact_leaf, i)
        )
        if not stats.ok:
            return (
                f"output {i}: {stats.mismatched}/{stats.elements} elements off the CPU "
                f"(max_abs {stats.max_abs:.3g})"
            )
    return ""


# ---- one OpInfo x dtype, and a whole run --------------------------------------------------


@dataclass
class OpResult:
    """The samples of one OpInfo entry at one dtype."""

    name: str
    dtype: str
    own: frozenset[str]  # its own lowered overloads
    samples: list[SampleResult] = field(default_factory=list)
    note: str = ""  # why no sample ran at all

    def count(self, status: str) -> int:
        return sum(s.status == status for s in self.samples)

    @property
    def simulated(self) -> int:
        """Samples in which at least one op ran on the simulator."""
        return sum(bool(s.simulated) for s in self.samples if s.status != "skipped")

    @property
    def support(self) -> str:
        """'native', 'decomposed', 'CPU' (fallbacks), 'view' (only CPU views: no device work in
        eager mode), or '-' (no sample ran, or none dispatched an ATen op)."""
        ran = [s for s in self.samples if s.status != "skipped"]
        if any(s.simulated & self.own for s in ran):
            return "native"
        if any(s.simulated for s in ran):
            return "decomposed"
        if any(s.fallbacks for s in ran):
            return "CPU"
        return "view" if any(s.views for s in ran) else "-"

    def cpu_reasons(self) -> Counter[str]:
        """'aten.x: reason' -> samples, over the fallbacks of the samples that ran."""
        seen: Counter[str] = Counter()
        for s in self.samples:
            seen.update({f"{op}: {reason}" for op, reason in s.fallbacks})
        return seen

    def first_failure(self) -> str:
        return next((s.reason for s in self.samples if s.status == "failed"), "")


@dataclass
class OverloadResult:
    """One lowered overload at one dtype, over all samples of the run."""

    overload: str
    dtype: str
    reached: int = 0  # samples in which it ran on the simulator
    passed: int = 0
    first_failure: str = ""
    fallbacks: Counter[str] = field(default_factory=Counter)  # reason -> samples
    entries: tuple[str, ...] = ()  # the OpInfo entries mapped to it that this run ran
    unmeasured: str = ""  # when no sample reached it: why (``_why_unmeasured``)

    @property
    def rate(self) -> float:
        return self.passed / self.reached if self.reached else 0.0

    @property
    def meets_target(self) -> bool:
        return self.reached > 0 and self.rate >= TARGET


@dataclass
class Conformance:
    """A whole run: per OpInfo x dtype and per lowered overload x dtype."""

    config: str
    dtypes: tuple[str, ...]
    max_samples: int | None
    max_elements: int
    inputs: str = "sample_inputs"  # or "reference_inputs"
    ops: list[OpResult] = field(default_factory=list)
    overloads: dict[tuple[str, str], OverloadResult] = field(default_factory=dict)
    unmapped: tuple[str, ...] = ()  # lowered overloads with no OpInfo (full runs only)
    seconds: float = 0.0

    def count(self, status: str, dtype: str | None = None) -> int:
        return sum(o.count(status) for o in self.ops if dtype in (None, o.dtype))

    def below_target(self) -> list[OverloadResult]:
        """Overloads reached by some sample with a pass rate under ``TARGET``."""
        return [o for o in self.overloads.values() if o.reached and not o.meets_target]

    def unmeasured(self) -> list[OverloadResult]:
        return [o for o in self.overloads.values() if not o.reached]

    @property
    def meets_target(self) -> bool:
        return not self.below_target()


def run_conformance(
    ops: Sequence[str] | None = None,
    dtypes: Sequence[str] = ("float32",),
    *,
    config: str = "tiny",
    max_samples: int | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    seed: int = 0,
    reference: bool = False,
    progress: Callable[[OpResult], None] | None = None,
) -> Conformance:
    """Run the OpInfo samples of ``ops`` (default: every entry mapped to a lowered overload) at
    each of ``dtypes`` on ``config``; ``progress`` is called after each OpInfo x dtype.

    reference: use ``reference_inputs`` (the samples plus extremal values, larger and
    non-contiguous tensors) instead of ``sample_inputs``."""
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise BridgeError(f"dtype {unknown[0]!r} is not one of {', '.join(DTYPES)}")
    start = time.perf_counter()
    hw = load_config(config)
    db = opinfo_db()
    mapping = opinfo_map(db)
    entries = select_entries(db, mapping, ops)
    inputs = "reference_inputs" if reference else "sample_inputs"
    run = Conformance(config, tuple(dtypes), max_samples, max_elements, inputs)
    run.unmapped = mapping.unmapped if not ops else ()
    for dtype in dtypes:
        for op in sorted({o for i in entries for o in mapping.overloads(full_name(i))}):
            mapped = {*mapping.own[op], *mapping.exercised[op]}
            names = tuple(full_name(i) for i in entries if full_name(i) in mapped)
            run.overloads[(op, dtype)] = OverloadResult(op, dtype, entries=names)
        for info in entries:
            result = _run_entry(info, dtype, hw, mapping, inputs, max_samples, max_elements, seed)
            run.ops.append(result)
            _tally(run, result)
            if progress is not None:
                progress(result)
    for stats in run.unmeasured():
        stats.unmeasured = _why_unmeasured(run, stats)
    run.seconds = time.perf_counter() - start
    return run


def _run_entry(
    info: Any,
    dtype: str,
    hw: HardwareConfig,
    mapping: OpInfoMap,
    inputs: str,
    max_samples: int | None,
    max_elements: int,
    seed: int,
) -> OpResult:
    name = full_name(info)
    result = OpResult(name, dtype, frozenset(mapping.own_overloads(name)))
    if DTYPES[dtype] not in info.supported_dtypes("cpu"):
        result.note = f"the OpInfo does not take {dtype} on the CPU"
        return result
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(getattr(info, inputs)("cpu", DTYPES[dtype]))
        if max_samples is not None:
            samples = samples[:max_samples]
        mode = HwsimMode(config=hw, fallback="cpu", check=True, auto_cast="none")
        for index, sample in enumerate(samples):
            result.samples.append(
                run_sample(
                    info, sample, hw, max_elements=max_elements, seed=seed + index, mode=mode
                )
            )
    if not samples:
        result.note = "the OpInfo has no samples"
    return result


def _tally(run: Conformance, result: OpResult) -> None:
    for sample in result.samples:
        if sample.status == "skipped":
            continue
        for op in sample.simulated:
            stats = run.overloads.setdefault((op, result.dtype), OverloadResult(op, result.dtype))
            stats.reached += 1
            stats.passed += sample.status == "passed"
            if sample.status == "failed" and not stats.first_failure:
                stats.first_failure = f"{result.name}: {sample.reason}"
        for op, reason in set(sample.fallbacks):
            if (op, result.dtype) in run.overloads:
                run.overloads[(op, result.dtype)].fallbacks[reason] += 1


def _why_unmeasured(run: Conformance, stats: OverloadResult) -> str:
    """Why no sample reached ``stats.overload`` on the simulator."""
    if any(str(op) == stats.overload for op in VIEW_OPS):
        return EAGER_VIEW
    if stats.fallbacks:
        seen = ", ".join(f"{reason} x{n}" for reason, n in stats.fallbacks.most_common())
        return f"every sample that called it fell back to the CPU ({seen})"
    results = [o for o in run.ops if o.dtype == stats.dtype and o.name in stats.entries]
    if results and all(o.note for o in results):
        return f"its OpInfo entries ({', '.join(stats.entries)}) have no {stats.dtype} samples"
    packet = stats.overload.rsplit(".", 1)[0]
    siblings = sorted(
        o.overload
        for o in run.overloads.values()
        if o.dtype == stats.dtype and o.reached and o.overload.rsplit(".", 1)[0] == packet
    )
    instead = f" ({', '.join(siblings)} instead)" if siblings else ""
    return f"no sample called this overload: eager dispatch produced another{instead}"

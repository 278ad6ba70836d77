"""Calibration: the parameters set from the calibration set (HARDWARE.md §5), and how.

    .venv/bin/python bench/calibrate.py            # solve, print the derivation and the values
    .venv/bin/python bench/calibrate.py --write    # ... and write them into configs/*.yaml
    .venv/bin/python bench/calibrate.py --check    # exit 1 unless the presets hold them

Every other number in the presets comes from a document or is a named assumption (the presets'
comments say which); these are the only ones taken from published kernel measurements, all of
the calibration set, each from the cases of its own generation:

- ``trn1 dma.descriptor_efficiency`` below 1 KiB (V1a, V1b, V1c: their loads are rows of
  256 B and 1 KiB); 4 KiB saturates ([S11][S12]), log-linear between.
- ``trn2 dma.descriptor_efficiency`` at 512 B (K2-v2: its loads are rows of 512 B and 2 KiB);
  from 2 KiB up the curve is the trn2 DMA throughput figure of [S12] (read off the plot, below)
  and V18 (32 KiB at 23 B/ns: saturated). Without K2-v2 the 512 B point is the figure's curve
  extended down log-linearly from its 2 KiB and 4 KiB points.
- ``trn2 tensor_engine.access_overhead_cycles`` (K2-v5's TensorE active time: 32,768 fp32
  matmuls) and ``trn2 vector_engine.fixed_overhead_cycles`` (K2-v5's VectorE active time). Without
  K2-v5 they are the NeuronCore-v2 figures (60 cycles of tensor access [S1]; none for VectorE,
  whose documented cost is ~N [S1]).

trn3 carries the trn2 values (an assumption: no trn3 kernel measurement is published).

The procedure, per parameter in this order (each with the values found before it): the time of
every figure it is solved from is nearly affine in one coordinate of the parameter (1/efficiency
for a DMA-bound kernel, the cycles themselves for an engine's busy time), so two simulations per
figure give the line, the least-squares solution of the relative errors over the figures is
closed form, and one more simulation per figure checks it (a second Gauss-Newton step runs if
the check is off by more than ``TOLERANCE_PCT``). Programs are built once; each step is a
timing-only simulation of the published kernel run verbatim (bench/calibration_cases.py).
``solve(exclude=...)`` does the same without some cases: bench/fidelity.py --cross-validate.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_cases import Case, calibration_cases

from hwsim.config import HardwareConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
#: A solution is checked by simulation; off by more than this (percent) takes another step.
TOLERANCE_PCT = 0.2

# ---- the trn2 DMA throughput figure [S12] -------------------------------------------------------
#: "DMA Throughput varying Bytes per Partition for p_dim = 128" (nki/img/overviews/
#: nki-dma-intro-1.jpg, 1200 x 900, in the DMA overview of the NKI docs, a NeuronCore-v3 on
#: trn2): the height of each point's marker above the x axis (y = 700.5) in pixels, read as the
#: mean row of the marker's rows at least 9 pixels wide. The y axis is unlabelled and starts at
#: zero (evenly spaced grid lines from the axis), so only ratios are read.
FIGURE_HEIGHTS_PX = {2048: 340.0, 4096: 403.5, 8192: 411.0, 16384: 414.0, 32768: 418.0}
#: Below 2 KiB per partition the figure grows in proportion to the size (the time per transfer is
#: constant, ~850 ns: a per-transfer cost, not the descriptors'), so only its points from 2 KiB
#: up are read as descriptor efficiency.
FIGURE_FROM_BYTES = 2048


def figure_efficiency(size: int) -> float:
    """The [S12] figure's throughput at ``size`` bytes per partition over that at 32 KiB."""
    return FIGURE_HEIGHTS_PX[size] / FIGURE_HEIGHTS_PX[32768]


def figure_extrapolated(size: int) -> float:
    """The figure's curve extended below 2 KiB log-linearly from its 2 KiB and 4 KiB points."""
    e2, e4 = figure_efficiency(2048), figure_efficiency(4096)
    return e2 - (e4 - e2) * math.log2(2048 / size)


# ---- the parameters -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    """One calibrated parameter of one generation's preset (and the presets that carry it)."""

    key: str
    preset: str
    label: str
    figures: tuple[tuple[str, str], ...]  # (case key, figure name) it is solved from
    prior: float  # its value when none of its figures is used (with ``prior_source``)
    prior_source: str
    to_x: Callable[[float], float]  # the coordinate the figures are ~affine in
    from_x: Callable[[float], float]
    overrides: Callable[[float], dict[str, Any]]  # value -> config overrides (dotted paths)
    rounded: Callable[[float], float]
    bounds: tuple[float, float]
    carried_to: tuple[str, ...] = ()


def _trn1_curve(e: float) -> dict[str, Any]:
    return {"dma.descriptor_efficiency": {"256": e, "1024": e, "4096": 1.0}}


def _trn2_curve(e: float) -> dict[str, Any]:
    curve = {"512": e, **{str(s): round(figure_efficiency(s), 3) for s in (2048, 4096)}}
    return {"dma.descriptor_efficiency": {**curve, "8192": 1.0}}


def _identity(x: float) -> float:
    return x


def _inverse(x: float) -> float:
    return 1.0 / x


PARAMETERS = (
    Parameter(
        "trn2.tensor_access_overhead",
        "trn2",
        "tensor_engine.access_overhead_cycles",
        (("K2-v5", "tensor-active"),),
        60.0,
        "the NeuronCore-v2 figure, ~60 cycles [S1] (HARDWARE.md §1.4)",
        _identity,
        _identity,
        lambda v: {"tensor_engine.access_overhead_cycles": int(v)},
        lambda v: float(max(0, round(v))),
        (0.0, 400.0),
        ("trn3",),
    ),
    Parameter(
        "trn2.vector_fixed_overhead",
        "trn2",
        "vector_engine.fixed_overhead_cycles",
        (("K2-v5", "vector-active"),),
        0.0,
        "none: VectorE costs ~N cycles for N > 128 [S1] (HARDWARE.md §2.2)",
        _identity,
        _identity,
        lambda v: {"vector_engine.fixed_overhead_cycles": int(v)},
        lambda v: float(max(0, round(v))),
        (0.0, 400.0),
        ("trn3",),
    ),
    Parameter(
        "trn2.small_descriptor_efficiency",
        "trn2",
        "dma.descriptor_efficiency at 512 B (2 KiB up: the [S12] figure, 8 KiB: V18)",
        (("K2-v2", "matmul-trn2-tiled"),),
        round(figure_extrapolated(512), 3),
        "the [S12] figure's curve extended log-linearly below 2 KiB",
        _inverse,
        _inverse,
        _trn2_curve,
        lambda v: round(v, 3),
        (0.05, 1.0),
        ("trn3",),
    ),
    Parameter(
        "trn1.small_descriptor_efficiency",
        "trn1",
        "dma.descriptor_efficiency at 256 B and 1 KiB (4 KiB: 1.0 [S11][S12])",
        (
            ("V1a", "matmul-tiled"),
            ("V1b", "matmul-hoisted"),
            ("V1c", "matmul-blocked"),
        ),
        0.394,
        "the value of the previous calibration",
        _inverse,
        _inverse,
        _trn1_curve,
        lambda v: round(v, 3),
        (0.05, 1.0),
    ),
)


# ---- simulating the cases with parameter values -------------------------------------------------
@dataclass
class Evaluator:
    """Figures of the cases simulated with parameter values (each result kept)."""

    cases: dict[str, Case]
    log: Callable[[str], None] = print
    cache: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def config(self, preset: str, values: dict[str, float]) -> HardwareConfig:
        overrides: dict[str, Any] = {}
        for p in PARAMETERS:
            if p.key in values and (p.preset == preset or preset in p.carried_to):
                overrides.update(p.overrides(values[p.key]))
        return load_config(preset, overrides)

    def figure(self, case_key: str, figure: str, values: dict[str, float]) -> float:
        case = self.cases[case_key]
        relevant = tuple(
            sorted(
                (k, v)
                for k, v in values.items()
                if next(p for p in PARAMETERS if p.key == k).preset == case.config
            )
        )
        key = (case_key, relevant)
        if key not in self.cache:
            config = self.config(case.config, values)
            result, program, wall = case.simulate("verbatim", config)
            for f in case.figures:
                self.cache[(case_key, relevant, f.name)] = f.measure(result, program)
            self.cache[key] = wall
        return self.cache[(case_key, relevant, figure)]

    def published(self, case_key: str, figure: str) -> float:
        return next(f for f in self.cases[case_key].figures if f.name == figure).published


@dataclass
class Solution:
    values: dict[str, float]
    derivation: list[str]
    used: dict[str, tuple[str, ...]]  # parameter -> cases it was solved from (empty: prior)


def solve(evaluator: Evaluator, exclude: frozenset[str] = frozenset()) -> Solution:
    """Every parameter, in order, from the figures of the cases not in ``exclude``."""
    values = {p.key: p.prior for p in PARAMETERS}
    lines: list[str] = []
    used: dict[str, tuple[str, ...]] = {}
    for p in PARAMETERS:
        figures = [(c, f) for c, f in p.figures if c not in exclude and c in evaluator.cases]
        used[p.key] = tuple(c for c, _ in figures)
        if not figures:
            lines.append(f"{p.key}: {p.prior:g} (no case: {p.prior_source})")
            continue
        values[p.key] = _least_squares(evaluator, p, figures, values, lines)
    return Solution(values, lines, used)


def _least_squares(
    ev: Evaluator,
    p: Parameter,
    figures: list[tuple[str, str]],
    values: dict[str, float],
    lines: list[str],
) -> float:
    """The value whose simulated figures have the least sum of squared relative errors."""

    def at(value: float) -> list[float]:
        trial = {**values, p.key: value}
        return [ev.figure(c, f, trial) / ev.published(c, f) for c, f in figures]

    x0 = p.to_x(p.prior)
    x1 = x0 * 1.25 if x0 else 20.0
    x = x0
    for _ in range(3):
        r0, r1 = at(p.from_x(x0)), at(p.from_x(x1))
        slopes = [(b - a) / (x1 - x0) for a, b in zip(r0, r1, strict=True)]
        # ratio_i(x) ~ r0_i + s_i (x - x0): least squares of (ratio - 1)
        den = sum(s * s for s in slopes)
        x = x0 + sum(s * (1 - r) for s, r in zip(slopes, r0, strict=True)) / den if den else x0
        low, high = sorted(p.to_x(b) for b in p.bounds)
        x = min(high, max(low, x))
        value = p.rounded(p.from_x(x))
        errors = [100 * (r - 1) for r in at(value)]
        worst = max(abs(e) for e in errors)
        lines.append(
            f"{p.key} = {value:g} from "
            + ", ".join(f"{c} {f} {e:+.2f}%" for (c, f), e in zip(figures, errors, strict=True))
        )
        if len(figures) > 1 or worst <= TOLERANCE_PCT or value in (p.bounds):
            return value
        x0, x1 = p.to_x(value), x if p.to_x(value) != x else x * 1.01
    return p.rounded(p.from_x(x))


#: The comment each written value gets in the presets, by preset (trn3 carries trn2's), by the
#: config path or, for the efficiency curve, the descriptor size.
COMMENTS = {
    "trn1": {
        "256": "calibrated: V1a, V1b, V1c (256 B and 1 KiB rows), bench/calibrate.py",
        "1024": "calibrated: V1a, V1b, V1c (256 B and 1 KiB rows), bench/calibrate.py",
        "4096": '§2.5 ">= 4 KiB per partition saturates" [S11][S12]',
    },
    "trn2": {
        "tensor_engine.access_overhead_cycles": "calibrated: K2-v5's TensorE active time "
        "(2 MATMULs of 2N per fp32 matmul + this), bench/calibrate.py; v2: ~60 [S1]",
        "vector_engine.fixed_overhead_cycles": "calibrated: K2-v5's VectorE active time, "
        "bench/calibrate.py; the part of the ~60-cycle access start [S1] not hidden",
        "512": "calibrated: K2-v2 (512 B and 2 KiB rows), bench/calibrate.py",
        "2048": "§2.5 [S12] trn2 DMA throughput figure at 2 KiB/partition (over 32 KiB)",
        "4096": "§2.5 [S12] trn2 DMA throughput figure at 4 KiB/partition (over 32 KiB)",
        "8192": "§5 V18: 32 KiB in 4 rows of 8 KiB at 23.1 B/ns, saturated [S12]",
    },
}
COMMENTS["trn3"] = {k: f"{v} (trn2 value, assumed for trn3)" for k, v in COMMENTS["trn2"].items()}


# ---- presets ------------------------------------------------------------------------------------
def preset_overrides(values: dict[str, float]) -> dict[str, dict[str, Any]]:
    """The config values each preset should hold, by preset."""
    found: dict[str, dict[str, Any]] = {}
    for p in PARAMETERS:
        for preset in (p.preset, *p.carried_to):
            found.setdefault(preset, {}).update(p.overrides(values[p.key]))
    return found


def _current(preset: str, path: str) -> Any:
    config = load_config(preset)
    section, name = path.split(".")
    value = getattr(getattr(config, section), name)
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return value


def stale(values: dict[str, float]) -> list[str]:
    """'preset path: holds X, solved Y' for each preset value that differs from the solution."""
    found = []
    for preset, overrides in preset_overrides(values).items():
        for path, want in overrides.items():
            have = _current(preset, path)
            if have != want:
                found.append(f"{preset} {path}: holds {have}, solved {want}")
    return found


def write(values: dict[str, float]) -> list[str]:
    """Rewrite the calibrated values in configs/<preset>.yaml in place, keeping every comment:
    a scalar on its own line, a mapping's entries under its key (the first entry's comment
    says where the values come from)."""
    changed = []
    for preset, overrides in preset_overrides(values).items():
        path = ROOT / "configs" / f"{preset}.yaml"
        text = path.read_text()
        for dotted, value in overrides.items():
            text = _set_yaml(text, dotted, value, COMMENTS[preset])
        if text != path.read_text():
            path.write_text(text)
            changed.append(str(path.relative_to(ROOT)))
    return changed


def _set_yaml(text: str, dotted: str, value: Any, comments: dict[str, str]) -> str:
    """``text`` with ``dotted`` (``section.key``) set to ``value`` (a scalar, or a mapping
    written as its entries under the key), each line with its comment from ``comments``."""
    section, name = dotted.split(".")
    lines = text.split("\n")
    start = lines.index(f"{section}:")
    i = next(j for j in range(start + 1, len(lines)) if re.match(rf"  {name}:", lines[j]))
    if not isinstance(value, dict):
        lines[i] = _with_comment(f"  {name}: {value}", comments[dotted])
        return "\n".join(lines)
    j = i + 1
    while j < len(lines) and lines[j].startswith("    "):
        j += 1
    lines[i + 1 : j] = [
        _with_comment(f'    "{size}": {efficiency}', comments[size])
        for size, efficiency in value.items()
    ]
    return "\n".join(lines)


def _with_comment(head: str, comment: str) -> str:
    """A preset line with its comment at the presets' comment column (36)."""
    return f"{head.ljust(max(35, len(head)))} # {comment}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the values into configs/")
    parser.add_argument("--check", action="store_true", help="exit 1 unless presets hold them")
    args = parser.parse_args(argv)
    evaluator = Evaluator(calibration_cases())
    solution = solve(evaluator)
    print("derivation:")
    for line in solution.derivation:
        print(f"  {line}")
    print("\nresult:")
    for key, overrides in preset_overrides(solution.values).items():
        for path, value in overrides.items():
            print(f"  {key} {path}: {value}")
    if args.write:
        changed = write(solution.values)
        print(f"\nwritten: {', '.join(changed) or 'nothing (the presets hold these values)'}")
    differ = stale(solution.values)
    if differ:
        print("\npresets that differ from the solution:")
        for line in differ:
            print(f"  {line}")
    else:
        print("\nevery preset holds these values")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())

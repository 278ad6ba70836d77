"""Fidelity: simulated vs published hardware measurements of the calibration set (HARDWARE.md §5).

    .venv/bin/python bench/fidelity.py [--only matmul-tiled ...]
    .venv/bin/python bench/fidelity.py --cross-validate

One line per published figure, starting with its name, then the simulated and the published
figure and the signed error in percent; the target is ±10% for every case, with one config per
generation and no per-kernel knobs. Each case is the published kernel run unmodified through
``hwsim.nki`` from its vendored source (third_party/); the line after it (``<name>:twin``) is the
library kernel written line by line like it (``hwsim.library``): the two should agree. Notes
under a case give the profile figures the case also published and what the run was.

The cases (bench/calibration_cases.py): V1a, V1b, V1c and V1 (the trn1 NKI matmul tutorial as
published with its latencies, nki-samples 5d97201), V18 (one trn2 DMA engine moving 32 KiB, the
DMA overview's example 1), K2-v2 and K2-v5 (the trn2 kernel-optimization tutorial's tiled and
block-all fp32 versions). The parameters taken from them are derived by bench/calibrate.py.

``--cross-validate`` solves the calibrated parameters again without each case in turn (leave one
out) and prints, per case, its error in-sample (the presets) beside its error when the
parameters were solved without it; a case whose leave-one-out error is far above its in-sample
one says that the parameters it sets rest on it alone (over-fitted). Each line ends PASS or FAIL
against ±10%; the script exits 1 if any case fails.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate import PARAMETERS, Evaluator, solve
from calibration_cases import Case, Figure, calibration_cases

from hwsim.config import load_config
from hwsim.machine.simulator import RunResult
from hwsim.program import Program
from hwsim.trace.critical_path import critical_path

TOLERANCE_PCT = 10.0
#: Leave-one-out error this many points above the in-sample one marks the set over-fitted.
OVERFIT_POINTS = TOLERANCE_PCT


def error_pct(simulated: float, published: float) -> float:
    return 100.0 * (simulated - published) / published


def line(name: str, what: str, simulated: float, figure: Figure, target: bool = True) -> str:
    err = error_pct(simulated, figure.published)
    verdict = ("PASS" if abs(err) <= TOLERANCE_PCT else "FAIL") if target else "note"
    return (
        f"{name:26s} {what:44s} simulated {simulated:11,.2f} {figure.unit:3s} "
        f"published {figure.published:11,.2f} {figure.unit:3s} error {err:+6.1f}% "
        f"(target ±{TOLERANCE_PCT:g}%) {verdict}"
    )


#: How many links of the critical path ``run_case`` names, by kernel line (the rest summed).
PATH_LINES = 6


def critical_path_by_line(result: RunResult, program: Program) -> list[tuple[str, int]]:
    """The run's critical path (``hwsim.trace.critical_path``) summed by what each link is: its
    opcode and kernel line, ``transfer`` for a DMA's data movement (its trigger instruction is
    a link of its own), the compiler's spill DMAs by kind (``spill``, ``reload``, ``reread``)
    without the tile; largest first, in ticks (they sum to the run's)."""
    totals: Counter[str] = Counter()
    for step in critical_path(result.trace):
        if step.kind == "startup":
            totals["startup"] += step.share_ticks
            continue
        instruction = program.cores[step.core].streams[step.engine][step.pc]
        what = "transfer" if step.kind == "dma" else step.engine
        totals[link_name(instruction.tag, instruction.OPCODE, what)] += step.share_ticks
    return totals.most_common()


def link_name(tag: str, opcode: str, what: str) -> str:
    """``opcode where (what)``: the tag without its kernel name, and a compiler-made DMA's
    (``kernel:spill:sbuf12 (file.py:73)``) as its kind and the line that allocated the tile."""
    where = tag.split(":", 1)[-1]
    where = re.sub(r"^(spill|reload|reread|refill):\S+ \((.*)\)$", r"\1 \2", where)
    return f"{opcode} {where} ({what})"


def run_case(case: Case) -> tuple[list[str], int]:
    """The case's lines (verbatim, twin, notes) and how many target figures failed."""
    config = load_config(case.config)
    lines, failed = [], 0
    runs = {}
    for which in ("verbatim", "twin"):
        start = time.perf_counter()
        result, program, _ = case.simulate(which, config)
        runs[which] = (result, program, time.perf_counter() - start)
    for figure in (f for f in case.figures if f.target):
        for which, suffix in (("verbatim", ""), ("twin", ":twin")):
            result, program, _ = runs[which]
            value = figure.measure(result, program)
            what = figure.label if which == "verbatim" else f"{case.key} twin: hwsim.library kernel"
            text = line(figure.name + suffix, what, value, figure)
            failed += text.endswith("FAIL")
            lines.append(text)
    result, program, wall = runs["verbatim"]
    summary = result.summary
    streams = program.cores[0].streams
    loads = sum(1 for s in streams.values() for i in s if i.IS_DMA and i.src.memory == "hbm")
    lines.append(
        f"        verbatim: {case.source}; {program.instruction_count:,} instructions, "
        f"{loads:,} loads, {wall:.1f} s wall; {summary.bottleneck}"
    )
    twin = runs["twin"][0].trace
    same = "the same ticks" if twin.end_tick == result.trace.end_tick else "they differ"
    lines.append(
        f"        twin - verbatim: {(twin.end_tick - result.trace.end_tick) / twin.base_mhz:+,.3f} "
        f"us ({same})"
    )
    for figure in (f for f in case.figures if not f.target):
        value = figure.measure(result, program)
        lines.append(
            f"        {figure.label}: simulated {value:,.2f} {figure.unit}, published "
            f"{figure.published:,.2f} {figure.unit} ({error_pct(value, figure.published):+.1f}%)"
        )
    path = critical_path_by_line(result, program)
    total_ns = result.trace.ticks_to_ns(sum(ticks for _, ticks in path))
    unit, scale = ("ms", 1e6) if total_ns >= 1e6 else ("us", 1e3)
    rest = sum(ticks for _, ticks in path[PATH_LINES:])
    shown = path[:PATH_LINES] + ([("the rest", rest)] if rest else [])
    lines.append("        verbatim critical path, by kernel line:")
    for what, ticks in shown:
        lines.append(f"        {result.trace.ticks_to_ns(ticks) / scale:10,.3f} {unit}  {what}")
    return lines, failed


def cross_validate(cases: dict[str, Case], evaluator: Evaluator | None = None) -> int:
    """Leave-one-out: each case's error with the parameters solved without it (``evaluator``:
    one whose simulations are kept, e.g. from bench/calibrate.py's solution)."""
    evaluator = evaluator or Evaluator(cases, log=lambda _: None)
    in_sample = solve(evaluator)
    print("in-sample parameters (all cases):")
    for line_ in in_sample.derivation:
        print(f"  {line_}")
    rows = []
    over = 0
    for key, case in cases.items():
        without = solve(evaluator, exclude=frozenset({key}))
        target = case.figures[0]
        inside = error_pct(evaluator.figure(key, target.name, in_sample.values), target.published)
        outside = error_pct(evaluator.figure(key, target.name, without.values), target.published)
        moved = [
            p.key
            for p in PARAMETERS
            if key in in_sample.used[p.key] and without.values[p.key] != in_sample.values[p.key]
        ]
        flag = ""
        if abs(outside) - abs(inside) > OVERFIT_POINTS:
            over += 1
            flag = f"over-fitted: {', '.join(moved)} rest on {key} alone"
        changed = ", ".join(f"{p}={without.values[p]:g}" for p in moved) or "none changed"
        rows.append((key, target.name, inside, outside, changed, flag))
    print(
        f"\n{'case':7s} {'figure':22s} {'in-sample':>10s} {'leave-one-out':>14s}  "
        "parameters solved without it / verdict"
    )
    for key, name, inside, outside, changed, flag in rows:
        print(f"{key:7s} {name:22s} {inside:+9.1f}% {outside:+13.1f}%  {changed}")
        if flag:
            print(f"{'':47s}{flag}")
    mean_in = sum(abs(r[2]) for r in rows) / len(rows)
    mean_out = sum(abs(r[3]) for r in rows) / len(rows)
    print(f"\nmean absolute error: in-sample {mean_in:.1f}%, leave-one-out {mean_out:.1f}%")
    if over:
        print(f"{over} case(s) over-fitted: their parameters have no other evidence in the set")
    else:
        print("no case over-fitted")
    return 0


def main() -> int:
    cases = calibration_cases()
    names = {c.name: k for k, c in cases.items()}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(names), action="append", help="run these cases")
    parser.add_argument(
        "--cross-validate", action="store_true", help="leave-one-out table of the calibration"
    )
    args = parser.parse_args()
    if args.cross_validate:
        if args.only:  # the leave-one-out of these cases' own generation(s) only
            cases = {k: c for k, c in cases.items() if c.name in args.only}
        return cross_validate(cases)
    failed = 0
    for case in cases.values():
        if args.only and case.name not in args.only:
            continue
        lines, bad = run_case(case)
        for text in lines:
            print(text, flush=True)
        failed += bad
    print(
        f"{'all cases within' if not failed else f'{failed} case(s) outside'} ±{TOLERANCE_PCT:g}%"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

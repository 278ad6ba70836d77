"""``hwsim tune TARGET``: search a kernel's declared space on a config, print the path taken,
then advise the winner and say what changed (the loop: tune, advise, report).

TARGET is a library kernel with a space (``matmul_tiled_blocked``) or ``FILE.py:NAME`` with
``@hwsim.tune.space`` above the kernel; ``--input SHAPE:DTYPE`` gives its arrays (a library
kernel has defaults: the NKI tutorial's matmul problem).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hwsim.tune.space import TuneError
from hwsim.units import time_text

#: Inputs of library targets when none are given: the NKI tutorial's V1 problem [S26].
DEFAULT_INPUTS = {"matmul_tiled_blocked": ("8192x4096:bf16", "8192x8192:bf16")}


def register(commands: argparse._SubParsersAction) -> None:
    from hwsim.cli.main import add_config_arguments, positive_int

    parser = commands.add_parser(
        "tune", help="search a kernel's declared space with the simulator as the cost model"
    )
    parser.add_argument("target", help="a library kernel with a space, or FILE.py:NAME")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="SHAPE:DTYPE",
        help="an array argument, e.g. 8192x4096:bf16 (repeat, in order)",
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--trials",
        type=positive_int,
        default=30,
        help="feasible candidates to try (points the kernel refuses come on top)",
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="candidates at a time")
    parser.add_argument("--backend", default="loky", help="loky (local), dask or ray")
    parser.add_argument("--address", help="an existing Dask scheduler or Ray cluster")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    parser.add_argument("--db", help="SQLite cache of results (resumes; default: none)")
    parser.add_argument("--start", help="start point NAME=VALUE,... (default: the kernel's)")
    parser.add_argument("--plot", metavar="PNG", help="write the convergence plot here")
    parser.add_argument("--no-advise", action="store_true", help="skip advising the winner")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.set_defaults(handler=_tune)


def make_target(ref: str, inputs: list[str]) -> Any:
    from hwsim.tune.target import InputSpec, Target, load_kernel

    load_kernel(ref)  # a name that is no kernel is refused before its inputs are asked for
    texts = inputs or list(DEFAULT_INPUTS.get(ref, ()))
    if not texts:
        raise TuneError(f"{ref}: give its array arguments with --input SHAPE:DTYPE (in order)")
    return Target(ref, tuple(InputSpec.parse(t) for t in texts))


def run_tune(args: argparse.Namespace, echo: bool = True) -> dict[str, Any]:
    """Tune, advise start and winner; returns the JSON form (printing the path if ``echo``)."""
    from hwsim.tune.cache import TuneCache
    from hwsim.tune.loop import compare_with_advice
    from hwsim.tune.search import tune
    from hwsim.tune.space import parse_point

    target = make_target(args.target, args.input)
    start = parse_point(args.start, target.space) if args.start else None
    if args.plot:  # a refused path fails before the search, not after
        from hwsim.output_paths import check_output_file

        check_output_file(args.plot)
    from hwsim.config import load_config

    size = target.space.size(load_config(args.config, args.overrides))
    cache = TuneCache(args.db)
    if echo and not args.json:
        print(
            f"tuning {target.identity} on {args.config}: {size} points in "
            f"the space, {args.trials} candidates, {args.jobs} at a time"
        )
    try:
        result = tune(
            target,
            args.config,
            args.overrides,
            trials=args.trials,
            jobs=args.jobs,
            backend=args.backend,
            address=args.address,
            seed=args.seed,
            cache=cache,
            start=start,
            on_trial=_print_trial if echo and not args.json else None,
        )
    finally:
        cache.close()
    data = result.to_dict()
    if echo and not args.json:
        print("\n".join(path_lines(result)))
    if args.plot:
        from hwsim.tune.plot import convergence_plot

        convergence_plot(result, args.plot)
        data["plot"] = args.plot
    if not args.no_advise and result.best is not None:
        loop = compare_with_advice(target, result, args.config, args.overrides)
        data["loop"] = loop
        if echo and not args.json:
            print("\n".join(loop["lines"]))
    return data


def path_lines(result: Any) -> list[str]:
    """The path: the start, then each candidate that beat all before it."""
    start = result.start.outcome.total_ns
    lines = ["Path:"]
    for trial in result.path():
        o = trial.outcome
        if not o.ok:
            lines.append(f"  #{trial.index:<3d} {_point(trial.point)}: infeasible ({o.error[:80]})")
            continue
        change = f" ({100.0 * (o.total_ns - start) / start:+.1f}% vs start)" if start else ""
        lines.append(f"  #{trial.index:<3d} {_point(trial.point)}: {time_text(o.total_ns)}{change}")
    best = result.best
    if best is not None:
        lines.append(
            f"Best: {_point(best.point)} at {time_text(best.outcome.total_ns)} after "
            f"{len(result.trials)} candidates ({result.simulated} simulated, "
            f"{result.wall_s:,.0f} s)"
        )
    return lines


def _point(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _print_trial(trial: Any) -> None:
    o = trial.outcome
    what = f"{time_text(o.total_ns):>10}" if o.ok else f"infeasible: {o.error[:60]}"
    best = f"best {time_text(trial.best_ns)}" if trial.best_ns else ""
    cached = " (cached)" if trial.cached else ""
    print(f"  #{trial.index:<3d} {_point(trial.point):60s} {what}  {best}{cached}", flush=True)


def _tune(args: argparse.Namespace) -> int:
    data = run_tune(args)
    if args.json:
        print(json.dumps(data, default=str))
    return 0 if data.get("best") else 1

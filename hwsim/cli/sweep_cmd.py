"""``hwsim sweep``: run a sweep spec, export its results, plot them.

hwsim sweep SPEC.yaml [--jobs N] [--backend loky|dask|ray] [--address ADDR] [--db PATH]
                      [--retry-failed] [--dry-run] [--quiet]
hwsim sweep export DB -o FILE.csv|FILE.parquet
hwsim sweep plot DB --kind line|heatmap|pareto [--x COL] [--y COL] [--metric COL]
                    [--workload NAME ...] [--where PATH=VALUE ...] -o PNG
hwsim sweep --list-metrics
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwsim.cli.main import add_out_argument, positive_int

#: Spelled out (not imported) so the CLI starts without loading the sweep machinery.
BACKENDS = ("loky", "dask", "ray")
PLOT_KINDS = ("line", "heatmap", "pareto")
_USAGE = """hwsim sweep SPEC.yaml [--jobs N] [--backend loky|dask|ray] [--address ADDR] [--db PATH]
                         [--retry-failed] [--dry-run] [--quiet]
       hwsim sweep export DB -o FILE.csv|FILE.parquet
       hwsim sweep plot DB --kind line|heatmap|pareto [--x COL] [--y COL] [--metric COL]
                       [--workload NAME ...] [--where PATH=VALUE ...] -o PNG
       hwsim sweep --list-metrics"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "sweep",
        help="run a design-space sweep (SPEC.yaml), or export / plot its results",
        usage=_USAGE,
        description="Run every config x workload of a sweep spec in parallel, storing each "
        "result in SQLite as it finishes (re-running resumes; several runners may share one "
        "database and split its runs). See configs/sweeps/README.md.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="SPEC.yaml|export|plot",
        help="a sweep spec to run, or 'export DB' / 'plot DB'",
    )
    parser.add_argument("db_arg", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    run = parser.add_argument_group("running a spec")
    run.add_argument(
        "--jobs", "-j", type=positive_int, help="parallel workers (default: all cores)"
    )
    run.add_argument("--backend", choices=BACKENDS, default="loky", help="default loky")
    run.add_argument(
        "--address", help="Dask scheduler or Ray cluster address (default: start a local one)"
    )
    run.add_argument(
        "--db", type=Path, help="results database (default traces/sweeps/<spec name>.sqlite)"
    )
    run.add_argument("--retry-failed", action="store_true", help="rerun the runs that failed")
    run.add_argument(
        "--dry-run", action="store_true", help="validate and count the runs; run nothing"
    )
    run.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    run.add_argument(
        "--list-metrics", action="store_true", help="list the metric names a spec may record"
    )
    out = parser.add_argument_group("export and plot")
    add_out_argument(
        out,
        "file to write (.csv/.parquet, or .png)",
        dest="output",
        old_output_flag=True,
        type=Path,
    )
    out.add_argument("--kind", choices=PLOT_KINDS, help="plot: which figure")
    out.add_argument("--x", help="plot: parameter (line, heatmap) or column[:min|max] (pareto)")
    out.add_argument("--y", help="plot: parameter (heatmap) or column[:min|max] (pareto)")
    out.add_argument("--metric", help="plot: the metric drawn (line, heatmap)")
    out.add_argument(
        "--workload", action="append", default=[], help="plot: only this workload (repeatable)"
    )
    out.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="plot: only rows where a parameter has this value (repeatable)",
    )
    parser.set_defaults(handler=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from hwsim.sweep.errors import SweepError

    if args.list_metrics:
        return _list_metrics()
    if args.target is None:
        raise SweepError("name a sweep spec (hwsim sweep SPEC.yaml), or export / plot a DB")
    if args.target in ("export", "plot"):
        _no_run_options(args)
        if args.db_arg is None:
            raise SweepError(f"hwsim sweep {args.target} DB: name the results database")
        return _export(args) if args.target == "export" else _plot(args)
    if args.db_arg is not None:
        raise SweepError(f"unexpected argument '{args.db_arg}' after the spec")
    return _run(args)


def _no_run_options(args: argparse.Namespace) -> None:
    from hwsim.sweep.errors import SweepError

    used = [
        flag
        for flag, value in (
            ("--jobs", args.jobs),
            ("--address", args.address),
            ("--db", args.db),
            ("--retry-failed", args.retry_failed),
            ("--dry-run", args.dry_run),
        )
        if value
    ]
    if used:
        raise SweepError(f"{', '.join(used)}: only for running a spec, not '{args.target}'")


def _run(args: argparse.Namespace) -> int:
    from hwsim.sweep.errors import SweepError
    from hwsim.sweep.execute import default_db, run_sweep
    from hwsim.sweep.spec import load_sweep

    if args.kind or args.output:
        raise SweepError("--kind / -o are for 'hwsim sweep plot' and 'hwsim sweep export'")
    plan = load_sweep(args.target)
    db = args.db or default_db(plan)
    duplicate = f" ({plan.duplicates} repeated configs dropped)" if plan.duplicates else ""
    print(
        f"{plan.source}: {len(plan.points)} configs x {len(plan.workloads)} workloads = "
        f"{plan.runs} runs{duplicate}; results in {db}"
    )
    if args.dry_run:
        for point in plan.points[:5]:
            print(f"  {point.config_hash}  {point.params}")
        if len(plan.points) > 5:
            print(f"  ... {len(plan.points) - 5} more")
        return 0
    outcome = run_sweep(
        plan,
        db,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        retry_failed=args.retry_failed,
        progress=not args.quiet,
    )
    elsewhere = f"; {outcome.elsewhere} by another runner" if outcome.elsewhere else ""
    print(
        f"{outcome.ran} runs in {outcome.elapsed_s:.1f} s: {outcome.ok} ok, {outcome.failed} "
        f"failed; {outcome.skipped} already done{elsewhere}; {outcome.lowerings} lowerings"
    )
    if outcome.failed:
        print(f"failed runs keep their error: hwsim sweep export {db} -o results.csv")
    return 0


def _export(args: argparse.Namespace) -> int:
    from hwsim.sweep.errors import SweepError
    from hwsim.sweep.store import export_results

    if args.output is None:
        raise SweepError("hwsim sweep export DB -o FILE.csv|FILE.parquet: give -o")
    print(f"wrote {export_results(args.db_arg, args.output)}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from hwsim.sweep.errors import SweepError
    from hwsim.sweep.plots import plot_sweep

    if args.kind is None:
        raise SweepError("hwsim sweep plot DB --kind line|heatmap|pareto: give --kind")
    needed = {"line": ("x", "metric"), "heatmap": ("x", "y", "metric"), "pareto": ("x", "y")}
    missing = [f"--{name}" for name in needed[args.kind] if getattr(args, name) is None]
    extra = [
        f"--{name}"
        for name in ("x", "y", "metric")
        if name not in needed[args.kind] and getattr(args, name) is not None
    ]
    if missing or extra:
        what = f"needs {', '.join(missing)}" if missing else f"does not take {', '.join(extra)}"
        raise SweepError(f"--kind {args.kind} {what}")
    from hwsim.outputs_guard import output_file

    output = args.output or Path(args.db_arg).with_name(f"{Path(args.db_arg).stem}-{args.kind}.png")
    options = {name: getattr(args, name) for name in needed[args.kind]}
    # a default path replaces only a figure hwsim wrote, never a file of the user's of that name
    with output_file(output, "wb", named=args.output is not None) as stream:
        plot_sweep(
            args.db_arg, args.kind, stream, workloads=args.workload, where=args.where, **options
        )
    print(f"wrote {output}")
    return 0


def _list_metrics() -> int:
    from hwsim.sweep.metrics import DEFAULT_METRICS, NUMERICS_METRICS, summary_metric_names

    for name in summary_metric_names():
        print(f"{name}{'  (default)' if name in DEFAULT_METRICS else ''}")
    for name in NUMERICS_METRICS:
        print(f"{name}  (with numerics: true)")
    return 0

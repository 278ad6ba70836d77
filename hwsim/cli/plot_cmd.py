"""``hwsim plot TRACE|RUN_DIR --kind KIND|all [-o PNG|DIR]``: draw the figures of a saved run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hwsim.cli.main import add_out_argument
from hwsim.errors import HwsimError

if TYPE_CHECKING:
    from hwsim.trace.outputs import RunData

#: The figure kinds (``hwsim.plots.PLOT_KINDS``), spelled out so the CLI starts without numpy.
KINDS = ("timeline", "util", "memory", "roofline", "ops", "dma")
#: Figures drawn from the trace's slices or counters (a summary alone cannot give them).
NEEDS_TRACE = ("timeline", "memory", "ops", "dma")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("plot", help="draw a figure of a saved trace.json or run folder")
    parser.add_argument("path", metavar="TRACE|RUN_DIR", help="a trace.json or run folder")
    parser.add_argument(
        "--kind", choices=(*KINDS, "all"), required=True, help="which figure (all: every one)"
    )
    add_out_argument(
        parser,
        "PNG to write, or with --kind all a folder (default: <kind>.png beside the trace)",
        dest="output",
        old_output_flag=True,
        type=Path,
    )
    parser.set_defaults(handler=_plot)


def _plot(args: argparse.Namespace) -> int:
    from hwsim.trace.outputs import load_run

    run = load_run(args.path)
    source = Path(args.path)
    beside = source if source.is_dir() else source.parent
    if args.kind != "all":
        _plot_one(
            args.kind, run, args.path, args.output or beside / f"{args.kind}.png", args.output
        )
        return 0
    folder = args.output or beside
    if folder.exists() and not folder.is_dir():
        raise HwsimError(f"{folder}: --kind all writes one PNG per figure into a folder")
    folder.mkdir(parents=True, exist_ok=True)
    kinds = [k for k in KINDS if run.rows or k not in NEEDS_TRACE]
    for kind in kinds:
        _plot_one(kind, run, args.path, folder / f"{kind}.png", None)  # replaces only ours
    skipped = sorted(set(KINDS) - set(kinds))
    if skipped:
        print(f"skipped {', '.join(skipped)}: only a summary was found (they need trace.json)")
    return 0


def _plot_one(kind: str, run: RunData, where: str, output: Path, named: Path | None) -> None:
    from hwsim.cli.report_cmd import summary_fields_checked
    from hwsim.outputs_guard import output_file
    from hwsim.plots import plot

    if kind in NEEDS_TRACE and not run.rows:
        raise HwsimError(
            f"{where}: the '{kind}' figure needs trace.json (only a summary was found)"
        )
    # a default path replaces only a figure hwsim wrote, never a file of the user's of that name
    with (
        output_file(output, "wb", named=named is not None) as stream,
        summary_fields_checked(where),
    ):
        plot(kind, run, stream)
    print(f"wrote {output}")

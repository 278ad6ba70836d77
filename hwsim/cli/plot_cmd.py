"""``hwsim plot TRACE|RUN_DIR --kind timeline|util|memory|roofline -o PNG``: draw a saved run."""

from __future__ import annotations

import argparse
from pathlib import Path

#: The figure kinds (``hwsim.plots.PLOT_KINDS``), spelled out so the CLI starts without numpy.
KINDS = ("timeline", "util", "memory", "roofline")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("plot", help="draw a figure of a saved trace.json or run folder")
    parser.add_argument("path", metavar="TRACE|RUN_DIR", help="a trace.json or run folder")
    parser.add_argument("--kind", choices=KINDS, required=True, help="which figure")
    parser.add_argument(
        "-o", "--output", type=Path, help="PNG to write (default: <kind>.png beside the trace)"
    )
    parser.set_defaults(handler=_plot)


def _plot(args: argparse.Namespace) -> int:
    from hwsim.cli.report_cmd import summary_fields_checked
    from hwsim.errors import HwsimError
    from hwsim.plots import plot
    from hwsim.trace.outputs import load_run

    run = load_run(args.path)
    if args.kind in ("timeline", "memory") and not run.rows:
        raise HwsimError(
            f"{args.path}: the '{args.kind}' figure needs trace.json (only a summary was found)"
        )
    from hwsim.outputs_guard import output_file

    source = Path(args.path)
    output = args.output or (source if source.is_dir() else source.parent) / f"{args.kind}.png"
    # a default path replaces only a figure hwsim wrote, never a file of the user's of that name
    with (
        output_file(output, "wb", named=args.output is not None) as stream,
        summary_fields_checked(args.path),
    ):
        plot(args.kind, run, stream)
    print(f"wrote {output}")
    return 0

"""``hwsim pftrace TRACE|RUN_DIR [-o FILE]``: a saved trace in Perfetto's protobuf format."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from hwsim.cli.main import add_out_argument

    parser = commands.add_parser(
        "pftrace",
        help="write a saved trace.json as Perfetto protobuf (.pftrace: loads faster in the UI)",
    )
    parser.add_argument("path", metavar="TRACE|RUN_DIR", help="a trace.json or a run folder")
    add_out_argument(parser, "the .pftrace to write (default: trace.pftrace beside the trace)")
    parser.set_defaults(handler=_pftrace)


def _pftrace(args: argparse.Namespace) -> int:
    from hwsim.errors import HwsimError
    from hwsim.trace.outputs import PFTRACE_FILE, TRACE_FILE
    from hwsim.trace.pftrace import convert_file

    source = Path(args.path)
    if source.is_dir():
        source = source / TRACE_FILE
    if not source.is_file():
        raise HwsimError(f"{source}: no such trace (give a trace.json or a run folder)")
    out = Path(args.out) if args.out else source.with_name(PFTRACE_FILE)
    count = convert_file(source, out)
    print(f"wrote {out} ({count:,} events); open it in https://ui.perfetto.dev")
    return 0

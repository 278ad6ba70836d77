"""``hwsim mcp [--write-root DIR]``: serve the loop's tools over MCP on stdin/stdout."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "mcp", help="serve run, report, advise, tune, fuzz and sweep to an agent (MCP, stdio)"
    )
    parser.add_argument(
        "--write-root",
        metavar="DIR",
        help="let tools write below DIR (runs, caches, reproductions); default: read-only",
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from hwsim.errors import HwsimError

    try:
        from hwsim.mcp.server import make_server
    except ImportError as exc:
        raise HwsimError(f"hwsim mcp needs the MCP SDK: pip install 'hwsim[mcp]' ({exc})") from None
    make_server(args.write_root).run("stdio")
    return 0

"""Entry point of the ``hwsim`` command: argument parsing and the one-line error contract."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hwsim.errors import HwsimError


def build_parser() -> argparse.ArgumentParser:
    from hwsim.cli import config_cmd, demo_cmd, plot_cmd, report_cmd, run_cmd, sweep_cmd

    parser = argparse.ArgumentParser(
        prog="hwsim", description="Cycle-level simulator of AWS Trainium NeuronCores."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (demo_cmd, config_cmd, run_cmd, report_cmd, plot_cmd, sweep_cmd):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user errors print ``hwsim: error: ...`` on one line and return 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except HwsimError as exc:
        if args.debug:
            raise
        print(f"hwsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hwsim: interrupted", file=sys.stderr)
        return 130


def add_config_arguments(parser: argparse.ArgumentParser, default: str = "trn2") -> None:
    """The ``--config NAME|PATH`` and repeatable ``--set KEY=VALUE`` options."""
    parser.add_argument(
        "--config", default=default, help=f"preset name or YAML path (default {default})"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config field by dotted path, e.g. tensor_engine.rows=64 (repeatable)",
    )


if __name__ == "__main__":
    sys.exit(main())

"""Entry point of the ``hwsim`` command: argument parsing and the one-line error contract."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from hwsim.errors import HwsimError


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like every other user error: what was
    wrong and where to look (argparse's default prints the whole usage first). Subcommand
    parsers are made of the same class (``add_subparsers`` takes the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"hwsim: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    from hwsim.advise import cli as advise_cmd
    from hwsim.cli import config_cmd, demo_cmd, plot_cmd, report_cmd, run_cmd, sweep_cmd
    from hwsim.fuzz import cli as fuzz_cmd
    from hwsim.mcp import cli as mcp_cmd
    from hwsim.tune import cli as tune_cmd

    parser = OneLineParser(
        prog="hwsim", description="Cycle-level simulator of AWS Trainium NeuronCores."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (demo_cmd, config_cmd, run_cmd, report_cmd, plot_cmd, sweep_cmd):
        module.register(commands)
    for module in (advise_cmd, tune_cmd, fuzz_cmd, mcp_cmd):  # the evaluation loop
        module.register(commands)
    _register_plugins(commands, argv)
    return parser


#: Entry-point group of commands that other packages add (``bridge`` adds ``validate`` and
#: ``export``, which need torch). hwsim itself never imports them: that keeps ``hwsim`` free of
#: torch and the dependency one-way (bridge -> hwsim).
PLUGIN_GROUP = "hwsim.commands"


def _register_plugins(commands: argparse._SubParsersAction, argv: Sequence[str] | None) -> None:
    """Load a plugin command only when it is the one being run (importing torch takes seconds);
    the others appear in ``hwsim --help`` by name."""
    from importlib.metadata import entry_points

    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    wanted = words[0] if words else None
    for point in entry_points(group=PLUGIN_GROUP):
        if point.name == wanted:
            point.load()(commands)
        else:
            commands.add_parser(point.name, help=f"(from {point.value.split(':')[0]})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user errors print ``hwsim: error: ...`` on one line and return 2."""
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (one line, printed) returns 2; --help exits
        if exc.code == 2:
            return 2
        raise
    try:
        return int(args.handler(args) or 0)
    except HwsimError as exc:
        if args.debug:
            raise
        print(f"hwsim: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user named cannot be used: too long, no access, ...
        if args.debug or exc.filename is None:  # no file named: not an input's fault, show it
            raise
        print(f"hwsim: error: {_os_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hwsim: interrupted", file=sys.stderr)
        return 130


def _os_error_line(exc: OSError) -> str:
    """``PATH: what the system said`` (long paths shortened), with what to do where it is clear."""
    import errno

    from hwsim.output_paths import shown

    hints = {errno.ENAMETOOLONG: "name a shorter path", errno.EACCES: "check its permissions"}
    hint = hints.get(exc.errno or 0)
    return f"{shown(exc.filename)}: {exc.strerror or exc}" + (f"; {hint}" if hint else "")


def positive_int(text: str) -> int:
    """An argparse ``type``: a count of at least 1 (``int`` alone takes -1 and 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text[:40]}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


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

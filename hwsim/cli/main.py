"""Entry point of the ``hwsim`` command: argument parsing and the one-line error contract."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from hwsim import __version__
from hwsim.errors import HwsimError, cut_long_values


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like every other user error: what was
    wrong and where to look (argparse's default prints the whole usage first). Subcommand
    parsers are made of the same class (``add_subparsers`` takes the parent's class)."""

    def error(self, message: str) -> NoReturn:
        where = "" if self.prog == "hwsim" else f"{self.prog}: "  # a subcommand's own name
        self.exit(2, f"hwsim: error: {where}{message} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    from hwsim.advise import cli as advise_cmd
    from hwsim.cli import (
        config_cmd,
        demo_cmd,
        pftrace_cmd,
        plot_cmd,
        report_cmd,
        run_cmd,
        sweep_cmd,
    )
    from hwsim.fuzz import cli as fuzz_cmd
    from hwsim.mcp import cli as mcp_cmd
    from hwsim.tune import cli as tune_cmd

    parser = OneLineParser(
        prog="hwsim", description="Cycle-level simulator of AWS Trainium NeuronCores."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"hwsim {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (demo_cmd, config_cmd, run_cmd, report_cmd, plot_cmd, pftrace_cmd, sweep_cmd):
        module.register(commands)
    for module in (advise_cmd, tune_cmd, fuzz_cmd, mcp_cmd):  # the evaluation loop
        module.register(commands)
    _register_plugins(commands, argv)
    _debug_anywhere(commands)
    return parser


def _debug_anywhere(commands: argparse._SubParsersAction) -> None:
    """``--debug`` also after the subcommand (``hwsim run X --debug``), as pytest's flags go
    anywhere; the subcommand's copy sets it only when given (SUPPRESS keeps the top's False)."""
    for sub in {id(p): p for p in commands.choices.values()}.values():
        for action in sub._actions:  # nested subcommands (hwsim sweep run) get theirs too
            if isinstance(action, argparse._SubParsersAction):
                _debug_anywhere(action)
        if "--debug" not in sub._option_string_actions:
            sub.add_argument(
                "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
            )


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
            commands.add_parser(point.name, help=_plugin_summary(point.value.split(":")[0]))


def _plugin_summary(module: str) -> str:
    """What a plugin command does, for ``hwsim --help``, from its module's docstring, read from
    the source without importing it (the import would load torch): the text after the
    ``hwsim NAME ...``: usage at its start, up to the first full stop."""
    import ast
    import importlib.util
    from pathlib import Path

    try:
        package, _, leaf = module.rpartition(".")
        spec = importlib.util.find_spec(package)  # the package's folder, not its import
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        files = [Path(folder) / f"{leaf}.py" for folder in folders]
        source = next((f.read_text(encoding="utf-8") for f in files if f.is_file()), "")
        text = ast.get_docstring(ast.parse(source)) if source else None
    except (ImportError, OSError, SyntaxError, ValueError):
        text = None
    if not text:
        return f"(from {module})"
    first = " ".join(text.split("\n\n")[0].split())
    summary = first.split("``: ", 1)[-1] if first.startswith("``") else first
    return summary.split(". ")[0].rstrip(".").replace("``", "")


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
        print(f"hwsim: error: {cut_long_values(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `hwsim run ... --json | head`: the reader left; say nothing more
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a writer the pipe closed on
    except OSError as exc:  # a path the user named cannot be used: too long, no access, ...
        if args.debug or exc.filename is None:  # no file named: not an input's fault, show it
            raise
        print(f"hwsim: error: {cut_long_values(_os_error_line(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hwsim: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # hwsim's commands return; this is user code (a kernel file) exiting
        if args.debug:
            raise
        print(f"hwsim: error: {_exit_line(exc)}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so Python's flush at exit does not raise again on the pipe."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _exit_line(exc: SystemExit) -> str:
    """What to say when code a command ran (a workload or kernel file) called ``sys.exit``."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return (
        f"user code called sys.exit({exc.code!r}){where}; a kernel or workload file must not "
        "exit (--debug shows the traceback)"
    )


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


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number above 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text[:40]}'") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text[:40]}")
    return value


def add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that run a kernel's Python and check its reads:
    ``--max-instructions``, ``--trace-timeout`` (``hwsim.lang.watchdog``), ``--no-initcheck``."""
    parser.add_argument(
        "--max-instructions",
        type=positive_int,
        metavar="N",
        help="stop tracing a kernel past N instructions (default 4,000,000)",
    )
    parser.add_argument(
        "--trace-timeout",
        type=positive_float,
        metavar="S",
        help="stop tracing a kernel after S seconds (default 60)",
    )
    parser.add_argument(
        "--no-initcheck",
        action="store_true",
        help="do not check for reads of memory nothing wrote (checked by default)",
    )


def add_out_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    help_text: str,
    *,
    dest: str = "out",
    old_output_flag: bool = False,
    **kwargs: Any,
) -> argparse.Action:
    """The one output flag every writing command shares: ``-o/--out PATH``. With
    ``old_output_flag``, the ``--output`` spelling those commands had earlier still parses (so
    no script breaks) but is not shown in ``--help``."""
    names = ("-o", "--out", "--output") if old_output_flag else ("-o", "--out")
    action = parser.add_argument(*names, dest=dest, help=help_text, **kwargs)
    action.option_strings = ["-o", "--out"]  # --output stays in the parser's lookup table only
    return action


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

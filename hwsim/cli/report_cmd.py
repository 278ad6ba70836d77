"""``hwsim report TRACE|RUN_DIR [--json]``: print the summary of a saved run."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "report", help="print the summary of a saved trace.json or run folder"
    )
    parser.add_argument(
        "path", metavar="TRACE|RUN_DIR", help="a trace.json, summary.json or run folder"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=_report)


@contextlib.contextmanager
def summary_fields_checked(path: str) -> Iterator[None]:
    """Showing a saved summary: a field of the wrong kind (a file edited, or damaged in a way
    its schema line survived) is one line naming the file; ``--debug`` shows where it failed."""
    from hwsim.errors import HwsimError

    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise HwsimError(
            f"{path}: its run summary has a missing or malformed field ({type(exc).__name__}: "
            f"{str(exc)[:120]}); was it edited? simulate the run again"
        ) from exc


def _report(args: argparse.Namespace) -> int:
    from hwsim import strict_json
    from hwsim.report.console import report_console
    from hwsim.report.run_summary import print_summary
    from hwsim.trace.outputs import load_summary

    summary = load_summary(args.path)
    if args.json:
        print(strict_json.dumps(summary.to_dict(), default=str))
        return 0
    console = report_console()
    with summary_fields_checked(args.path), console.capture() as captured:
        print_summary(summary, console)  # rendered whole first: a bad field prints nothing
    sys.stdout.write(captured.get())
    _print_advice(args.path, summary)
    return 0


def _print_advice(path: str, summary: object) -> None:
    """The advice section, for a run folder that has its instruction table."""
    from pathlib import Path

    from hwsim.advise.advice import report_lines
    from hwsim.advise.evidence import Evidence
    from hwsim.trace.outputs import TABLES_DIR

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    if (folder / TABLES_DIR / "Instruction.csv").is_file():
        print("\n".join(report_lines(summary, Evidence.from_run_dir(folder))))

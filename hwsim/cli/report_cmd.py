"""``hwsim report TRACE|RUN_DIR [--json]``: print the summary of a saved run."""

from __future__ import annotations

import argparse
import json


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "report", help="print the summary of a saved trace.json or run folder"
    )
    parser.add_argument(
        "path", metavar="TRACE|RUN_DIR", help="a trace.json, summary.json or run folder"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    from hwsim.report.run_summary import print_summary
    from hwsim.trace.outputs import load_summary

    summary = load_summary(args.path)
    if args.json:
        print(json.dumps(summary.to_dict(), default=str))
    else:
        print_summary(summary)
    return 0

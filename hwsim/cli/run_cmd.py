"""``hwsim run WORKLOAD``: build a workload, simulate it on a config, print or write the results."""

from __future__ import annotations

import argparse

from hwsim.cli.main import add_config_arguments, add_kernel_arguments, add_out_argument


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("run", help="simulate a workload, e.g. gemm:512x1024x2048:bf16")
    parser.add_argument(
        "workload",
        nargs="?",
        help="gemm:MxKxN[:dtype], a built-in kernel name (--list), FILE.py:NAME or FILE.hwprog",
    )
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--timing-only", action="store_true", help="skip numerics (for sweeps)")
    add_out_argument(parser, "directory for trace, summary, tables and plots")
    parser.add_argument(
        "--force", action="store_true", help="write into a non-empty --out that is not a run folder"
    )
    parser.add_argument("--list", action="store_true", help="list the built-in workloads")
    add_kernel_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from hwsim.workloads.cli_run import run_from_cli

    return run_from_cli(args)

"""``hwsim demo``: the main job on the built-in default (what README command 1 runs)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="run the main job on the built-in default (trn2)")
    parser.add_argument("--config", default="trn2", help="preset name or YAML path")
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from hwsim.report.preset_summary import print_preset_summary

    print_preset_summary(args.config)
    return 0

"""``hwsim advise RUN_DIR|WORKLOAD``: the bottleneck and ranked recommendations for one run.

A run folder (``hwsim run --out DIR``) is read as it was written: the gains are bounds on its
trace. A workload (anything ``hwsim run`` takes) is simulated here, so each recommendation with
a what-if is simulated again on the same program and its gain measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(commands: argparse._SubParsersAction) -> None:
    from hwsim.cli.main import add_config_arguments

    parser = commands.add_parser(
        "advise", help="name a run's bottleneck and rank what to change, with expected gains"
    )
    parser.add_argument(
        "target", metavar="RUN_DIR|WORKLOAD", help="a run folder, or a workload as hwsim run takes"
    )
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the advice as one JSON object")
    parser.set_defaults(handler=_advise)


def advise_target(target: str, config: str = "trn2", overrides: list[str] | None = None) -> Any:
    """Advice for a run folder or a workload (see the module docstring)."""
    from hwsim.advise.advice import advise
    from hwsim.advise.evidence import Evidence

    path = Path(target)
    if path.is_dir() or path.name.endswith(".json"):
        evidence = Evidence.from_run_dir(path if path.is_dir() else path.parent)
        return advise(evidence.summary, evidence=evidence)
    trace, summary, program, hw = simulate_workload(target, config, overrides or [])
    return advise(summary, trace=trace, program=program, config=hw)


def simulate_workload(text: str, config: str, overrides: list[str]) -> tuple[Any, Any, Any, Any]:
    """(trace, summary, program, config) of a workload simulated timing-only."""
    import dataclasses

    from hwsim.config import load_config
    from hwsim.kernels import warm_up
    from hwsim.machine.simulator import run
    from hwsim.workloads.bounds import check_hbm_fits
    from hwsim.workloads.resolve import resolve_workload

    hw = load_config(config, overrides)
    workload = resolve_workload(text)
    if workload.hbm_bytes is not None:
        check_hbm_fits(workload.hbm_bytes, hw, workload.name)
    warm_up()
    program = workload.program(hw, False)
    result = run(program, hw, numerics=False)
    summary = dataclasses.replace(result.summary, workload=workload.name, config=config)
    return result.trace, summary, program, hw


def _advise(args: argparse.Namespace) -> int:
    advice = advise_target(args.target, args.config, args.overrides)
    if args.json:
        print(json.dumps(advice.to_dict(), default=str))
    else:
        print("\n".join(advice.lines()))
    return 0

"""What ``hwsim run`` does: build the workload, simulate, check numerics, report."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from hwsim import strict_json
from hwsim.config import load_config
from hwsim.errors import IllegalInstructionError, InitCheckError, WorkloadError
from hwsim.lang.watchdog import limits_within
from hwsim.report.run_summary import print_summary
from hwsim.trace.summary import RunSummary
from hwsim.workloads.bounds import check_hbm_fits
from hwsim.workloads.resolve import list_workloads, resolve_workload

#: Appended to an initcheck finding of a front door, where the check is on by default.
INITCHECK_HINT = (
    "reads of memory nothing wrote are checked by default (--no-initcheck runs without the check)"
)


def run_workload(
    workload_text: str,
    config_name: str = "trn2",
    overrides: list[str] | None = None,
    *,
    numerics: bool = True,
    race_check: bool = False,
    initcheck: bool | None = None,
) -> tuple[Any, RunSummary]:
    """Build and simulate a workload (any form ``hwsim.workloads.resolve`` takes, paths relative
    to the working directory); returns (RunResult, summary with numerics fields). Reads of
    never-written memory are an error unless ``initcheck=False`` (``front_door``)."""
    from hwsim.kernels import warm_up
    from hwsim.machine.initcheck import front_door
    from hwsim.machine.simulator import run

    config = load_config(config_name, overrides or [])
    workload = resolve_workload(workload_text)
    if workload.hbm_bytes is not None:  # refused in a moment, not after a cold JIT compile
        check_hbm_fits(workload.hbm_bytes, config, workload.name)
    warm_up()  # JIT compilation is never counted as simulation time
    build_start = time.perf_counter()
    program = workload.program(config, numerics)
    build_s = time.perf_counter() - build_start
    sim_start = time.perf_counter()
    try:
        result = run(
            program,
            config,
            numerics=numerics,
            race_check=race_check,
            initcheck=front_door(initcheck, numerics),
        )
    except InitCheckError as exc:  # on by default here: say how to run without it
        raise InitCheckError(f"{exc}; {INITCHECK_HINT}", exc.findings) from exc
    except IllegalInstructionError as exc:
        from hwsim.workloads.saved import relower_hint

        hint = relower_hint(program, config)
        if not hint:
            raise
        raise type(exc)(f"{exc}{hint}") from exc
    sim_s = time.perf_counter() - sim_start
    summary = dataclasses.replace(
        result.summary,
        workload=workload.name,
        config=config_name,
        instructions_simulated=program.instruction_count,
        wall_build_s=round(build_s, 3),
        wall_simulate_s=round(sim_s, 3),
    )
    if numerics and workload.check is not None:
        summary.record_numerics(workload.check(result.outputs))
    return result, summary


def run_from_cli(args: argparse.Namespace) -> int:
    if args.list:
        for name, description in list_workloads():
            print(f"{name:28s} {description}")
        return 0
    if not args.workload:
        raise WorkloadError("name a workload (e.g. gemm:512x1024x2048:bf16) or use --list")
    if args.out is not None:  # a refused --out fails before the simulation, not after
        from hwsim.outputs_guard import check_output_folder

        check_output_folder(args.out, force=args.force)
    with limits_within(args.max_instructions, args.trace_timeout):  # the tracing watchdog's
        result, summary = run_workload(
            args.workload,
            args.config,
            args.overrides,
            numerics=not args.timing_only,
            initcheck=False if args.no_initcheck else None,
        )
    if args.out is not None or not args.json:
        _write_outputs(result, summary, args.out, args.force)
    if args.json:
        print(strict_json.dumps(summary.to_dict(), default=str))
    else:
        _print_summary(summary)
        _print_advice(result.trace, summary)
    return 0 if summary.numerics_ok is not False else 1


def _write_outputs(result: Any, summary: RunSummary, out: str | None, force: bool) -> None:
    from hwsim.trace.outputs import default_run_dir, write_run_outputs

    out_dir = out or default_run_dir(summary.workload or "run")
    paths = write_run_outputs(result.trace, out_dir, summary=summary, force=force)
    summary.out_dir = str(out_dir)
    summary.files = sorted(str(p) for p in paths.values())


def _print_advice(trace: Any, summary: RunSummary) -> None:
    from hwsim.advise.advice import report_lines
    from hwsim.advise.evidence import Evidence

    print("\n".join(report_lines(summary, Evidence.from_trace(trace, summary))))


def _print_summary(summary: RunSummary) -> None:
    print_summary(summary)
    if summary.numerics_ok is not None:
        print(f"numerics: {summary.numerics_text()}")
    if summary.out_dir is not None:
        print(f"wrote {summary.out_dir}")

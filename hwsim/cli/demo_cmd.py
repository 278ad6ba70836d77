"""``hwsim demo``: the main job on the built-in default (what README command 1 runs).

Today that is: simulate the blocked matmul kernel on trn2 with numerics, check it against numpy,
print the run summary, and write the trace, tables and plots under ``traces/``.
"""

from __future__ import annotations

import argparse

DEMO_WORKLOAD = "gemm:1024x1024x1024:bf16"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="run the main job on the built-in default (trn2)")
    parser.add_argument("--config", default="trn2", help="preset name or YAML path")
    parser.add_argument("--workload", default=DEMO_WORKLOAD, help="workload to simulate")
    from hwsim.cli.main import add_out_argument

    add_out_argument(parser, "output directory (default: a fresh folder under traces/)")
    parser.add_argument(
        "--force", action="store_true", help="write into a non-empty --out that is not a run folder"
    )
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from hwsim.config import load_config
    from hwsim.outputs_guard import check_output_folder
    from hwsim.report.run_summary import print_summary
    from hwsim.trace.outputs import default_run_dir, write_run_outputs
    from hwsim.workloads.cli_run import run_workload
    from hwsim.workloads.resolve import parse_workload

    load_config(args.config)  # a bad config, workload or --out fails before anything is printed
    parse_workload(args.workload)
    if args.out is not None:
        check_output_folder(args.out, force=args.force)
    print(f"hwsim demo: {args.workload} on {args.config}, with numerics, checked against numpy\n")
    result, summary = run_workload(args.workload, args.config)
    out_dir = args.out or default_run_dir(f"demo-{args.workload}")
    paths = write_run_outputs(result.trace, out_dir, summary=summary, force=args.force)
    print_summary(summary)
    ok = summary.numerics_ok is not False
    print(f"\nnumerics: {summary.numerics_text()}")
    count, wall_s = summary.instructions_simulated, summary.wall_simulate_s
    print(f"simulated {count} instructions in {wall_s} s")
    print(f"wrote {out_dir}/: " + ", ".join(sorted(p.name for p in paths.values())))
    print(f"open {paths['trace']} in https://ui.perfetto.dev to browse the timeline")
    return 0 if ok else 1

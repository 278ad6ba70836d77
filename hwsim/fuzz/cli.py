"""``hwsim fuzz --cases N --seed S``: generated kernels through every check (``hwsim.fuzz.checks``);
failures shrunk and written as ready-to-run files; results kept in SQLite (re-running resumes)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(commands: argparse._SubParsersAction) -> None:
    from hwsim.cli.main import add_out_argument, positive_int

    parser = commands.add_parser(
        "fuzz", help="generate kernels and check numerics, determinism, races and timing"
    )
    parser.add_argument("--cases", type=positive_int, default=200, help="cases 0..N-1 of the seed")
    parser.add_argument("--seed", type=int, default=0, help="which cases (same seed, same cases)")
    parser.add_argument(
        "--mix",
        default=None,
        metavar="KIND=N,...",
        help="kinds of case in turn (default kernel=3,graph=1: graph needs the bridge)",
    )
    parser.add_argument("--config", default="trn2", help="preset name or YAML path (default trn2)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="cases at a time")
    parser.add_argument("--backend", default="loky", help="loky (local), dask or ray")
    parser.add_argument("--address", help="an existing Dask scheduler or Ray cluster")
    parser.add_argument("--db", help="SQLite file of results (resumes; default: none)")
    add_out_argument(parser, "folder for the reproductions of failing cases")
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.set_defaults(handler=_fuzz)


def _print_case(result: dict[str, Any]) -> None:
    if result["status"] == "fail":
        checks = ", ".join(sorted({f["check"] for f in result["failures"]}))
        print(f"  case {result['index']} ({result['kind']}): FAIL ({checks})", flush=True)


def _fuzz(args: argparse.Namespace) -> int:
    from hwsim.fuzz.kinds import DEFAULT_MIX
    from hwsim.fuzz.runner import fuzz

    result = fuzz(
        args.cases,
        args.seed,
        args.config,
        mix=args.mix or DEFAULT_MIX,
        jobs=args.jobs,
        backend=args.backend,
        address=args.address,
        db=args.db,
        out=args.out,
        force=args.force,
        on_case=None if args.json else _print_case,
    )
    if args.json:
        print(json.dumps(result, default=str))
        return 1 if result["failed"] else 0
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(result["kinds"].items()))
    print(
        f"{result['cases']} cases ({kinds}) of seed {result['seed']} on {result['config']} "
        f"({result['ran']} run now, {result['wall_s']:,.1f} s; the cases' CPU time "
        f"{result['case_cpu_s']:,.1f} s): {result['passed']} passed, {result['failed']} failed"
    )
    for check, count in sorted(result["failures_by_check"].items()):
        print(f"  {check}: {count}")
    for failure in result["failures"]:
        spec = failure["shrunk"] or {}
        print(
            f"  {failure['kind']} case {failure['index']}: "
            f"{failure['failures'][0]['message'][:160]}"
        )
        if spec:
            print(f"    shrunk to {len(spec['ops'])} op(s)")
    for path in result["reproductions"]:
        print(f"  wrote {path}")
    return 1 if result["failed"] else 0

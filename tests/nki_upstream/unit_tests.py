"""Runs nki-samples' own unit tests (vendored ``test/unit`` at 7af4e4d) on the simulator, as
their README says, with ``--simulation-only`` and the one-line plugin ``install_plugin``:

    .venv/bin/python -m tests.nki_upstream.unit_tests -n 1       # all of them, one at a time
    .venv/bin/python -m tests.nki_upstream.unit_tests -k resize  # a subset (pytest's -k)

Each flash_attn_bwd case at seqlen 8192 needs about 16 GB for its own numpy reference (and
about 145 s alone): run with ``-n 1`` on a machine with that much free. It prints each test's
outcome and the tally, and with ``--record`` keeps them in docs/nki-conformance.json, from
which docs/nki-support.md is generated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from hwsim.nki import upstream
from tests.nki_upstream import record

UNIT = upstream.NKI_SAMPLES / "test" / "unit"
CHECKOUT = Path(__file__).resolve().parents[2]
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+?)(?: - (.*))?$")


def run(select: str = "", workers: int = 1) -> dict[str, dict[str, str]]:
    """{test id: {"status", "reason"}} of one pytest run of the unit tests."""
    reasons_file = Path(tempfile.mkdtemp(prefix="hwsim_nki_unit_")) / "reasons.jsonl"
    env = dict(os.environ, PYTHONPATH=f"{upstream.NKI_SAMPLES / 'src'}{os.pathsep}{CHECKOUT}")
    env["HWSIM_NKI_REASONS"] = str(reasons_file)
    command = [sys.executable, "-m", "pytest", "-p", "tests.nki_upstream.install_plugin"]
    command += ["-p", "no:cacheprovider", "--simulation-only", "-q", "-rA", "-o", "addopts="]
    command += ["-n", str(workers)] if workers > 1 else []
    command += ["-k", select] if select else []
    done = subprocess.run(command, cwd=UNIT, env=env, capture_output=True, text=True)
    outcomes = {}
    for line in done.stdout.splitlines():
        found = _LINE.match(line)
        if found:
            status, test, reason = found.groups()
            outcomes[_short_id(test)] = {"status": status.lower(), "reason": (reason or "")[:300]}
    if not outcomes:
        raise RuntimeError(f"no test outcomes in the pytest output:\n{done.stdout[-2000:]}")
    for test, reason in _reasons(reasons_file).items():
        if test in outcomes:
            outcomes[test]["reason"] = reason
    return outcomes


def collected() -> list[str]:
    """The ids of every unit test ``--simulation-only`` selects (pytest --collect-only)."""
    env = dict(os.environ, PYTHONPATH=f"{upstream.NKI_SAMPLES / 'src'}{os.pathsep}{CHECKOUT}")
    command = [sys.executable, "-m", "pytest", "-p", "tests.nki_upstream.install_plugin"]
    command += ["-p", "no:cacheprovider", "--simulation-only", "--collect-only", "-q"]
    done = subprocess.run([*command, "-o", "addopts="], cwd=UNIT, env=env, capture_output=True)
    lines = done.stdout.decode().splitlines()
    return [_short_id(line) for line in lines if "::" in line]


def _short_id(nodeid: str) -> str:
    """``.../test_x.py::Class::test[params]`` -> ``test_x.py::Class::test[params]``."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


def _reasons(path: Path) -> dict[str, str]:
    """{test id: reason} the plugin wrote (the first failing phase of each test)."""
    if not path.exists():
        return {}
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        found.setdefault(_short_id(entry["test"]), entry["reason"])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", default="", help="pytest -k selection")
    parser.add_argument("-n", type=int, default=1, help="pytest-xdist workers (at most 2)")
    parser.add_argument("--record", action="store_true", help="keep the outcomes for the docs")
    args = parser.parse_args(argv)
    outcomes = run(args.k, args.n)
    for test, outcome in sorted(outcomes.items()):
        print(f"{outcome['status']:7} {test}  {outcome['reason']}")
    passed = sum(o["status"] == "passed" for o in outcomes.values())
    print(f"\n{passed} of {len(outcomes)} nki-samples unit tests pass on the simulator")
    if args.record:
        record.update("unit_tests", outcomes)
        record.fill_unrun("unit_tests", {test: {} for test in collected()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/nki-conformance.json: the outcomes of the last recorded conformance runs (the kernels'
and the unit tests'), from which ``python -m hwsim.nki.support_docs`` writes the pass rates
into docs/nki-support.md.

A long run started without ``--record`` can be recorded from what it printed:

    .venv/bin/python -m tests.nki_upstream.record kernels harness.log
    .venv/bin/python -m tests.nki_upstream.record unit_tests unit.log
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from hwsim.nki.support_docs import CONFORMANCE

#: ``harness.py``'s line per kernel and ``unit_tests.py``'s line per test.
_KERNEL = re.compile(r"^(pass|wrong|error|skip) +[\d.]+s (\S+)  ?(.*)$")
_UNIT = re.compile(r"^(passed|failed|error|skipped|xfail|xpass) +(\S+)  ?(.*)$")


def update(section: str, outcomes: dict[str, Any]) -> None:
    """Replace the recorded outcomes of the tests run (others of the section are kept)."""
    data = json.loads(CONFORMANCE.read_text()) if CONFORMANCE.exists() else {}
    data.setdefault(section, {}).update(outcomes)
    CONFORMANCE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(outcomes)} outcomes in {CONFORMANCE}")


#: The outcome of a test or kernel no recorded run has reached yet (kept visible in the docs,
#: so that the tally's denominator is the whole suite).
NOT_RUN = {"status": "not run", "reason": "not run yet: no recorded run reached it"}


def fill_unrun(section: str, ids: dict[str, dict[str, str]]) -> None:
    """Record ``ids`` (id -> extra fields) as not run where no outcome is recorded."""
    data = json.loads(CONFORMANCE.read_text()) if CONFORMANCE.exists() else {}
    recorded = data.setdefault(section, {})
    missing = {i: {**extra, **NOT_RUN} for i, extra in ids.items() if i not in recorded}
    if missing:
        update(section, missing)


def kernel_outcome(case: Any, status: str, detail: str) -> dict[str, str]:
    """One kernel's record: its file, status and reason."""
    file = case.file if isinstance(case.file, str) else "/".join(case.file)
    return {"file": file, "status": status, "reason": detail[:300]}


def from_log(section: str, text: str) -> dict[str, Any]:
    """The outcomes a harness (``kernels``) or unit-test (``unit_tests``) run printed."""
    outcomes: dict[str, Any] = {}
    if section == "kernels":
        from tests.nki_upstream.catalog import cases

        by_id = {c.id: c for c in cases()}
        for line in text.splitlines():
            found = _KERNEL.match(line)
            if found and found.group(2) in by_id:
                status, case_id, detail = found.groups()
                outcomes[case_id] = kernel_outcome(by_id[case_id], status, detail.strip())
    else:
        for line in text.splitlines():
            found = _UNIT.match(line)
            if found:
                status, test, reason = found.groups()
                outcomes[test] = {"status": status, "reason": reason.strip()[:400]}
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="record a conformance run from its output")
    parser.add_argument("section", choices=("kernels", "unit_tests"))
    parser.add_argument("log", type=Path)
    args = parser.parse_args(argv)
    outcomes = from_log(args.section, args.log.read_text())
    if not outcomes:
        print(f"no outcomes in {args.log}")
        return 1
    update(args.section, outcomes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

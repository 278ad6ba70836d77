"""What ``hwsim fuzz --cases 200 --seed 0`` found and is not fixed yet, one shrunk reproduction
per file in ``fuzz_findings/`` (each runs on its own: ``python FILE``), listed in the README's
limits. Each test asserts the case passes every check, and is expected to fail until the
finding is fixed (strict: a fix makes it pass, and the test then says to drop its xfail and
the file)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from hwsim.bridge import fuzz_graphs

FINDINGS = sorted((Path(__file__).parent / "fuzz_findings").glob("case_*.py"))


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="a graph pass that is on makes this graph slower")
@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.stem)
def test_fuzz_finding(path):
    spec = runpy.run_path(str(path))["SPEC"]
    assert fuzz_graphs.check_case(fuzz_graphs.check_spec(spec), "trn2") == []


def test_findings_are_kept_as_files():
    assert FINDINGS, "the findings listed in the README's limits have their files here"
    for path in FINDINGS:
        fuzz_graphs.check_spec(runpy.run_path(str(path))["SPEC"])

"""Speed work must not change a tick: the full summary and every trace record of several programs
(``fingerprint_programs.CASES``) equal what main produced before the issue-16 simulator speed
work (tests/data/sim_fingerprints.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sim.fingerprint_programs import CASES, DATA, fingerprint

CAPTURED = json.loads(DATA.read_text())


def test_every_case_is_captured():
    assert list(CAPTURED) == list(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_summary_and_trace_unchanged(name: str, tmp_path: Path):
    found = fingerprint(*CASES[name](tmp_path))
    expected = CAPTURED[name]
    assert found["summary"] == expected["summary"]
    assert found == expected

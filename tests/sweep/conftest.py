"""Every sweep test starts with an empty in-process lowering cache: a program another test built
for the same config and workload would otherwise be reused, and a test that counts builds (the
``counted`` workload's log) would miss them — whether it does depends on which tests ran before
it in the same pytest worker."""

from __future__ import annotations

import pytest

from hwsim.sweep import execute
from hwsim.sweep.lowering import ProgramCache


@pytest.fixture(autouse=True)
def _fresh_lowering_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute, "_CACHE", ProgramCache())

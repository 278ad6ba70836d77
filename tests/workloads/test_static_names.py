"""A sweep spec's FILE.py:NAME is checked from the file's syntax tree: nothing is imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.errors import WorkloadError
from hwsim.workloads.static_names import check_defines

SOURCE = """
import os, numpy as np
from hwsim import lang as language
from pathlib import Path as P
RUNS = 1
a, (b, c) = 1, (2, 3)
total: int = 0
total += 1
if RUNS:
    chosen = 1
else:
    other = 2
try:
    import missing_module
except ImportError as error:
    fallback = 3
for index in range(2):
    looped = index
with open(__file__) as handle:
    pass
print(walrus := 4)

@language.kernel
def kernel(x):
    hidden_local = 1

class Model:
    hidden_attribute = 2

async def later():
    pass
"""
BOUND = (
    "os np language P RUNS a b c total chosen other missing_module fallback index looped "
    "handle walrus kernel Model later"
)


@pytest.mark.parametrize("name", BOUND.split())
def test_every_top_level_binding_is_found(tmp_path: Path, name: str) -> None:
    (tmp_path / "w.py").write_text(SOURCE)
    check_defines(tmp_path / "w.py", name, f"w.py:{name}")


@pytest.mark.parametrize("name", ["hidden_local", "hidden_attribute", "kernal"])
def test_a_name_the_file_does_not_bind_is_one_line(tmp_path: Path, name: str) -> None:
    (tmp_path / "w.py").write_text(SOURCE)
    with pytest.raises(WorkloadError, match=f"w.py:{name}: w.py defines no '{name}'"):
        check_defines(tmp_path / "w.py", name, f"w.py:{name}")


def test_the_closest_names_are_offered(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(SOURCE)
    with pytest.raises(WorkloadError, match=r"\(did you mean 'kernel'\?\)"):
        check_defines(tmp_path / "w.py", "kernal", "w.py:kernal")


@pytest.mark.parametrize(
    "source",
    ["from helpers import *\n", "globals()['made'] = 1\n", "exec('made = 1')\n"],
)
def test_bindings_the_tree_cannot_follow_pass(tmp_path: Path, source: str) -> None:
    (tmp_path / "w.py").write_text(source)
    check_defines(tmp_path / "w.py", "made", "w.py:made")


def test_nothing_is_run_and_a_syntax_error_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text("open('RAN', 'w')\ndef build(config):\n    pass\n")
    check_defines(tmp_path / "w.py", "build", "w.py:build")
    assert not Path("RAN").exists() and not (tmp_path / "RAN").exists()
    (tmp_path / "bad.py").write_text("def build(:\n")
    with pytest.raises(WorkloadError, match=r"bad.py, line 1: .*\(the file does not parse\)"):
        check_defines(tmp_path / "bad.py", "build", "bad.py:build")

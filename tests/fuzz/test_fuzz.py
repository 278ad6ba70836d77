"""hwsim fuzz: a fixed sample in CI, checks that can fail, shrinking, reproductions, the store."""

from __future__ import annotations

import json
import runpy
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwsim.fuzz import checks
from hwsim.fuzz import interpret as fuzz_interpret
from hwsim.fuzz.checks import check_case
from hwsim.fuzz.runner import fuzz
from hwsim.fuzz.shrink import reproduction, shrink
from hwsim.fuzz.spec import (
    FuzzError,
    HypothesisDraw,
    NumpyDraw,
    check_spec,
    generate,
    value_shapes,
)
from hwsim.fuzz.store import FuzzStore

#: A case with every kind of op (written by hand, so the tests do not depend on the generator).
EVERY_OP = {
    "dtype": "bf16",
    "shape": [64, 96],
    "inputs": 2,
    "ops": [
        ["tt", "add", 0, 1, "vector"],
        ["ts", "multiply", 2, 0.5, "gpsimd"],
        ["act", "tanh", 3, 1.0],
        ["reduce", "max", 4],
        ["bcast", "subtract", 4, 5],
        ["copy", 6, "gpsimd"],
        ["mm", 7, 1],
    ],
    "outputs": [6, 8],
}


def test_fixed_sample_passes_every_check(tmp_path):
    """The CI sample: the first cases of seed 0, each through every check."""
    result = fuzz(3, seed=0, config="trn2", mix="kernel", db=tmp_path / "fuzz.sqlite")
    assert result["cases"] == 3 and result["failed"] == 0, result["failures"]


def test_a_case_with_every_op_passes_and_generation_is_seeded():
    assert check_case(check_spec(EVERY_OP)) == []
    assert value_shapes(EVERY_OP)[-1] == (96, 96)
    assert generate(NumpyDraw(7, 3)) == generate(NumpyDraw(7, 3))
    assert generate(NumpyDraw(7, 3)) != generate(NumpyDraw(7, 4))


@settings(
    max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.data())
def test_hypothesis_drives_the_generator(data):
    """Hypothesis draws the generator's choices (and would shrink through them)."""
    spec = check_spec(generate(HypothesisDraw(data)))
    assert check_case(spec) == []


def test_numerics_check_sees_a_wrong_result(monkeypatch):
    monkeypatch.setitem(fuzz_interpret.ALU, "add", lambda a, b: a + b + 0.25)
    failures = check_case(EVERY_OP)
    assert {f.check for f in failures} == {"numerics"}  # both outputs read the sum
    assert "max |error|" in failures[0].message


def test_monotone_check_sees_a_machine_that_is_not_faster(monkeypatch):
    monkeypatch.setitem(
        checks.FASTER,
        "DMA bandwidth x2",
        lambda c: {"dma.start_latency_ns": 10 * c.dma.start_latency_ns},
    )
    assert [f.check for f in check_case(EVERY_OP)] == ["monotone"]


def test_roofline_check_sees_a_run_below_its_floor():
    from hwsim.trace.summary import Peaks, RunSummary

    summary = RunSummary(total_ns=10.0, hbm_bytes=10_000, peaks=Peaks(hbm_bytes_per_s=1e11))
    (failure,) = checks._roofline(summary)
    assert failure.check == "roofline" and "HBM bytes" in failure.message


def test_shrinking_keeps_the_failure_and_drops_the_rest():
    def fails(spec):  # a stand-in bug: any matmul of more than 4 partitions
        shapes = value_shapes(spec)
        return any(op[0] == "mm" and shapes[op[1]][0] > 4 for op in spec["ops"])

    small, attempts = shrink(EVERY_OP, fails)
    assert fails(small) and attempts > 0
    assert [op[0] for op in small["ops"]] == ["mm"]
    assert small["shape"][0] == 8 and small["inputs"] == 1


def test_reproduction_file_runs(tmp_path, capsys):
    spec = {
        "dtype": "fp32",
        "shape": [4, 8],
        "inputs": 1,
        "ops": [["act", "exp", 0, 0.5]],
        "outputs": [1],
    }
    path = tmp_path / "case.py"
    path.write_text(
        reproduction(spec, [{"check": "numerics", "message": "example"}], "test", "trn2")
    )
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(path), run_name="__main__")
    assert exit_info.value.code == 0
    assert "no check fails" in capsys.readouterr().out
    namespace = runpy.run_path(str(path))
    assert namespace["SPEC"] == spec  # the kernel in the file and the checked spec are one case


def test_store_resumes_and_refuses_what_is_not_its_own(tmp_path):
    db = tmp_path / "fuzz.sqlite"
    first = fuzz(2, seed=4, mix="kernel", db=db)
    again = fuzz(3, seed=4, mix="kernel", db=db)
    assert first["ran"] == 2 and again["ran"] == 1 and again["cases"] == 3
    with sqlite3.connect(db) as raw:
        raw.execute('UPDATE cases SET spec=\'{"dtype": "fp64"}\' WHERE idx=0')
    with pytest.raises(FuzzError, match="damaged"):
        fuzz(3, seed=4, mix="kernel", db=db)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE t (x)")
    with pytest.raises(FuzzError, match="not a fuzz database"):
        FuzzStore(other)
    with pytest.raises(FuzzError):
        check_spec({**EVERY_OP, "ops": [["mm", 0, 5]]})


def test_cli_fuzz_json_and_reproductions(tmp_path, capsys, monkeypatch):
    from hwsim.cli import main

    assert main(["fuzz", "--cases", "2", "--seed", "9", "--mix", "kernel", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cases"] == 2 and data["failed"] == 0
    # a planted bug (any case of more than one partition fails): shrunk, written as files
    from hwsim.fuzz import runner
    from hwsim.fuzz.checks import Failure

    def planted(kind, spec, config):
        return [Failure("numerics", "planted")] if spec["shape"][0] > 1 else []

    monkeypatch.setattr(runner, "check_case", planted)
    code = main(
        ["fuzz", "--cases", "2", "--seed", "1", "--mix", "kernel", "--out", str(tmp_path / "repro")]
    )
    out = capsys.readouterr().out
    assert code == 1 and "kernel numerics: 2" in out and "wrote" in out
    files = sorted((tmp_path / "repro").glob("case_1_*.py"))
    assert len(files) == 2
    spec = runpy.run_path(str(files[0]))["SPEC"]
    assert spec["shape"][0] == 2 and "planted" in files[0].read_text()

"""hwsim fuzz's graph kind: random PyTorch graphs through torch.compile, a fixed sample, checks
that see planted errors, specs checked on the way back in, reproductions."""

from __future__ import annotations

import runpy

import pytest
import torch

from hwsim.bridge import fuzz_graphs, fuzz_graphs_shrink
from hwsim.fuzz.kinds import load_kind, parse_mix
from hwsim.fuzz.spec import FuzzError, NumpyDraw

#: A training case with a broadcast input, a transposed view, a row op and a matmul.
CASE = {
    "dtype": "float32",
    "train": True,
    "inputs": [[8, 16], [16], [8, 16]],
    "ops": [["add", 0, 1], ["transpose", 3], ["softmax", 4], ["matmul", 5, 2], ["gelu", 6]],
    "outputs": [7],
}


def test_graph_kind_is_found_by_name_and_a_sample_passes():
    kind = load_kind("graph")
    assert parse_mix("kernel=3,graph=1") == ("kernel",) * 3 + ("graph",)
    assert kind.check_case(fuzz_graphs.check_spec(CASE), "trn2") == []
    spec = kind.generate(NumpyDraw(0, 1))
    assert kind.check_spec(spec) is spec and spec == kind.generate(NumpyDraw(0, 1))


@pytest.mark.slow
def test_graph_checks_see_a_wrong_gradient_and_a_slower_pass(monkeypatch):
    good = torch.linspace(-3, 3, 64).reshape(8, 8)
    assert fuzz_graphs._compare("gradient", (good,), (good.clone(),), "float32") == []
    (wrong,) = fuzz_graphs._compare("gradient", (good * 1.01,), (good,), "float32")
    assert wrong.check == "numerics" and "gradient 0" in wrong.message
    monkeypatch.setattr(fuzz_graphs, "PASS_SLACK", -0.9)  # every pass now "loses" time
    assert "passes" in {f.check for f in fuzz_graphs.check_case(CASE, "trn2")}


def test_graph_specs_are_checked_and_shrunk_and_written():
    with pytest.raises(FuzzError, match="not a valid graph case"):
        fuzz_graphs.check_spec({**CASE, "ops": [["matmul", 0, 0]]})
    with pytest.raises(FuzzError):
        fuzz_graphs.check_spec({**CASE, "ops": [["system", 0]]})
    smaller = list(fuzz_graphs_shrink.candidates(CASE))
    assert smaller and all(fuzz_graphs.check_spec(s) for s in smaller if _valid(s))
    text = fuzz_graphs_shrink.reproduction(
        CASE, [{"check": "passes", "message": "x"}], "test", "trn2"
    )
    namespace = {}
    exec(compile(text, "case.py", "exec"), namespace)  # the file's own source, not a spec's
    assert namespace["SPEC"] == CASE


def _valid(spec):
    try:
        fuzz_graphs.check_spec(spec)
    except FuzzError:
        return False
    return True


def test_reproduction_file_runs(tmp_path, capsys):
    spec = {
        "dtype": "float32",
        "train": False,
        "inputs": [[4, 8]],
        "ops": [["relu", 0]],
        "outputs": [1],
    }
    path = tmp_path / "case.py"
    path.write_text(fuzz_graphs_shrink.reproduction(spec, [], "test", "trn2"))
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(path), run_name="__main__")
    assert exit_info.value.code == 0 and "no check fails" in capsys.readouterr().out

"""``hwsim run FILE.py:NAME`` where NAME() returns a torch model and example inputs: the bridge's
``torch`` workload kind (entry point ``hwsim.workloads``), lowered as export lowers, checked
against the model's CPU outputs; and ``hwsim export FILE.py:FACTORY`` sharing the name lookup."""

from __future__ import annotations

import importlib
import json
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwsim.bridge import export_cmd
from hwsim.bridge.workload import model_workload
from hwsim.config import load_config
from hwsim.errors import WorkloadError
from hwsim.machine.simulator import run
from hwsim.workloads.file_workload import KIND_GROUP, MODEL_KIND
from hwsim.workloads.resolve import resolve_workload

cli = importlib.import_module("hwsim.cli.main")

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def model():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
        return net, (torch.randn(8, 64, generator=torch.Generator().manual_seed(1)),)


    def with_kwargs():
        torch.manual_seed(0)
        net = nn.Linear(16, 8).eval()
        return net, (), {"input": torch.ones(4, 16)}


    def not_a_model():
        return [1, 2], (torch.ones(2),)


    def raises():
        raise RuntimeError("no weights here")
    """
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "m.py"
    path.write_text(MODELS)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = cli.main(["run", *argv, "--config", "tiny", "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_the_bridge_registers_the_torch_workload_kind() -> None:
    points = [p for p in entry_points(group=KIND_GROUP) if p.name == MODEL_KIND]
    assert [p.load() for p in points] == [model_workload]


def test_hwsim_run_a_torch_model_factory(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, summary, err = _run(capsys, f"{models}:model")
    assert code == 0, err
    assert summary["workload"] == f"{models}:model"
    assert summary["total_ns"] > 0 and summary["numerics_ok"] is True
    assert summary["engines"]["tensor"]["instructions"] > 0


def test_keyword_inputs_and_the_check_failing_on_wrong_outputs(models: Path) -> None:
    workload = resolve_workload(f"{models}:with_kwargs")
    config = load_config("tiny")
    outputs = run(workload.program(config), config).outputs
    verdict = workload.check(outputs)
    assert verdict.ok and verdict.max_abs_err < 1e-5 <= verdict.tolerance
    corrupted = {name: values + np.float32(0.5) for name, values in outputs.items()}
    verdict = workload.check(corrupted)
    assert not verdict.ok and verdict.max_abs_err == pytest.approx(0.5, rel=1e-3)
    assert verdict.tolerance < 0.5  # the bound the worst element broke


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("not_a_model", "returned a list as the model; expected a torch.nn.Module"),
        ("raises", "calling it raised RuntimeError: no weights here"),
        ("modle", "defines no 'modle' (did you mean 'model'"),
    ],
)
def test_factory_errors_are_one_line_exit_2(
    models: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    code, summary, err = _run(capsys, f"{models}:{name}")
    assert code == 2 and not summary
    assert err.startswith("hwsim: error: ") and err.count("\n") == 1 and message in err, err


def test_export_shares_the_file_lookup(models: Path) -> None:
    model, args, kwargs = export_cmd.example(f"{models}:with_kwargs")
    assert args == () and set(kwargs) == {"input"} and model.out_features == 8
    with pytest.raises(WorkloadError, match=r"m\.py defines no 'modle' \(did you mean 'model'"):
        export_cmd.example(f"{models}:modle")

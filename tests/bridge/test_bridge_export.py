"""Export for sweeps: a torch model lowered once into FILE.hwprog, then simulated on many configs
(``hwsim export`` / ``bridge.export.export_program``, ``hwsim run FILE.hwprog``, sweeps)."""

from __future__ import annotations

import importlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.export import export_program
from hwsim.bridge.precision import TOLERANCES, compare
from hwsim.sweep import load_results, load_sweep, run_sweep
from hwsim.workloads.saved import EXPECTED_OUTPUTS, LOWERED_FOR, compare_arrays, load_program
from tests.sweep.helpers import write_spec

cli = importlib.import_module("hwsim.cli.main")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = cli.main(["run", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


@pytest.fixture(scope="module")
def mlp_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "mlp.hwprog"
    assert cli.main(["export", "mlp", "--seq", "8", "-o", str(path)]) == 0
    return path


def _gpt2() -> nn.Module:
    """GPT-2 smaller than the demo's (one layer, 64 wide, 2 heads): SDPA, GELU, layer norm."""
    import transformers  # here: only the worker that runs this test pays for the import

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=128, n_positions=16)
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_exported_once_runs_on_timing_variants_and_refuses_new_geometry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One test, so one worker pays for transformers and the export."""
    tokens = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "gpt2.hwprog"
    result = export_program(_gpt2(), (tokens,), path, kwargs={"use_cache": False}, name="gpt2")
    assert result.check["numerics_ok"] and result.path == path

    loaded = load_program(path)
    with zipfile.ZipFile(path) as archive:  # data only: JSON and arrays, no pickle
        assert archive.namelist()[:2] == ["manifest.json", "program.json"]
    for saved_core, loaded_core in zip(result.program.cores, loaded.cores, strict=True):
        assert loaded_core.streams == saved_core.streams
    for name, decl in result.program.hbm.items():  # the weights, bit for bit
        values = loaded.hbm[name].values
        assert (values is None) == (decl.values is None)
        assert values is None or values.tobytes() == decl.values.tobytes()
    meta = loaded.meta
    assert meta["workload"] == "gpt2" and meta["source"]["model"] == "GPT2LMHeadModel"
    assert meta["source"]["torch"] == torch.__version__
    assert meta["precision"] == {"compute": "auto", "accumulate": "fp32"}
    facts = meta[LOWERED_FOR]
    assert facts["config"] == "trn2" and facts["geometry"]["tensor_engine.rows"] == 128
    assert 0 < facts["requires"]["sbuf.bytes_per_partition"] <= 229376
    ((_, logits),) = meta[EXPECTED_OUTPUTS].items()
    assert logits["shape"] == (1, 8, 128) and logits["values"].size == 8 * 128
    assert (logits["rtol"], logits["atol"]) == (1e-5, 1e-5)
    assert meta["ops"]["aten.bmm.default"] == 2  # SDPA decomposed: QK^T and PV

    runs = {
        "trn2": _run(capsys, str(path), "--config", "trn2"),
        "slow TensorE": _run(capsys, str(path), "--set", "tensor_engine.clock_mhz=600"),
        "slow HBM": _run(capsys, str(path), "--set", "hbm.bandwidth_bytes_per_ns_per_stack=20"),
        "trn1": _run(capsys, str(path), "--config", "trn1"),  # same geometry, other generation
    }
    for name, (code, summary, err) in runs.items():
        assert code == 0 and summary["numerics_ok"], (name, err)
        assert summary["max_abs_err"] < 1e-4
    base = runs["trn2"][1]["total_ns"]
    assert runs["slow TensorE"][1]["total_ns"] > base and runs["slow HBM"][1]["total_ns"] > base

    code, _, err = _run(capsys, str(path), "--set", "tensor_engine.rows=64")
    assert code == 2 and err.count("\n") == 1
    assert "tensor_engine.rows=64 (lowered for 128)" in err and "re-export the model" in err
    assert "hwsim export MODEL --config" in err


def test_mlp_via_the_cli_on_two_dma_bandwidths(
    mlp_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, base, _ = _run(capsys, str(mlp_program))
    slow_dma = "dma.bandwidth_bytes_per_ns=4"
    code_slow, slow, _ = _run(capsys, str(mlp_program), "--set", slow_dma)
    assert code == code_slow == 0 and base["numerics_ok"] and slow["numerics_ok"]
    assert slow["total_ns"] > base["total_ns"]


def test_a_sweep_over_an_exported_program(mlp_program: Path, tmp_path: Path) -> None:
    (tmp_path / "mlp.hwprog").write_bytes(mlp_program.read_bytes())
    spec = write_spec(
        tmp_path,
        base="trn2",
        workloads=["mlp.hwprog"],
        parameters={"grid": {"dma.bandwidth_bytes_per_ns": [4, 23]}},
        numerics=True,
        metrics=["total_ns", "numerics_ok"],
    )
    outcome = run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    assert (outcome.ok, outcome.failed) == (2, 0)
    rows = load_results(tmp_path / "r.sqlite")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    by_bandwidth = {r["dma.bandwidth_bytes_per_ns"]: r for r in rows}
    assert all(r["numerics_ok"] for r in rows)
    assert by_bandwidth[4]["total_ns"] > by_bandwidth[23]["total_ns"]


def test_cli_exports_a_factory_file_in_bf16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    factory = tmp_path / "model.py"
    factory.write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.SiLU())\n"
        "    return model, (torch.randn(4, 64),)\n"
    )
    out = tmp_path / "silu.hwprog"
    argv = ["export", f"{factory}:make", "-o", str(out), "--precision", "bf16"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert f"saved {out}" in printed and "instructions" in printed and "HBM" in printed
    assert "ops lowered" in printed and "addmm.default x1" in printed
    expected = next(iter(load_program(out).meta[EXPECTED_OUTPUTS].values()))
    assert (expected["rtol"], expected["atol"]) == (TOLERANCES["bf16"].rtol, 1e-2)
    assert _run(capsys, str(out))[1]["numerics_ok"]


def test_cli_names_unknown_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", "resnet", "-o", "x.hwprog"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'resnet'" in err and "tiny-gpt2, tiny-llama, tiny-resnet, mlp" in err


class _Unsupported(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.lgamma(x) + x.kthvalue(2, -1, keepdim=True).indices


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0] * 2


class _Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x + self.calls


@pytest.mark.parametrize(
    ("model", "reason", "words"),
    [
        (
            _Unsupported(),
            Reason.NO_LOWERING,
            ["aten.lgamma.default x1", "aten.kthvalue.default x1"],
        ),
        (_DataDependent(), Reason.DATA_DEPENDENCE, ["symbolic shape", "static shapes"]),
        (_Counting(), Reason.MUTATION, ["updates calls", "outputs only"]),
    ],
)
def test_what_a_saved_program_cannot_hold_is_refused(
    tmp_path: Path, model: nn.Module, reason: Reason, words: list[str]
) -> None:
    path = tmp_path / "no.hwprog"
    with pytest.raises(Unsupported) as caught:
        export_program(model, (torch.randn(4, 4),), path)
    assert caught.value.reason is reason
    assert all(w in str(caught.value) for w in words), str(caught.value)
    assert not path.exists()


@pytest.mark.parametrize("seed", range(3))
def test_numpy_check_matches_bridge_compare(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(64, 32, generator=generator) * 3
    actual = expected + torch.randn(64, 32, generator=generator) * 2e-5
    actual[0, :3] = torch.tensor([float("nan"), float("inf"), 1e3])
    tolerance = TOLERANCES["fp32"]
    stats = compare(actual, expected, tolerance)
    err, mismatched = compare_arrays(
        actual.numpy(), expected.numpy(), tolerance.rtol, tolerance.atol
    )
    assert (err, mismatched) == (stats.max_abs, stats.mismatched)
    assert mismatched >= 3 and np.isinf(err)

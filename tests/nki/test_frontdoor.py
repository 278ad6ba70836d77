"""The front door: unmodified files through install() and `hwsim nki`, SPMD grids, masks,
no_reorder records, and one clear error (naming the kernel line) for what is unsupported."""

import importlib
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl
from hwsim.cli.main import main
from hwsim.errors import HwsimError, IllegalInstructionError

DATA = Path(__file__).parent.parent / "data"
NEVER_SEEN = DATA / "nki_never_seen.py"


@pytest.fixture
def installed():
    nki.install()
    yield
    nki.uninstall()


def test_install_resolves_every_import_form(installed):
    import neuronxcc.nki as old_nki
    import neuronxcc.nki.isa as old_nisa
    import neuronxcc.nki.language as old_nl
    import nki as new_nki
    import nki.isa as new_nisa
    import nki.language as new_nl

    assert new_nki is old_nki is importlib.import_module("hwsim.nki")
    assert new_nl is old_nl is nl
    assert new_nisa is old_nisa is nisa
    nki.uninstall()
    assert "nki" not in sys.modules
    spec = importlib.util.find_spec("nki")  # tests/nki is a plain directory on sys.path
    assert spec is None or spec.origin in (None, "namespace")


def test_install_refuses_to_shadow_a_real_package(tmp_path, monkeypatch):
    (tmp_path / "nki").mkdir()
    (tmp_path / "nki" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(HwsimError, match="real 'nki' package is installed"):
        nki.install()
    nki.install(force=True)
    try:
        import nki as shadowed

        assert shadowed is importlib.import_module("hwsim.nki")
    finally:
        nki.uninstall()


def test_never_seen_file_through_install(installed):
    spec = importlib.util.spec_from_file_location("nki_never_seen_t", NEVER_SEEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, bias = module.scale_bias_relu_inputs()
    result = nki.run(module.scale_bias_relu, x, bias, race_check=True)
    expected = module.scale_bias_relu_reference(x, bias)
    assert np.max(np.abs(result.outputs[0] - expected)) < 1e-5
    assert result.latency_ns > 0


def test_never_seen_file_through_the_cli(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["nki", f"{NEVER_SEEN}:scale_bias_relu", "--config", "trn2", "--out", str(out)])
    nki.uninstall()
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "latency" in printed and "numerics: OK" in printed
    assert "instruction order: scheduled as the NKI compiler does" in printed
    assert any(p.name.startswith("trace") for p in out.iterdir()), list(out.iterdir())


def test_cli_schedule_chooses_the_instruction_order(tmp_path, capsys):
    """``--schedule program`` runs the kernel as written; the summary's latency is that run's."""
    target = f"{NEVER_SEEN}:scale_bias_relu"
    try:
        code = main(["nki", target, "--schedule", "program", "-o", str(tmp_path / "p"), "--json"])
        assert code == 0
        as_written = json.loads(capsys.readouterr().out)
        assert main(["nki", target, "--schedule", "program", "-o", str(tmp_path / "q")]) == 0
        assert "instruction order: program order (as written)" in capsys.readouterr().out
        nki.install()
        spec = importlib.util.spec_from_file_location("nki_never_seen_s", NEVER_SEEN)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        inputs = module.scale_bias_relu_inputs()
        same = nki.run(module.scale_bias_relu, *inputs, config="trn2", schedule="program")
    finally:
        nki.uninstall()
    assert as_written["total_ns"] == same.latency_ns


def test_cli_json_and_timing_only(tmp_path, capsys):
    """``--json`` prints the summary with the numerics verdict (nothing written without -o);
    ``--timing-only`` skips numerics, so no verdict; the text form names the tolerance."""
    target = f"{NEVER_SEEN}:scale_bias_relu"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["nki", target, "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["numerics_ok"] is True and summary["max_abs_err"] < 1e-5
        assert not (tmp_path / "traces").exists()
        assert main(["nki", target, "--json", "--timing-only"]) == 0
        assert "numerics_ok" not in json.loads(capsys.readouterr().out)
        assert main(["nki", target, "-o", str(tmp_path / "run")]) == 0
    finally:
        os.chdir(cwd)
        nki.uninstall()
    printed = capsys.readouterr().out
    assert re.search(r"numerics: OK \(max abs error \S+, tolerance \S+\)", printed), printed
    assert re.search(r"latency [0-9.]+ µs on trn2", printed), printed


@nki.jit
def spmd_rows(x):
    """Each instance of a [2, 2] grid scales its quarter of x by its linear program id + 1."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = x.shape[0] // nl.num_programs(0), x.shape[1] // nl.num_programs(1)
    tile = nl.load(x[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols])
    scaled = tile * float(i * nl.num_programs(1) + j + 1)
    nl.store(out[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols], value=scaled)
    return out


def test_spmd_grid_runs_every_instance():
    x = np.ones((256, 512), np.float32)
    result = nki.run(spmd_rows[2, 2], x)
    got = result.outputs[0]
    assert [got[0, 0], got[0, 511], got[255, 0], got[255, 511]] == [1, 2, 3, 4]
    assert any("4 instances" in n for n in result.notes)


def test_lnc2_grid_runs_its_instances_on_the_pair_and_is_reported():
    x = np.ones((256, 512), np.float32)
    result = nki.run(spmd_rows[nl.nc(2), 1], x)
    got = result.outputs[0]
    assert [got[0, 0], got[255, 511]] == [1, 2]
    assert {r.core for r in result.trace.instructions} == {0, 1}
    assert any("2 instances ran in parallel on 2 physical cores" in n for n in result.notes)


@nki.jit
def masked_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    with nl.no_reorder():
        tile = nl.load(x[i_p, i_f], mask=(i_p < 100))
        nl.store(out[i_p, i_f], value=nl.exp(tile, mask=(i_p < 100)), mask=(i_p < 100))
    return out


def test_masks_narrow_and_no_reorder_is_recorded():
    x = np.random.default_rng(0).standard_normal((100, 64)).astype(np.float32)
    # the region's pcs are recorded under program order (a scheduled build moves them)
    result = nki.run(masked_rows, x, race_check=True, schedule="program")
    assert np.max(np.abs(result.outputs[0] - np.exp(x))) < 1e-5
    regions = result.program.meta["nki_no_reorder"]
    assert len(regions) == 1 and regions[0]["line"].startswith("test_frontdoor.py:")
    assert set(regions[0]["pcs"]) == {"sync", "scalar", "gpsimd"}


@nki.jit
def reshapes(x):
    t = nl.load(x)
    t.reshape((64, 1024))
    return x


def test_unsupported_call_names_the_kernel_line():
    x = np.ones((128, 512), np.float32)
    with pytest.raises(IllegalInstructionError, match=r"test_frontdoor.py:\d+: reshape"):
        nki.run(reshapes, x)


@nki.jit
def bad_isa_argument(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nisa.tensor_copy(dst=t, src=t, bogus=1)
    return out


def test_unknown_argument_is_one_clear_error():
    with pytest.raises(IllegalInstructionError, match=r"test_frontdoor.py:\d+: nisa.tensor_copy"):
        nki.run(bad_isa_argument, np.ones((128, 512), np.float32))


OLDER_FILE = """
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


@nki.jit
def double(x: nt.tensor[(128, 256), nl.float32], y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x) * 2.0 + nl.load(y))
    return out


def double_reference(x, y):
    return 2 * x + y
"""


def test_cli_generates_inputs_from_annotations_and_shape_flags(tmp_path, capsys):
    path = tmp_path / "older_style.py"
    path.write_text(OLDER_FILE)
    out = tmp_path / "run"
    code = main(["nki", f"{path}:double", "--shape", "y=128x256", "--out", str(out)])
    nki.uninstall()
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "numerics: OK" in printed and "latency" in printed


def test_cli_names_the_missing_input(tmp_path, capsys):
    path = tmp_path / "older_style.py"
    path.write_text(OLDER_FILE)
    code = main(["nki", f"{path}:double", "--out", str(tmp_path / "run")])
    nki.uninstall()
    assert code == 2
    assert "--shape y=128x512:float32" in capsys.readouterr().err


def test_the_docs_example_runs(tmp_path, capsys):
    """docs/nki.md's first example, as a user would save it, through `hwsim nki`."""
    text = (DATA.parent.parent / "docs" / "nki.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my_kernel.py"
    path.write_text(block)
    code = main(["nki", f"{path}:add_relu", "--out", str(tmp_path / "run")])
    nki.uninstall()
    printed = capsys.readouterr().out
    assert code == 0 and "numerics: OK" in printed, printed


def test_scheduled_build_runs_and_keeps_numerics():
    """schedule="list" (the cost-model scheduler) reorders within what no_reorder and the data
    allow; the outputs are unchanged."""
    x = np.random.default_rng(0).standard_normal((100, 64)).astype(np.float32)
    result = nki.run(masked_rows, x, race_check=True, schedule="list")
    assert np.max(np.abs(result.outputs[0] - np.exp(x))) < 1e-5
    assert result.program.meta["schedule"] == "list"

"""The one workload resolver: its forms, ``hwsim run FILE.py:NAME`` for kernels, one-line errors,
and bounded shapes (ASCII digits, digit cap, HBM checked before anything is allocated)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.dtypes import dtype
from hwsim.errors import WorkloadError
from hwsim.sweep import SpecError, load_results, load_sweep, run_sweep
from hwsim.workloads import file_workload, gemm
from hwsim.workloads.bounds import MAX_DIM_DIGITS, program_hbm_bytes
from hwsim.workloads.file_workload import relative_tolerance
from hwsim.workloads.resolve import list_workloads, parse_workload, resolve_workload
from tests.sweep.helpers import write_spec

cli = importlib.import_module("hwsim.cli.main")

KERNELS = textwrap.dedent(
    """
    import numpy as np
    from hwsim import lang
    from hwsim.lang import isa as nisa
    from hwsim.program import Program


    @lang.kernel
    def my_kernel(x, factor=2.0):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        pmax = lang.tile_size.pmax()
        for p0 in range(0, x.shape[0], pmax):
            tile = lang.load(x[p0 : p0 + pmax])
            nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, factor)
            lang.store(out[p0 : p0 + pmax], tile)
        return out


    def my_kernel_inputs():
        x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
        return {"x": x, "factor": 0.5}


    def my_kernel_reference(x, factor):
        return x * factor


    @lang.kernel
    def wrong(x=lang.TensorSpec((32, 64), "bf16")):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        tile = lang.load(x)
        nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, 3.0)
        lang.store(out, tile)
        return out


    def wrong_reference(x):
        return x * 3.3  # 10% off: beyond bf16's tolerance (3.1%)


    @lang.kernel
    def from_specs(x=lang.TensorSpec((32, 64), "bf16")):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        tile = lang.load(x)
        nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, 3.0)
        lang.store(out, tile)
        return out


    def from_specs_reference(x):
        return x * 3.0


    @lang.kernel
    def huge(x=lang.TensorSpec((65536, 8192), "fp32")):
        return x


    @lang.kernel
    def needs_inputs(x):
        return x


    def declares_8_gib(config):
        from hwsim.dtypes import dtype

        program = Program()
        program.add_tensor("big", (1 << 31,), dtype("fp32"), "scratch")
        return program


    def two_arguments(config, seed):
        return None


    NOT_A_KERNEL = 3
    """
)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kernels") / "k.py"
    path.write_text(KERNELS)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = cli.main(["run", *argv, "--config", "tiny", "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


# ---- the forms -------------------------------------------------------------------------------


def test_each_form_is_recognised(kernels: Path) -> None:
    assert parse_workload("gemm:32x64x64").name == "gemm:32x64x64:bf16"
    assert parse_workload("gemm:32x64x64").kind == "gemm"
    assert parse_workload("softmax").kind == "builtin"
    ref = parse_workload("k.py:my_kernel", kernels.parent)
    assert (ref.kind, ref.path, ref.attribute) == ("file", str(kernels.resolve()), "my_kernel")
    names = [name for name, _ in list_workloads()]
    assert names[0] == "gemm:MxKxN[:dtype]" and "softmax" in names
    assert "FILE.py:NAME" in names and "FILE.hwprog" in names


def test_a_kernel_file_runs_with_its_inputs_and_reference(
    kernels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary, err = _run(capsys, f"{kernels}:my_kernel")
    assert code == 0, err
    assert summary["workload"] == f"{kernels}:my_kernel"
    assert summary["total_ns"] > 0 and summary["numerics_ok"] is True
    assert summary["max_abs_err"] == 0.0  # x * 0.5 is exact in fp32


def test_tensor_spec_defaults_make_seeded_inputs(
    kernels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary, _ = _run(capsys, f"{kernels}:from_specs")
    assert code == 0 and summary["numerics_ok"] is True and summary["total_ns"] > 0
    assert 0 < summary["max_abs_err"] < 0.1  # random bf16 values: 3x rounds
    timing = _run(capsys, f"{kernels}:from_specs", "--timing-only")[1]
    assert timing["total_ns"] == summary["total_ns"] and "numerics_ok" not in timing


def test_a_wrong_reference_fails_the_check(
    kernels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, summary, _ = _run(capsys, f"{kernels}:wrong")
    assert code == 1 and summary["numerics_ok"] is False
    assert summary["max_abs_err"] > 0.1  # 0.3 |x| at the largest |x|


def test_the_tolerance_follows_the_coarsest_float_dtype() -> None:
    assert relative_tolerance([np.dtype("float32"), np.dtype("int32")]) == 1e-4
    assert relative_tolerance([np.dtype("float32"), dtype("bf16").numpy]) == 4 * 2**-7
    assert relative_tolerance([np.dtype("float16")]) == 4 * 2**-10


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("nope.py:my_kernel", "workload file 'nope.py' not found (looked for "),
        ("k.py:my_kernl", "k.py defines no 'my_kernl' (did you mean 'my_kernel'"),
        ("k.py:NOT_A_KERNEL", "'NOT_A_KERNEL' (type int) is not a workload; expected a kernel"),
        ("k.py:needs_inputs", "kernel parameter 'x' has no value: define needs_inputs_inputs()"),
        ("k.py:two_arguments", "two_arguments() takes 2 arguments (config, seed); expected one"),
        ("k.py:1x", "after k.py: comes the name of a kernel or function in it"),
        ("k.py", "name the kernel or function in it: k.py:NAME"),
    ],
)
def test_file_errors_are_one_line_exit_2(
    kernels: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    workload: str,
    message: str,
) -> None:
    monkeypatch.chdir(kernels.parent)
    code, summary, err = _run(capsys, workload)
    assert code == 2 and not summary
    assert err.startswith("hwsim: error: ") and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("softmx", "unknown workload 'softmx' (did you mean 'softmax'?); use gemm:MxKxN"),
        ("gem", "(did you mean 'gemm:MxKxN[:dtype]'?)"),
        ("gemm:\uff11\uff12\uff18x128x128", "expected gemm:MxKxN[:dtype]"),  # fullwidth 128
        ("gemm:128x128x128:\uff42f16", "expected gemm:MxKxN[:dtype]"),
        ("gemm:1x1x1\n", "expected gemm:MxKxN[:dtype]"),
        ("gemm:0x4x4", "M must be at least 1, got 0"),
        (
            "gemm:4x4x4:int8",
            "TensorE multiplies bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, tf32, not int8",
        ),
        ("gemm:4x4x" + "9" * 5000, "N has 5000 digits; a dimension has at most 12"),
        ("missing.hwprog", "saved program 'missing.hwprog' not found"),
    ],
)
def test_workload_string_errors(workload: str, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(workload)
    assert message in str(caught.value) and len(str(caught.value)) < 300


def test_the_digit_cap_admits_the_largest_dimension() -> None:
    largest = "9" * MAX_DIM_DIGITS
    assert gemm.GemmSpec.parse(f"gemm:{largest}x1x1").m == int(largest)


# ---- bounded shapes: HBM checked before anything is allocated ---------------------------------


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("inputs were made for a workload that cannot fit")


def test_a_gemm_larger_than_hbm_is_refused_before_its_inputs_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gemm, "make_inputs", _refuse)
    workload = resolve_workload("gemm:1000000000x1000000000x128")
    need = (10**18 + 2 * 128 * 10**9) * 2
    for numerics in (True, False):
        with pytest.raises(WorkloadError) as caught:
            workload.program(load_config("tiny"), numerics)
        assert str(caught.value) == (
            f"gemm:1000000000x1000000000x128:bf16: needs {need:,} B of HBM (1.73 EiB: inputs, "
            "outputs and scratch), tiny has 1,073,741,824 B (1 x 1.00 GiB stacks): use smaller "
            "shapes or a config with more HBM (hbm.capacity_bytes_per_stack)"
        )


def test_the_gemm_bound_is_the_programs_hbm_exactly() -> None:
    spec = gemm.GemmSpec.parse("gemm:70x100x130:fp32")
    assert program_hbm_bytes(gemm.build_gemm(spec, load_config("tiny"))) == spec.hbm_bytes
    assert spec.hbm_bytes == (70 * 100 + 100 * 130 + 70 * 130) * 4


def test_tensor_spec_inputs_larger_than_hbm_are_refused_before_they_are_made(
    kernels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_workload, "_random", _refuse)
    workload = resolve_workload(f"{kernels}:huge")
    assert workload.hbm_bytes == 65536 * 8192 * 4
    with pytest.raises(WorkloadError, match=r"needs 2,147,483,648 B of HBM .* tiny has 1,073,"):
        workload.program(load_config("tiny"))


def test_a_built_program_larger_than_hbm_is_refused_before_it_runs(kernels: Path) -> None:
    workload = resolve_workload(f"{kernels}:declares_8_gib")
    with pytest.raises(WorkloadError, match=r"needs 8,589,934,592 B of HBM"):
        workload.program(load_config("tiny"))
    assert workload.program(load_config("trn2")).hbm["big"].nbytes == 1 << 33


def test_a_sweep_spec_refuses_a_shape_too_large_for_one_of_its_configs(tmp_path: Path) -> None:
    parameters = {"grid": {"hbm.capacity_bytes_per_stack": [1 << 30, 1 << 20]}}
    spec = write_spec(tmp_path, parameters=parameters, workloads=["gemm:512x512x512"])
    with pytest.raises(SpecError) as caught:
        load_sweep(spec)
    message = str(caught.value)
    assert "point {hbm.capacity_bytes_per_stack: 1048576}: gemm:512x512x512: needs 1,572,864 B" in (
        message
    )
    assert "1073741824" not in message  # the config with room for it is not named


def test_a_sweep_spec_refuses_fullwidth_digits(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, workloads=["gemm:\uff13\uff12x64x64"])
    with pytest.raises(SpecError, match=r"workloads\[0\]: 'gemm:.*': expected gemm:MxKxN"):
        load_sweep(spec)


def test_a_sweep_runs_a_kernel_file_with_its_check(kernels: Path, tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text(kernels.read_text())
    spec = write_spec(
        tmp_path,
        parameters={"grid": {"dma.engines": [2, 4]}},
        workloads=["k.py:my_kernel"],
        metrics=["total_ns", "numerics_ok"],
        numerics=True,
    )
    run_sweep(load_sweep(spec), tmp_path / "r.sqlite", jobs=1, progress=False)
    rows = load_results(tmp_path / "r.sqlite")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    assert len(rows) == 2
    for row in rows:
        assert (row["workload"], row["status"], bool(row["numerics_ok"])) == (
            "k.py:my_kernel",
            "ok",
            True,
        )
        assert row["total_ns"] > 0


def test_running_a_kernel_file_imports_no_torch(kernels: Path) -> None:
    code = (
        "import sys\n"
        "from hwsim.cli.main import main\n"
        f"assert main(['run', '{kernels}:my_kernel', '--config', 'tiny', '--json']) == 0\n"
        "assert 'torch' not in sys.modules and 'hwsim.bridge' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

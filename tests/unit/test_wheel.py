"""The built wheel carries its data (presets, schema) and works installed, away from the checkout.

The wheel is built from a copy of the checkout (so the build leaves nothing in it). The slow test
installs it into a fresh venv that reuses this environment's dependencies through a ``.pth`` path
entry: a path entry adds the directory to ``sys.path`` without running the ``.pth`` files in it,
so this checkout's editable install (a finder installed by such a file) cannot leak in.
(``--system-site-packages`` alone would only expose the base interpreter's packages, which hold
no torch or numba.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ("tiny", "trn1", "trn2", "trn3")
#: What a checkout holds that a build does not need.
_NOT_SOURCES = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "traces", "*.egg-info", "__pycache__", ".*_cache"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "hwsim"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCES)
    out = tmp_path_factory.mktemp("wheel")
    _check(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(source),
        ]
    )
    (built,) = out.glob("hwsim-*.whl")
    return built


def _check(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kwargs)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_wheel_holds_the_presets_and_the_schema(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {name for name in names if name.startswith("hwsim/configs/")}
    assert data == {
        "hwsim/configs/__init__.py",
        "hwsim/configs/hwsim-config.schema.json",
        *(f"hwsim/configs/{name}.yaml" for name in PRESETS),
    }
    assert (ROOT / "configs" / "trn2.yaml").read_bytes() == zipfile.ZipFile(wheel).read(
        "hwsim/configs/trn2.yaml"
    )


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "v"
    _check([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    _check(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            str(wheel),
        ]
    )
    site = Path(
        _check(
            [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    # After the wheel is installed, so pip never sees this environment's hwsim.
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _clean_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.mark.slow
def test_the_installed_wheel_runs_away_from_the_checkout(venv: Path, tmp_path: Path) -> None:
    python, hwsim = str(venv / "bin" / "python"), str(venv / "bin" / "hwsim")
    run = {"cwd": tmp_path, "env": _clean_env()}
    where = _check([python, "-I", "-c", "import hwsim; print(hwsim.__file__)"], **run).stdout
    assert Path(where.strip()).is_relative_to(venv), f"hwsim came from {where}"

    listed = _check([hwsim, "config", "list"], **run).stdout.splitlines()
    assert [line.split()[0] for line in listed] == list(PRESETS)
    assert all(str(venv) in line for line in listed), "presets are read from the installed package"

    # (256x256x256 keeps a result strip larger than tiny's 16 KiB SBUF partitions)
    summary = _check(
        [hwsim, "run", "gemm:64x128x256:bf16", "--config", "tiny", "--json"], **run
    ).stdout
    assert '"numerics_ok": true' in summary
    assert '"total_ticks": ' in summary

    code = (
        "import torch, hwsim\n"
        f"assert hwsim.__file__.startswith({str(venv)!r}), hwsim.__file__\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(16, 8)\n"
        "x = torch.randn(4, 16)\n"
        # fp32 matmuls (auto-cast off), as the comparison below expects
        "options = {'config': 'tiny', 'auto_cast': 'none'}\n"
        "compiled = torch.compile(model, backend='hwsim', options=options)\n"
        "assert torch.allclose(compiled(x), model(x), atol=1e-4, rtol=1e-4)\n"
        "print('compiled ok')\n"
    )
    assert _check([python, "-I", "-c", code], **run).stdout.strip().endswith("compiled ok")

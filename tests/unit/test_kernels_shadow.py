"""The checkout's kernels/ folder, imported by its own name where the checkout is on sys.path,
hands the name to an installed package called ``kernels`` (Hugging Face's, which transformers
>= 5.25 requires and imports) instead of shadowing it (``kernels/_shadow.py``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _run(code: str, extra: Path | None = None) -> list[str]:
    prefix = f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
    if extra is not None:
        prefix += f"sys.path.insert(1, {str(extra)!r}); "  # after the checkout, before site
    done = subprocess.run(
        [sys.executable, "-c", prefix + code], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_an_installed_kernels_package_is_imported_not_the_checkouts_folder(tmp_path: Path):
    installed = tmp_path / "site" / "kernels"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("from .layer import LAYER\nMARK = 'installed'\n")
    (installed / "layer.py").write_text("LAYER = 'its own submodule'\n")
    found = _run(
        "import kernels, hwsim.kernels; "
        "print(kernels.MARK, kernels.LAYER.replace(' ', '_'), hasattr(kernels, 'warm_up'), "
        "hasattr(hwsim.kernels, 'warm_up'))",
        tmp_path / "site",
    )
    assert found == ["installed", "its_own_submodule", "False", "True"]


def test_with_none_installed_the_name_stays_the_folders():
    outside = [
        p
        for p in sys.path
        if p and Path(p).resolve() != ROOT and (Path(p) / "kernels" / "__init__.py").exists()
    ]
    if outside:
        pytest.skip(f"a package named kernels is installed here ({outside[0]})")
    assert importlib.util.find_spec("hwsim.kernels") is not None
    assert _run("import kernels; print(hasattr(kernels, 'warm_up'))") == ["True"]

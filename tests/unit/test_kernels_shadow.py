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


def test_a_checkout_reached_through_a_symlink_keeps_the_name(tmp_path: Path):
    """A folder whose ``kernels`` is a symlink to the checkout's, with the checkout also on
    sys.path by its real name: the 'package elsewhere' is this very folder, so nothing is
    handed over (it was imported again and again until a KeyError)."""
    view = tmp_path / "view"
    view.mkdir()
    (view / "kernels").symlink_to(ROOT / "kernels")
    code = (
        f"import sys; sys.path[:0] = [{str(view)!r}, {str(ROOT)!r}]; "
        "import kernels; print(hasattr(kernels, 'warm_up'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=view)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True"]

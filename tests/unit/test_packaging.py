"""Import names and the one-direction dependency rule: kernels <- hwsim <- hwsim.bridge.

The repository keeps ``kernels/`` and ``bridge/`` at the top; they install as ``hwsim.kernels`` and
``hwsim.bridge`` (pyproject's package-dir), so no import name can collide with another package
(Hugging Face's ``kernels``) or be shadowed by a user's folder of the same name. ``configs/``
(presets and their schema, data only) installs as ``hwsim.configs``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Repository folder -> the import name it installs as.
FOLDERS = {
    "hwsim": "hwsim",
    "kernels": "hwsim.kernels",
    "bridge": "hwsim.bridge",
    "configs": "hwsim.configs",
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _package_names_on_disk() -> set[str]:
    names = set()
    for folder, import_name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            names.add(".".join([import_name, *relative.parts]))
    return names


def test_every_package_is_installed_under_the_hwsim_name() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert set(setuptools["packages"]) == _package_names_on_disk()
    assert all(name == "hwsim" or name.startswith("hwsim.") for name in setuptools["packages"])
    assert setuptools["package-dir"] == {v: k for k, v in FOLDERS.items()}


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports stay inside their package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _forbidden(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", sorted((ROOT / "hwsim").rglob("*.py")), ids=str)
def test_the_simulator_never_imports_torch_or_the_bridge(path: Path) -> None:
    bad = {n for n in _imports(path) if _forbidden(n, ("torch", "hwsim.bridge", "bridge"))}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: hwsim must not need torch"


@pytest.mark.parametrize("path", sorted((ROOT / "bridge").rglob("*.py")), ids=str)
def test_the_bridge_uses_the_installed_names(path: Path) -> None:
    bad = {n for n in _imports(path) if _forbidden(n, ("bridge", "kernels"))}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}; use hwsim.bridge/kernels"


def test_a_users_kernels_and_bridge_folders_do_not_shadow_ours(tmp_path: Path) -> None:
    for name in ("kernels", "bridge"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('user {name} loaded')\n")
    code = (
        "import numpy as np\n"
        "from hwsim import lang\n"
        "from hwsim.library import softmax\n"
        "x = np.ones((128, 64), np.float32)\n"
        "r = softmax(x, config='tiny')\n"
        "assert np.allclose(r.output, 1 / 64)\n"
        "import hwsim.bridge.registry\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr

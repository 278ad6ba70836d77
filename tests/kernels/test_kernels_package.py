"""Package-level tests: dependency rule, op tables, reference twins, warm_up, JIT cache."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwsim import kernels as K
from hwsim.kernels import ActivationFunction, AluOp, ReduceOp, _jit_cache

PACKAGE_DIR = Path(K.__file__).resolve().parent
# llvmlite is numba's own code generator (installed with it): lanes.py writes vector IR with it.
ALLOWED_THIRD_PARTY = {"numpy", "numba", "llvmlite"}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_kernels_imports_only_numpy_numba_and_stdlib(path: Path) -> None:
    foreign = {
        root
        for root in _imported_roots(path)
        if root not in ALLOWED_THIRD_PARTY and root not in sys.stdlib_module_names
    }
    assert not foreign, (
        f"{path.name} imports {sorted(foreign)}; kernels may use numpy/numba (and llvmlite) only"
    )


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_every_module_opens_with_a_one_line_docstring(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path.name} has no module docstring"
    assert docstring.splitlines()[0].strip(), f"{path.name}: docstring must start with a line"


def test_every_public_kernel_has_a_reference_twin() -> None:
    kernels = [
        name
        for name in K.__all__
        if callable(getattr(K, name))
        and not name.endswith("_ref")
        and name[0].islower()
        and name != "warm_up"
    ]
    assert len(kernels) >= 17
    missing = [name for name in kernels if f"{name}_ref" not in K.__all__]
    assert not missing, f"kernels without a *_ref twin: {missing}"


def test_op_tables() -> None:
    assert [op.name for op in AluOp][:3] == ["bypass", "add", "subtract"]
    assert len({op.value for op in AluOp}) == len(AluOp)
    assert ActivationFunction.identity is ActivationFunction.copy
    for op in ReduceOp:
        assert op == AluOp[op.name], "ReduceOp ids equal the AluOp ids of the same name"
    assert AluOp.bitwise_xor in K.INTEGER_ONLY_OPS and AluOp.add not in K.INTEGER_ONLY_OPS
    assert K.COMPARISON_OPS <= K.BOOLEAN_RESULT_OPS and K.LOGICAL_OPS <= K.BOOLEAN_RESULT_OPS
    assert not K.FLOAT_EXACT_OPS & K.INTEGER_ONLY_OPS and AluOp.power not in K.FLOAT_EXACT_OPS
    assert set(K.ACTIVATION_REF) == set(ActivationFunction)
    x = np.array([[-1.0, 0.0, 2.0]], np.float32)
    for op in K.BOOLEAN_RESULT_OPS:
        assert set(K.tensor_tensor(x, x[:, ::-1], op).ravel().tolist()) <= {0.0, 1.0}


def test_warm_up_compiles_everything_quickly_once_cached() -> None:
    K.warm_up()  # compiles or loads the disk cache
    kernels = [
        obj
        for module in (
            *("alu", "activations", "elementwise", "integer", "reduce", "index", "scan"),
            *("search", "gather", "prng", "mx"),
        )
        for obj in vars(sys.modules[f"hwsim.kernels.{module}"]).values()
        if hasattr(obj, "signatures") and hasattr(obj, "py_func")
    ]
    cores = [k for k in kernels if k.py_func.__name__.endswith("_jit")]
    assert cores, "no jitted cores found"
    uncompiled = [k.py_func.__name__ for k in cores if not k.signatures]
    assert not uncompiled, f"warm_up() left these uncompiled: {uncompiled}"


def test_jit_cores_compile_one_signature_per_dtype() -> None:
    # Views, read-only arrays and IntEnum ops must not trigger new specialisations (JIT time
    # during a simulation): the wrappers normalise everything before calling the cores.
    K.warm_up()
    before = {id(d): len(d.signatures) for d in _jit_dispatchers()}
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    x.flags.writeable = False
    K.tensor_tensor(x, x, AluOp.max)
    K.tensor_scalar(x, AluOp.add, np.float32(1.0), True, AluOp.bypass, 0)
    K.activation(x.T, ActivationFunction.exp, np.ones((3, 1), np.float32), 0)
    K.tensor_reduce(x.reshape(4, 3, 1), ReduceOp.max, negate=np.bool_(True))
    K.select(x.astype(np.uint8), x, x)
    after = {id(d): len(d.signatures) for d in _jit_dispatchers()}
    assert before == after


def _jit_dispatchers() -> list[Any]:
    return [
        obj
        for module in ("elementwise", "integer", "reduce", "index", "scan")
        for obj in vars(sys.modules[f"hwsim.kernels.{module}"]).values()
        if hasattr(obj, "signatures") and hasattr(obj, "py_func")
    ]


def test_stale_jit_cache_is_cleared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / "alu.alu_f32-1.py311.nbi").write_text("stale")
    (cache / "alu.alu_f32-1.py311.1.nbc").write_text("stale")
    (cache / "alu.cpython-311.pyc").write_text("kept")
    monkeypatch.setattr(_jit_cache, "_cache_dirs", lambda: [cache, tmp_path / "missing"])
    _jit_cache.invalidate_stale_cache()
    assert sorted(p.name for p in cache.iterdir()) == [
        "alu.cpython-311.pyc",
        "kernels-sources.sha256",
    ]
    (cache / "alu.alu_f32-1.py311.nbi").write_text("fresh")  # written after the stamp
    _jit_cache.invalidate_stale_cache()
    assert (cache / "alu.alu_f32-1.py311.nbi").exists(), "a current stamp keeps the cache"

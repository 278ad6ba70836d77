"""A fresh install's first run says it is compiling Numba code, once; a cached install is quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.kernels import _jit_cache


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit_cache, "_announced", False)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)


def test_nothing_cached_is_announced_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    package = tmp_path / "kernels"
    package.mkdir()
    _jit_cache.announce_if_uncompiled(package, "numerics kernels")
    _jit_cache.announce_if_uncompiled(package, "numerics kernels")
    err = capsys.readouterr().err
    assert err.count("hwsim: compiling the simulator's numerics kernels") == 1
    assert "first run" in err


def test_a_cached_package_is_quiet(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    package = tmp_path / "kernels"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__pycache__" / "alu.alu_f32-102.py311.nbi").write_bytes(b"")
    _jit_cache.announce_if_uncompiled(package, "numerics kernels")
    assert capsys.readouterr().err == ""


def test_the_installed_kernels_are_cached_after_a_run(capsys: pytest.CaptureFixture) -> None:
    import hwsim.kernels

    hwsim.kernels.warm_up()
    _jit_cache.announce_if_uncompiled()
    assert capsys.readouterr().err == ""

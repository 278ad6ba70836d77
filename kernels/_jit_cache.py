"""Keeps Numba's on-disk cache of the kernels fresh: clears it when any kernels source file changes.

Numba keys a cached function on the source of its own file only. A jitted kernel in
``elementwise.py`` that calls ``alu_f32`` from ``alu.py`` would therefore keep running the old
``alu_f32`` after ``alu.py`` is edited. We store a hash of all of the package's sources beside the
cache and delete the cached machine code when it no longer matches, before any kernel is loaded.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_STAMP_NAME = "kernels-sources.sha256"
_CACHE_SUFFIXES = (".nbi", ".nbc")


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE_DIR.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _cache_dirs() -> list[Path]:
    """Every directory where Numba may keep this package's cache (its three file locators)."""
    return _cache_dirs_of(_PACKAGE_DIR)


def _cache_dirs_of(package_dir: Path) -> list[Path]:
    dirs = [package_dir / "__pycache__"]
    # Numba's out-of-tree locators use "<dir name>_<sha1 of the dir path>" as the subdirectory.
    subpath = f"{package_dir.name}_{hashlib.sha1(str(package_dir).encode()).hexdigest()}"
    user_dir = os.environ.get("NUMBA_CACHE_DIR")
    if user_dir:
        dirs.append(Path(user_dir) / subpath)
    user_wide = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "numba"
        if sys.platform.startswith("linux")
        else None
    )
    if user_wide is not None:
        dirs.append(user_wide / subpath)
    return dirs


def invalidate_stale_cache() -> None:
    """Delete cached kernels compiled from other sources than the current ones (best effort)."""
    digest = _sources_digest()
    for cache_dir in _cache_dirs():
        stamp = cache_dir / _STAMP_NAME
        try:
            if stamp.read_text() == digest:
                continue
        except OSError:
            pass  # no stamp yet: whatever is cached has unknown provenance
        if not cache_dir.is_dir():
            continue
        try:
            for path in cache_dir.iterdir():
                if path.suffix in _CACHE_SUFFIXES:
                    path.unlink(missing_ok=True)
            temporary = cache_dir / f"{_STAMP_NAME}.{os.getpid()}"
            temporary.write_text(digest)
            os.replace(temporary, stamp)
        except OSError:
            continue  # read-only location: Numba will not have written there either


_announced = False


def announce_if_uncompiled(package_dir: Path | None = None, what: str = "numerics kernels") -> None:
    """Say once per process, on stderr, that this run compiles Numba code no earlier run cached.

    A fresh install's first simulation spends about a minute in Numba compiling (the numerics
    kernels here, the builder's dependency pass in ``hwsim``) before anything is printed; without
    a word it looks hung. Nothing cached at all for the package is the sign: a warm cache that
    lacks a kernel this run has not used yet stays quiet.
    """
    global _announced
    if _announced:
        return
    directory = package_dir or _PACKAGE_DIR
    for cache_dir in _cache_dirs_of(directory):
        if cache_dir.is_dir() and any(cache_dir.glob("*.nbi")):
            return
    _announced = True
    print(
        f"hwsim: compiling the simulator's {what} with Numba (first run of this install only; "
        "about a minute; later runs load them from the cache)",
        file=sys.stderr,
        flush=True,
    )

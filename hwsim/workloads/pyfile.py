"""Import a user's Python file (a sweep's ``FILE.py:NAME`` workload, ``hwsim export FILE.py:F``)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from hwsim.errors import WorkloadError


def import_python_file(path: Path, prefix: str, text: str) -> ModuleType:
    """The module of ``path``, imported once per process under a name unique to the path;
    ``text`` is how the user named it, for errors (a missing file, an import that raises)."""
    if not path.is_file():
        raise WorkloadError(f"{text}: no file {path}")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"{prefix}_{path.stem}_{digest}"
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{text}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise WorkloadError(f"{text}: importing {path} failed: {exc}") from exc
    return module

"""Import a user's Python file and look a name up in it: ``FILE.py:NAME`` workloads (``hwsim run``,
sweeps) and ``hwsim export FILE.py:FACTORY``. Importing the file runs its code, by design."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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
    except SystemExit as exc:  # would end hwsim with the file's status and nothing printed
        del sys.modules[module_name]
        raise WorkloadError(
            f"{text}: importing {path} called sys.exit({exc.code!r}); a workload file defines "
            "workloads, it does not exit"
        ) from exc
    return module


def load_attribute(path: Path, name: str, prefix: str, text: str) -> Any:
    """``NAME`` defined in the file at ``path`` (imported as ``import_python_file`` does)."""
    return lookup_attribute(import_python_file(path, prefix, text), name, path, text)


def lookup_attribute(module: ModuleType, name: str, path: Path, text: str) -> Any:
    """``module.NAME``; a missing name is an error naming the closest ones the file defines."""
    found = getattr(module, name, None)
    if found is not None:
        return found
    names = sorted(n for n in vars(module) if not n.startswith("_"))
    close = difflib.get_close_matches(name, names, n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    raise WorkloadError(f"{text}: {path.name} defines no '{name}'{hint}; it defines {shown}")

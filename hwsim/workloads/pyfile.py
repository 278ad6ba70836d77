"""Import a user's Python file and look a name up in it: ``FILE.py:NAME`` workloads (``hwsim run``,
sweeps), ``hwsim nki FILE.py:KERNEL`` and ``hwsim export FILE.py:FACTORY``. Importing the file
runs its code, by design.

A kernel's file gives its arguments and expected outputs one way for ``hwsim run`` and
``hwsim nki`` alike (``kernel_helpers``): ``NAME_inputs()`` returns the arguments (a tuple, a dict
by parameter name, or one array), ``NAME_reference(*args, **kwargs)`` the expected outputs."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from hwsim.errors import WorkloadError

#: What user code may raise that is turned into one line: any exception, and ``sys.exit`` (a
#: ``SystemExit`` would otherwise end hwsim with the user's exit status and nothing printed).
USER_CODE_ERRORS = (Exception, SystemExit)


def user_code_failed(exc: BaseException, call: str, text: str) -> WorkloadError:
    """A user's function (``call``, of the workload ``text``) raised: one line naming the call
    and the line that raised; the traceback stays chained for ``--debug``."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    if isinstance(exc, SystemExit):
        return WorkloadError(
            f"{text}: {call} called sys.exit({exc.code!r}){where}; a workload returns, it does "
            "not exit"
        )
    return WorkloadError(f"{text}: {call} raised {type(exc).__name__}{where}: {exc}")


def import_python_file(
    path: Path, prefix: str, text: str, *, wrap_errors: bool = True
) -> ModuleType:
    """The module of ``path``, imported once per process under a name unique to the path;
    ``text`` is how the user named it, for errors (a missing file, an import that raises).
    ``wrap_errors=False`` lets what the file's own code raises through as it is (a file that
    checks itself at import, whose assertion is the verdict)."""
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
    except BaseException as exc:
        del sys.modules[module_name]
        if not wrap_errors:
            raise
        if isinstance(exc, SystemExit):  # would end hwsim with the file's status, nothing printed
            raise WorkloadError(
                f"{text}: importing {path} called sys.exit({exc.code!r}); a workload file "
                "defines workloads, it does not exit"
            ) from exc
        if isinstance(exc, Exception):
            raise WorkloadError(f"{text}: importing {path} failed: {exc}") from exc
        raise
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


def kernel_helpers(
    helpers: Mapping[str, Any], name: str, text: str
) -> tuple[Callable[[], Any] | None, Callable[..., Any] | None]:
    """A kernel's ``NAME_inputs`` and ``NAME_reference`` in its file's names ``helpers``, each
    None when the file has none; one that is not a function is an error."""
    found = []
    for label in ("inputs", "reference"):
        helper = helpers.get(f"{name}_{label}")
        if helper is not None and not callable(helper):
            raise WorkloadError(
                f"{text}: {name}_{label} is a {type(helper).__name__}, not a function"
            )
        found.append(helper)
    return found[0], found[1]


def inputs_hint(helpers: Mapping[str, Any], name: str) -> str:
    """What to say when a kernel has no inputs and its file defines ``inputs()``, which no
    command reads (they read ``NAME_inputs()``)."""
    if callable(helpers.get("inputs")):
        return f" (the file's inputs() is not read: name it {name}_inputs())"
    return ""


def call_inputs(
    inputs: Callable[[], Any], name: str, text: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(positional, keyword) arguments ``NAME_inputs()`` returns: a tuple or list, a dict by
    parameter name, or one array."""
    try:
        made = inputs()
    except USER_CODE_ERRORS as exc:  # user code: any exception, chained for --debug
        raise user_code_failed(exc, f"{name}_inputs()", text) from exc
    if isinstance(made, dict):
        return (), dict(made)
    if isinstance(made, (tuple, list)):
        return tuple(made), {}
    if isinstance(made, np.ndarray):
        return (made,), {}
    raise WorkloadError(
        f"{text}: {name}_inputs() returned {type(made).__name__}; expected the kernel's "
        "arguments as a tuple, a dict by parameter name, or one array"
    )

"""``hwsim.nki.install()``: make ``import nki``, ``import nki.language as nl``, ``import nki.isa``
and the older ``import neuronxcc.nki as nki`` (``neuronxcc.nki.language`` ...) resolve to
``hwsim.nki``, so kernel files run unmodified. Only a meta-path finder in this process: nothing is
written to site-packages. If a real ``nki`` or ``neuronxcc`` is installed it is never shadowed
silently: ``install()`` refuses, naming it, unless ``force=True``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from hwsim.errors import HwsimError

#: Alias prefix -> the hwsim module it stands for.
_ALIASES = {"nki": "hwsim.nki", "neuronxcc.nki": "hwsim.nki"}
_SUBMODULES = ("language", "isa", "typing", "compiler", "collectives")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "neuronxcc":
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if _target(fullname) is not None:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name == "neuronxcc":
            module = ModuleType("neuronxcc", "hwsim stand-in for neuronxcc (hwsim.nki.install)")
            module.__path__ = []
            return module
        return importlib.import_module(str(_target(spec.name)))

    def exec_module(self, module):
        return None


def _target(fullname: str) -> str | None:
    for alias, real in _ALIASES.items():
        if fullname == alias:
            return real
        if fullname.startswith(alias + "."):
            rest = fullname[len(alias) + 1 :]
            if rest.startswith(("compiler.backends", "language.constants")):
                return f"{real}.backends"  # the compiler internals kernels import names from
            if rest.split(".")[0] in _SUBMODULES:
                return f"{real}.{rest}"
    return None


_FINDER = _Finder()


def _real_package(name: str) -> str | None:
    """Where an installed real package of that name is (not our alias), or None."""
    if _FINDER in sys.meta_path:
        return None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin in (None, "namespace"):
        return None  # a directory without __init__.py (e.g. tests/nki) is no installed package
    return str(spec.origin)


def install(force: bool = False) -> None:
    """Resolve ``nki`` / ``neuronxcc.nki`` to hwsim.nki in this process (see module docstring)."""
    if _FINDER in sys.meta_path:
        return
    for name in ("nki", "neuronxcc"):
        found = _real_package(name)
        if found is not None and not force:
            raise HwsimError(
                f"hwsim.nki.install(): a real '{name}' package is installed ({found}); refusing "
                "to shadow it. Use hwsim.nki directly, or install(force=True) to shadow it in "
                "this process only"
            )
    for name in list(sys.modules):
        if name in ("nki", "neuronxcc") or name.startswith(("nki.", "neuronxcc.")):
            del sys.modules[name]  # a forced install replaces what was imported
    sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Undo ``install()``: the aliases go from sys.meta_path and sys.modules."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in list(sys.modules):
        if name in ("nki", "neuronxcc") or name.startswith(("nki.", "neuronxcc.")):
            del sys.modules[name]

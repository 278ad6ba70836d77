"""What is tuned: a kernel-language or NKI kernel with a declared space, and the inputs it is
built for.

A target is named as text so that a worker process can rebuild it (candidates run on the sweep
backends): a library kernel by name (``matmul_tiled_blocked``) or ``FILE.py:NAME`` (a
``@lang.kernel`` or an ``@nki.jit`` kernel, with its ``@tune.space`` beside it). Inputs are
``SHAPE:DTYPE`` specs (``8192x4096:bf16``), one per array parameter in order; candidates are
built timing-only from them. The kernel's identity for the cache is its name plus a hash of
its source file, so editing the kernel invalidates what was cached for it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwsim.config import HardwareConfig
from hwsim.program import Program
from hwsim.tune.space import SearchSpace, TuneError, Value, space_of

#: Library kernels that declare a search space, by name.
LIBRARY_TARGETS = {"matmul_tiled_blocked": "hwsim.library.blocked_matmul"}


@dataclass(frozen=True)
class InputSpec:
    """One array argument: shape and dtype name (``8192x4096:bf16``)."""

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        dims, _, dtype = text.partition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise TuneError(
                f"input {text!r}: expected SHAPE[:DTYPE], e.g. 8192x4096:bf16"
            ) from None
        if not shape or min(shape) < 1:
            raise TuneError(f"input {text!r}: every dimension must be a positive whole number")
        from hwsim.dtypes import dtype as lookup_dtype

        name = dtype or "fp32"
        try:
            lookup_dtype(name)
        except Exception as exc:
            raise TuneError(f"input {text!r}: {exc}") from None
        return cls(shape, name)

    def __str__(self) -> str:
        return "x".join(map(str, self.shape)) + f":{self.dtype}"


@dataclass(frozen=True)
class Target:
    """A kernel, its space and its inputs, as a worker process can rebuild them."""

    ref: str  # library name or FILE.py:NAME
    inputs: tuple[InputSpec, ...]

    @functools.cached_property
    def kernel(self) -> Any:
        return load_kernel(self.ref)

    def __getstate__(self) -> dict[str, Any]:
        """Workers get the reference and load the kernel themselves (a kernel from a file is
        not importable by name there)."""
        return {"ref": self.ref, "inputs": self.inputs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "ref", state["ref"])
        object.__setattr__(self, "inputs", state["inputs"])

    @property
    def space(self) -> SearchSpace:
        declared = space_of(self.kernel)
        if declared is None:
            raise TuneError(
                f"{self.ref}: no search space declared; put @hwsim.tune.space(NAME=[values], "
                "...) above the kernel"
            )
        return declared

    @property
    def name(self) -> str:
        return self.ref.rsplit(":", 1)[-1]

    @functools.cached_property
    def identity(self) -> str:
        """Name, source hash and inputs: the kernel part of a cache key."""
        function = _function_of(self.kernel)
        try:
            source = Path(inspect.getsourcefile(function) or "").read_bytes()
        except (OSError, TypeError):
            source = inspect.getsource(function).encode()
        digest = hashlib.sha256(source).hexdigest()[:16]
        shapes = ",".join(map(str, self.inputs))
        return f"{self.name}@{digest}({shapes})"

    def defaults(self) -> dict[str, Value]:
        """The kernel's keyword defaults (the search starts there)."""
        params = inspect.signature(_function_of(self.kernel)).parameters
        return {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}

    def build(self, point: dict[str, Value], config: HardwareConfig) -> Program:
        """The candidate's program (timing-only inputs)."""
        from hwsim.lang import TensorSpec

        specs = [TensorSpec(s.shape, s.dtype) for s in self.inputs]
        return build_kernel(self.kernel, specs, point, config).program


def _function_of(kernel: Any) -> Any:
    return getattr(kernel, "fn", None) or kernel


def build_kernel(kernel: Any, args: list[Any], point: dict[str, Value], config: HardwareConfig):
    """Build a lang kernel or an NKI kernel with ``point`` as keyword arguments."""
    if hasattr(kernel, "lang_kernel"):  # an @nki.jit kernel: through the NKI front end
        notes: list[str] = []
        extra: dict[str, Any] = {}
        built = kernel.lang_kernel(notes, extra).build(*args, config=config, **point)
        built.program.meta["nki_no_reorder"] = extra.get("no_reorder", [])
        built.program.meta["nki_sequential_range"] = extra.get("sequential_range", [])
        return built
    if not hasattr(kernel, "build"):
        raise TuneError(f"{kernel!r} is not a @lang.kernel or an @nki.jit kernel")
    return kernel.build(*args, config=config, **point)


def load_kernel(ref: str) -> Any:
    """A library kernel by name, or NAME from FILE.py (imported; NKI aliases installed)."""
    if ref in LIBRARY_TARGETS:
        import importlib

        return getattr(importlib.import_module(LIBRARY_TARGETS[ref]), ref)
    path_text, colon, name = ref.rpartition(":")
    if not colon or not path_text.endswith(".py"):
        raise TuneError(
            f"{ref!r}: name a library kernel ({', '.join(LIBRARY_TARGETS)}) or FILE.py:NAME"
        )
    from hwsim.nki.cli import load_kernel_file
    from hwsim.nki.kernel import NkiKernel

    path = Path(path_text)
    if not path.is_file():
        raise TuneError(f"{path}: no such file")
    module_kernel, _ = load_kernel_file(path, name)
    if not isinstance(module_kernel, NkiKernel) and not hasattr(module_kernel, "build"):
        raise TuneError(f"{ref}: {name} is not a @lang.kernel or an @nki.jit kernel")
    return module_kernel

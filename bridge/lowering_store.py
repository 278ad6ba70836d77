"""Lowered graphs kept on disk between processes, by graph hash: data only, checked on load.

A ``LoweredGraph`` is stored as a saved program (``hwsim.workloads.saved``: a zip of JSON and
``.npy`` arrays, content-hashed; reading it runs no code from the file) whose ``meta`` also holds
what the bridge needs beside the program (input and output bindings, the output structure, the
report's pipeline log, floor and memory figures). The program is stored as lowered, before any
call bound inputs to it: a model's weights never reach the disk.

- **Key.** A file's name is the SHA-256 of the graph's full hash (``lowering_cache.graph_digest``:
  graph code, input layouts, tensor constants' values, lowering options, config content), this
  store's format version and ``source_hash()`` (every source file of hwsim, its bridge and
  kernels, and the torch and numpy versions), so another hwsim, another torch or an edited
  source file never meets an old lowering. The key is also written inside the file and checked
  on load (a file copied over another's name is refused).
- **Where.** ``$HWSIM_LOWERING_CACHE`` names the folder; ``off`` (or ``0``) disables the store;
  unset, it is ``$XDG_CACHE_HOME/hwsim/lowered`` (``~/.cache/hwsim/lowered``). The folder is
  created private (0700); one another user owns or may write is not used (a planted file would
  give wrong results, not run code), with a warning.
- **Trust.** A file that is not a regular file we own, fails the archive's checks, holds another
  key or a malformed field is refused with a warning, removed, and the graph is lowered again.
- **Size.** At most ``MAX_FILES`` lowerings are kept; the least recently used go first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from hwsim.bridge.context import IndexCheck
from hwsim.bridge.dtypes import MOVABLE_DTYPES
from hwsim.bridge.graph_bindings import InputBinding, OutputBinding
from hwsim.bridge.graph_lowering import LoweredGraph
from hwsim.bridge.memory_plan import MemoryStats
from hwsim.bridge.passes.floor import Floor
from hwsim.bridge.values import PreparedLayout
from hwsim.config import HardwareConfig
from hwsim.errors import HwsimError, SavedProgramError
from hwsim.workloads.typed_json import FieldError, codec_for

#: The environment variable naming the folder, or ``off`` to disable the store.
ENV = "HWSIM_LOWERING_CACHE"
#: Bumped whenever what a file holds changes meaning.
STORE_VERSION = 2
#: Lowerings kept on disk (BERT-large's is about 0.3 MB: weights are not stored).
MAX_FILES = 64
#: Where the bridge's own fields sit in the saved program's meta.
META_KEY = "hwsim.bridge.lowered"

_FILE_NAME = re.compile(r"[0-9a-f]{64}\.hwprog")
_DISABLED = ("off", "0", "false", "no", "none")
_TORCH_DTYPES = {str(d).removeprefix("torch."): d for d in MOVABLE_DTYPES}


class Unstorable(Exception):
    """A lowering holding something the store cannot write as data (it stays in memory only)."""


def store_dir() -> Path | None:
    """The store's folder (module docstring), None when disabled."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _DISABLED:
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "hwsim" / "lowered"


@functools.cache
def source_hash() -> str:
    """SHA-256 of every source file of hwsim (its ``hwsim``, ``bridge`` and ``kernels`` package
    folders, by relative path and content) and of the torch and numpy versions."""
    import hwsim
    import hwsim.bridge
    import hwsim.kernels

    digest = hashlib.sha256(f"torch {torch.__version__} numpy {np.__version__}\0".encode())
    for package in (hwsim, hwsim.bridge, hwsim.kernels):
        for folder in map(Path, package.__path__):
            for path in sorted(folder.rglob("*.py")):
                digest.update(f"{package.__name__}/{path.relative_to(folder)}\0".encode())
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()


def disk_key(graph_digest: str) -> str:
    """The file name (without suffix) of a graph's lowering (module docstring)."""
    text = f"hwsim.bridge.lowered {STORE_VERSION}\0{graph_digest}\0{source_hash()}"
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass
class LoweringStore:
    """Loads and saves ``LoweredGraph``s under ``store_dir()``, counting what it did."""

    hits: int = 0
    misses: int = 0
    writes: int = 0
    refused: list[str] = dataclasses.field(default_factory=list)

    def load(self, graph_digest: str, config: HardwareConfig) -> LoweredGraph | None:
        """The stored lowering of the graph, None when there is none (or the store is off)."""
        folder = _usable_dir()
        if folder is None:
            return None
        key = disk_key(graph_digest)
        path = folder / f"{key}.hwprog"
        try:
            info = path.lstat()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as error:
            self._refuse(path, f"cannot read it ({error.strerror})", remove=False)
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            self._refuse(path, "not a regular file of this user", remove=False)
            return None
        try:
            with _disable_current_modes():  # real tensors, whatever mode the compile is under
                lowered = _decode(path, key, config)
        except (HwsimError, Unstorable, OSError) as error:  # SavedProgramError and the like
            self._refuse(path, str(error), remove=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        self.hits += 1
        return lowered

    def save(self, graph_digest: str, lowered: LoweredGraph) -> None:
        """Write the lowering. One the store cannot write as data is left out silently (it is
        lowered again in the next process, as without a store); a failure to write is a warning,
        never an error of the compile."""
        folder = _usable_dir()
        if folder is None:
            return
        from hwsim.workloads.saved import save_program

        key = disk_key(graph_digest)
        try:
            # the compile runs under dynamo's fake-tensor mode; the constants written are real
            with _disable_current_modes():
                program = _storable_program(lowered, key)
                save_program(program, folder / f"{key}.hwprog")
        except (Unstorable, SavedProgramError):  # not expressible as data (e.g. a bf16 constant)
            return
        except (HwsimError, OSError) as error:  # the folder refused the file (OutputError, ...)
            warnings.warn(f"hwsim lowering cache: cannot write to {folder}: {error}", stacklevel=3)
            return
        except Exception as error:  # anything else the store trips on: still never the compile's
            warnings.warn(
                f"hwsim lowering cache: did not store this graph ({type(error).__name__}: "
                f"{error}); it is lowered again in the next process",
                stacklevel=3,
            )
            return
        self.writes += 1
        _evict(folder)

    def _refuse(self, path: Path, reason: str, *, remove: bool) -> None:
        self.refused.append(f"{path.name}: {reason}")
        warnings.warn(
            f"hwsim lowering cache: ignored {path}: {reason}; the graph is lowered again",
            stacklevel=3,
        )
        if remove:
            path.unlink(missing_ok=True)


def _usable_dir() -> Path | None:
    """The store's folder, made private if new; None when disabled or not safe to trust."""
    folder = store_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        warnings.warn(
            f"hwsim lowering cache: not using {folder}: another user owns it or may write to "
            f"it (make it yours with mode 0700, or set {ENV} to another folder or 'off')",
            stacklevel=3,
        )
        return None
    return folder


def _evict(folder: Path) -> None:
    """Remove the least recently used lowerings past ``MAX_FILES`` (another process may be
    removing them too: a file gone meanwhile is skipped)."""
    used: list[tuple[float, Path]] = []
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            if _FILE_NAME.fullmatch(path.name) and path.is_file():
                used.append((path.stat().st_mtime, path))
    used.sort()
    for _, path in used[: max(0, len(used) - MAX_FILES)]:
        with contextlib.suppress(OSError):
            path.unlink()


# ---- LoweredGraph <-> data -----------------------------------------------------------------------


#: ``LoweredGraph`` fields the store does not write: the program itself (written as the saved
#: program), the config (the caller's, part of the key), a lock, and the process groups of a
#: graph's collectives, which live objects only this process has (such a graph is not stored).
#: Every other field is written and read back: ``tests/bridge/test_lowering_store.py`` fails
#: when a field is added to a binding or the lowering without being stored, as ``storage_order``
#: once was (a stored training graph then read its saved weight transposes wrongly).
NOT_STORED = frozenset({"program", "config", "run_lock", "collective_groups"})


def _storable_program(lowered: LoweredGraph, key: str) -> Any:
    """A copy of the program without bound input values, its meta holding the bridge's fields."""
    if lowered.collective_groups:
        raise Unstorable("its collectives name this process's process groups")
    bound = {binding.name for binding in lowered.inputs}
    program = dataclasses.replace(lowered.program)
    program.hbm = {
        name: dataclasses.replace(decl, values=None) if name in bound else decl
        for name, decl in lowered.program.hbm.items()
    }
    program.meta = {**lowered.program.meta, META_KEY: _encode_fields(lowered, key)}
    return program


def _encode_fields(lowered: LoweredGraph, key: str) -> dict[str, Any]:
    try:
        out_spec = pytree.treespec_dumps(lowered.out_spec)
    except Exception as error:  # a structure pytree cannot write as JSON
        raise Unstorable(f"output structure: {error}") from None
    return {
        "key": key,
        "inputs": [_encode_input(b) for b in lowered.inputs],
        "outputs": [_encode_output(b) for b in lowered.outputs],
        "out_spec": out_spec,
        "nodes": dict(lowered.nodes),
        "sbuf_peak_bytes": lowered.sbuf_peak_bytes,
        "psum_peak_bytes": lowered.psum_peak_bytes,
        "index_checks": [codec_for(IndexCheck).encode(c) for c in lowered.index_checks],
        "memory": _optional(MemoryStats, lowered.memory),
        "pipeline": lowered.pipeline,
        "floor": _optional(Floor, lowered.floor),
        "compute_dtypes": dict(lowered.compute_dtypes),
        "call_input_bytes": list(lowered.call_input_bytes),
    }


def _optional(cls: type, value: Any) -> Any:
    return None if value is None else codec_for(cls).encode(value)


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    if dtype is None:
        return None
    name = str(dtype).removeprefix("torch.")
    if _TORCH_DTYPES.get(name) is not dtype:
        raise Unstorable(f"dtype {dtype}")
    return name


def _encode_input(binding: InputBinding) -> dict[str, Any]:
    constant = None
    if binding.constant is not None:
        if not binding.constant.is_contiguous() or binding.constant.storage_offset():
            raise Unstorable(f"constant of {binding.name}: a strided view")
        try:
            constant = binding.constant.detach().cpu().contiguous().numpy().copy()
        except (TypeError, RuntimeError) as error:  # bf16 and other dtypes numpy lacks
            raise Unstorable(f"constant of {binding.name}: {error}") from None
    return {
        "name": binding.name,
        "index": binding.index,
        "shape": list(binding.shape),
        "strides": list(binding.strides),
        "dtype": _dtype_name(binding.dtype),
        "constant": constant,
        "read": binding.read,
        "prepared": _optional(PreparedLayout, binding.prepared),
    }


def _encode_output(binding: OutputBinding) -> dict[str, Any]:
    if binding.constant is not None and type(binding.constant) not in (bool, int, float, str):
        raise Unstorable(f"output constant {binding.constant!r}")
    return {
        "name": binding.name,
        "shape": list(binding.shape),
        "strides": list(binding.strides),
        "dtype": _dtype_name(binding.dtype),
        "constant": binding.constant,
        "storage_order": binding.storage_order,
    }


def _decode(path: Path, key: str, config: HardwareConfig) -> LoweredGraph:
    from hwsim.workloads.saved import load_program

    program = load_program(path)
    fields = program.meta.pop(META_KEY, None)
    if not isinstance(fields, dict) or fields.get("key") != key:
        raise Unstorable("it holds another graph's lowering (its key differs from its name)")
    try:
        return _decoded(program, fields, config)
    except (FieldError, KeyError, TypeError, ValueError) as error:
        raise Unstorable(f"malformed field: {type(error).__name__}: {error}") from None


def _decoded(program: Any, fields: dict[str, Any], config: HardwareConfig) -> LoweredGraph:
    inputs = [_decode_input(item) for item in _typed(fields["inputs"], list)]
    outputs = [_decode_output(item) for item in _typed(fields["outputs"], list)]
    for name, kind in [(b.name, "input") for b in inputs] + [
        (b.name, "output") for b in outputs if b.name is not None
    ]:
        decl = program.hbm.get(name)
        if decl is None or decl.kind != kind:
            raise ValueError(f"binding {name!r} names no HBM {kind} of the program")
    memory, floor, checks = fields["memory"], fields["floor"], fields["index_checks"]
    return LoweredGraph(
        program=program,
        config=config,
        inputs=inputs,
        outputs=outputs,
        out_spec=pytree.treespec_loads(_typed(fields["out_spec"], str)),
        nodes=_string_dict(fields["nodes"]),
        sbuf_peak_bytes=_typed(fields["sbuf_peak_bytes"], int),
        psum_peak_bytes=_typed(fields["psum_peak_bytes"], int),
        index_checks=[codec_for(IndexCheck).decode(c) for c in _typed(checks, list)],
        memory=None if memory is None else codec_for(MemoryStats).decode(memory),
        pipeline=_typed(fields["pipeline"], dict),
        floor=None if floor is None else codec_for(Floor).decode(floor),
        compute_dtypes=_string_dict(fields["compute_dtypes"]),
        call_input_bytes=[_typed(n, int) for n in _typed(fields["call_input_bytes"], list)],
    )


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _string_dict(value: Any) -> dict[str, str]:
    items = _typed(value, dict).items()
    return {_typed(k, str): _typed(v, str) for k, v in items}


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"expected a list of ints, got {type(value).__name__}")
    return tuple(_typed(n, int) for n in value)


def _torch_dtype(value: Any) -> torch.dtype:
    return _TORCH_DTYPES[_typed(value, str)]


def _decode_input(item: Any) -> InputBinding:
    item = _typed(item, dict)
    constant = item["constant"]
    tensor = None
    if constant is not None:
        tensor = torch.from_numpy(np.array(_typed(constant, np.ndarray)))
    prepared = item["prepared"]
    binding = InputBinding(
        name=_typed(item["name"], str),
        index=_typed(item["index"], int),
        shape=_ints(item["shape"]),
        strides=_ints(item["strides"]),
        dtype=_torch_dtype(item["dtype"]),
        constant=tensor,
        read=_typed(item["read"], bool),
        prepared=None if prepared is None else codec_for(PreparedLayout).decode(prepared),
    )
    if tensor is not None and (
        tensor.dtype != binding.dtype
        or tuple(tensor.shape) != binding.shape
        or tuple(tensor.stride()) != binding.strides
    ):
        raise ValueError(f"constant of {binding.name}: not a {binding.dtype} of {binding.shape}")
    return binding


def _decode_output(item: Any) -> OutputBinding:
    item = _typed(item, dict)
    name, dtype, constant = item["name"], item["dtype"], item["constant"]
    if constant is not None and type(constant) not in (bool, int, float, str):
        raise TypeError(f"output constant {constant!r}")
    return OutputBinding(
        name=None if name is None else _typed(name, str),
        shape=_ints(item["shape"]),
        strides=_ints(item["strides"]),
        dtype=None if dtype is None else _torch_dtype(dtype),
        constant=constant,
        storage_order=_typed(item["storage_order"], bool),
    )

"""Lowering once per distinct lowering-relevant config: programs cached by the config fields their
build actually read.

A workload's program depends on the config only through the fields its build reads (tile sizes,
partitions, SBUF bytes, which transpose path is cheaper, ...). ``ProgramCache`` builds with a
*recording* config: a drop-in ``HardwareConfig`` (subclasses of the same section models) whose
field reads are noted. The program is then stored under (fields read, their values); a later
config that agrees on those fields gets the same program, since a deterministic build that reads
the same values takes the same path. Whole-object reads (``model_dump``, ``==``, hashing,
iteration, pickling) count as reading the whole section or config, so nothing is missed silently.
A sweep over HBM bandwidth lowers ``softmax`` once; a sweep over PE rows lowers it per row count.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from hwsim.config.schema import HardwareConfig
from hwsim.program import Program

#: The field reads of the build in progress (None outside a recorded build).
_READS: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("reads", default=None)
#: Attribute names through which a whole model is read.
_WHOLE_READS = frozenset(
    {
        "model_dump",
        "model_dump_json",
        "model_copy",
        "__dict__",
        "__getstate__",
        "__reduce__",
        "__reduce_ex__",
        "__copy__",
        "__deepcopy__",
    }
)
_RECORDING_CLASSES: dict[tuple[str, type[BaseModel]], type[BaseModel]] = {}
#: The path standing for "the whole config".
WHOLE = ""


def _note(path: str) -> None:
    reads = _READS.get()
    if reads is not None:
        reads.add(path)


def _recording_class(path: str, base: type[BaseModel]) -> type[BaseModel]:
    """A subclass of ``base`` noting reads of its fields as ``path.field``."""
    key = (path, base)
    cls = _RECORDING_CLASSES.get(key)
    if cls is not None:
        return cls
    fields = frozenset(base.model_fields)
    # sections are read through to their fields; a section object itself is not a value read
    sections = frozenset(
        name
        for name, f in base.model_fields.items()
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
    )
    prefix = f"{path}." if path else ""

    def __getattribute__(self: BaseModel, name: str) -> Any:
        if name in fields:
            if name not in sections:
                _note(prefix + name)
        elif name in _WHOLE_READS:
            _note(path)
        return object.__getattribute__(self, name)

    def whole(method: str) -> Callable[..., Any]:
        inherited = getattr(base, method)

        def read_all(self: BaseModel, *args: Any) -> Any:
            _note(path)
            return inherited(self, *args)

        return read_all

    def __eq__(self: BaseModel, other: object) -> bool:
        # equal to a plain section with the same values, as the config it stands for would be
        _note(path)
        if not isinstance(other, base):
            return NotImplemented
        return dict(self) == dict(other)

    namespace = {
        "__getattribute__": __getattribute__,
        "__eq__": __eq__,
        "__module__": __name__,
        **{m: whole(m) for m in ("__hash__", "__iter__", "__repr__", "__str__")},
    }
    cls = type(f"Recording{base.__name__}", (base,), namespace)
    _RECORDING_CLASSES[key] = cls
    return cls


def recording_config(config: HardwareConfig) -> HardwareConfig:
    """A copy of ``config`` whose field reads are noted inside ``build_recorded``."""
    sections: dict[str, Any] = {}
    for name in HardwareConfig.model_fields:
        section = getattr(config, name)
        cls = _recording_class(name, type(section))
        sections[name] = cls.model_construct(**dict(section))
    top = _recording_class(WHOLE, HardwareConfig)
    made = top.model_construct(**sections)
    assert isinstance(made, HardwareConfig)
    return made


def build_recorded(
    build: Callable[[HardwareConfig], Program], config: HardwareConfig
) -> tuple[Program, frozenset[str]]:
    """``build(config)`` and the dotted paths of the config fields it read.

    If the build raises, the exception carries the paths read until then as ``config_reads``.
    """
    reads: set[str] = set()
    token = _READS.set(reads)
    try:
        program = build(recording_config(config))
    except Exception as exc:
        exc.config_reads = frozenset(reads)  # type: ignore[attr-defined]
        raise
    finally:
        _READS.reset(token)
    return program, frozenset(reads)


def values_at(config: HardwareConfig, reads: tuple[str, ...]) -> tuple[Any, ...]:
    """A hashable tuple of the config's values at each read path."""
    out = []
    for path in reads:
        node: Any = config
        for part in path.split(".") if path else ():
            node = getattr(node, part)
        if isinstance(node, BaseModel):
            node = json.dumps(node.model_dump(mode="json"), sort_keys=True)
        elif isinstance(node, dict):
            node = tuple(sorted(node.items()))
        out.append(node)
    return tuple(out)


class ProgramCache:
    """Programs per workload, keyed by the values of the config fields each build read.

    ``get`` returns (program, whether it came from the cache, build seconds). At most
    ``max_programs`` programs, and ``max_instructions`` instructions in all (a program holds
    about 1.4 KB per instruction), are kept, least recently used dropped first; the newest is
    always kept. Build errors are cached like programs: the same fields give the same error.
    """

    def __init__(self, max_programs: int = 8, max_instructions: int = 250_000) -> None:
        self.max_programs, self.max_instructions = max_programs, max_instructions
        self._read_sets: dict[str, list[tuple[str, ...]]] = {}
        self._entries: OrderedDict[tuple[str, tuple[str, ...], tuple[Any, ...]], Any] = (
            OrderedDict()
        )
        self.builds = 0
        self.hits = 0

    def get(
        self, key: str, build: Callable[[HardwareConfig], Program], config: HardwareConfig
    ) -> tuple[Program, bool, float]:
        for reads in self._read_sets.get(key, ()):
            entry_key = (key, reads, values_at(config, reads))
            found = self._entries.get(entry_key)
            if found is not None:
                self._entries.move_to_end(entry_key)
                self.hits += 1
                if isinstance(found, BaseException):
                    raise found.with_traceback(None)
                return found, True, 0.0
        start = time.perf_counter()
        self.builds += 1
        try:
            program, reads_set = build_recorded(build, config)
            stored: Any = program
        except Exception as exc:  # the same fields give the same error: cached like a program
            reads_set = getattr(exc, "config_reads", frozenset({WHOLE}))
            stored = exc
        seconds = time.perf_counter() - start
        reads = tuple(sorted(reads_set))
        known = self._read_sets.setdefault(key, [])
        if reads not in known:
            known.append(reads)
        self._entries[(key, reads, values_at(config, reads))] = stored
        self._evict()
        if isinstance(stored, BaseException):
            raise stored
        return stored, False, seconds

    def _evict(self) -> None:
        def size(entry: Any) -> int:
            return entry.instruction_count if isinstance(entry, Program) else 0

        total = sum(size(entry) for entry in self._entries.values())
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_programs or total > self.max_instructions
        ):
            _, dropped = self._entries.popitem(last=False)
            total -= size(dropped)

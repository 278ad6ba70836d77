"""A run's trace records kept as integer columns, turned into record tuples only when asked.

The simulator writes each record list of a ``Trace`` as one of these sequences instead of a list
of NamedTuples: a record tuple costs ~250 bytes and an allocation in the hot loop, a column entry
8 bytes. They behave as read-only sequences of the same records (``InstructionRecord``,
``DmaRecord``, ``SemaphoreUpdate``: equal values, Python ints), built on iteration or indexing,
so exports and tests read them as before; statistics read ``column(field)`` (int64 arrays) and
``names(field)`` (a string field as codes into a name list) without building any record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from hwsim.trace.records import DmaRecord, InstructionRecord, SemaphoreUpdate

R = TypeVar("R")
#: Records built per step of an iteration (bounded memory, amortised numpy-to-list conversion).
_CHUNK = 8192
_new = tuple.__new__


class RecordColumns(Sequence[R], Generic[R]):
    """Records of one NamedTuple type as columns: int64 arrays, string fields as codes into name
    lists, object fields as lists. Read-only; equal to any sequence of the same records."""

    RECORD: Any  # the NamedTuple class
    #: String fields: (codes array, names) each.
    STRINGS: tuple[str, ...] = ()
    OBJECTS: tuple[str, ...] = ()

    def __init__(
        self,
        ints: dict[str, np.ndarray],
        strings: dict[str, tuple[np.ndarray, list[str]]],
        objects: dict[str, list[Any]],
    ) -> None:
        self._ints, self._strings, self._objects = ints, strings, objects
        self._len = len(next(iter(ints.values()))) if ints else 0

    @classmethod
    def empty(cls) -> Any:
        """No records."""
        fields = cls.RECORD._fields
        ints = {f: np.zeros(0, np.int64) for f in fields if f not in cls.STRINGS + cls.OBJECTS}
        strings: dict[str, tuple[np.ndarray, list[str]]] = {
            f: (np.zeros(0, np.int64), []) for f in cls.STRINGS
        }
        return cls(ints, strings, {f: [] for f in cls.OBJECTS})

    def __len__(self) -> int:
        return self._len

    def column(self, field: str) -> np.ndarray:
        """An integer field of every record (int64; do not modify)."""
        return self._ints[field]

    def names(self, field: str) -> tuple[np.ndarray, list[str]]:
        """A string field: per record a code (int64) into the returned list of names."""
        return self._strings[field]

    def objects(self, field: str) -> list[Any]:
        return self._objects[field]

    def _fields_of(self, lo: int, hi: int) -> list[Any]:
        out: list[Any] = []
        for name in self.RECORD._fields:
            if name in self._ints:
                out.append(self._ints[name][lo:hi].tolist())
            elif name in self._strings:
                codes, names = self._strings[name]
                out.append([names[c] for c in codes[lo:hi].tolist()])
            else:
                out.append(self._objects[name][lo:hi])
        return out

    def __iter__(self) -> Iterator[R]:
        record = self.RECORD
        for lo in range(0, self._len, _CHUNK):
            for values in zip(*self._fields_of(lo, min(lo + _CHUNK, self._len)), strict=True):
                yield _new(record, values)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._len)
            if step != 1:
                return list(self)[index]
            return [_new(self.RECORD, v) for v in zip(*self._fields_of(lo, hi), strict=True)]
        i = int(index)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record {index} of {self._len}")
        values = []
        for name in self.RECORD._fields:
            if name in self._ints:
                values.append(int(self._ints[name][i]))
            elif name in self._strings:
                codes, names = self._strings[name]
                values.append(names[codes[i]])
            else:
                values.append(self._objects[name][i])
        return _new(self.RECORD, tuple(values))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self._len} {self.RECORD.__name__}>"


class InstructionColumns(RecordColumns[InstructionRecord]):
    """Instruction records; ``fact_keys`` optionally groups them by distinct static facts
    (``hwsim.trace.facts.FactsMemo.ids``): per record an index into a list of representative
    instructions, in order of first appearance."""

    RECORD = InstructionRecord
    STRINGS = ("engine",)
    OBJECTS = ("instruction",)

    def __init__(
        self,
        ints: dict[str, np.ndarray],
        strings: dict[str, tuple[np.ndarray, list[str]]],
        objects: dict[str, list[Any]],
        fact_keys: tuple[np.ndarray, list[Any]] | None = None,
    ) -> None:
        super().__init__(ints, strings, objects)
        self.fact_keys = fact_keys


class DmaRecordColumns(RecordColumns[DmaRecord]):
    RECORD = DmaRecord
    STRINGS = ("trigger_engine",)


class SemaphoreColumns(RecordColumns[SemaphoreUpdate]):
    RECORD = SemaphoreUpdate
    STRINGS = ("semaphore", "source_engine")


C = TypeVar("C", bound=RecordColumns[Any])


def concatenated(kind: type[C], parts: Sequence[RecordColumns[Any]]) -> C:
    """The records of ``parts`` one after the other, as one ``kind`` (name lists merged)."""
    ints: dict[str, np.ndarray] = {}
    strings: dict[str, tuple[np.ndarray, list[str]]] = {}
    objects: dict[str, list[Any]] = {}
    if not parts:
        return kind.empty()
    for name in kind.RECORD._fields:
        if name in kind.OBJECTS:
            objects[name] = [o for p in parts for o in p._objects[name]]
        elif name in kind.STRINGS:
            merged: dict[str, int] = {}
            codes = []
            for p in parts:
                part_codes, names = p._strings[name]
                remap = np.array([merged.setdefault(n, len(merged)) for n in names], np.int64)
                codes.append(remap[part_codes] if len(names) else part_codes)
            strings[name] = (np.concatenate(codes), list(merged))
        else:
            ints[name] = np.concatenate([p._ints[name] for p in parts])
    return kind(ints, strings, objects)


def int_array(values: Any) -> np.ndarray:
    """An int64 array of a list or ``array('q')`` (copied, so the source can be freed)."""
    return np.array(values, np.int64) if len(values) else np.zeros(0, np.int64)

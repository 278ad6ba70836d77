"""The static facts of each instruction a trace holds (opcode, bytes per memory, on-chip spans,
signals), read once per distinct instruction: ``FactsMemo`` keys them by the builder's static twin,
so an unrolled kernel's thousands of equal instructions cost one look-up each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from hwsim.builder import STATIC_TWIN
from hwsim.trace.columns import InstructionColumns

#: Memories in the order of ``InstructionFacts.read_bytes`` / ``write_bytes``.
MEMORIES = ("hbm", "sbuf", "psum")


HBM, SBUF, PSUM = range(3)


_MEMORY_INDEX = {name: i for i, name in enumerate(MEMORIES)}


class InstructionFacts(NamedTuple):
    """Static facts of one instruction, read once from the Instruction object.

    read_bytes / write_bytes: bytes per memory in MEMORIES order (hbm, sbuf, psum).
    spans: on-chip operands as (memory, first partition, end partition, first byte, end byte),
    bytes within each partition; the bounding box of a strided pattern.
    dtype: dtype name of the first operand read ('' if none): the matmul input dtype for TensorE.
    """

    opcode: str
    profiler_opcode: str
    tag: str
    flops: int
    dtype: str
    read_bytes: tuple[int, int, int]
    write_bytes: tuple[int, int, int]
    spans: tuple[tuple[str, int, int, int, int], ...]
    is_dma: bool
    signals: tuple[str, ...]


#: An operand's part of its instruction's facts: (memory index in MEMORIES, bytes, on-chip span
#: as in ``InstructionFacts.spans``, or None for HBM).
OperandFacts = tuple[int, int, tuple[str, int, int, int, int] | None]


def operand_facts(ap: Any) -> OperandFacts:
    memory = ap.memory
    span = None
    if memory != "hbm":
        first, end = _on_chip_span(ap)
        span = (str(memory), ap.start_partition, ap.end_partition, first, end)
    return _MEMORY_INDEX[memory], ap.nbytes, span


def instruction_facts(
    instruction: Any, operands: dict[int, tuple[Any, OperandFacts]] | None = None
) -> InstructionFacts:
    """The facts of ``instruction``. ``operands`` memoises ``operand_facts`` by object identity
    (instructions share their operand objects, e.g. a tile many matmuls read); it keeps each
    operand so that its id is not reused."""
    kind = type(instruction)
    names = _CLASS_FACTS.get(kind)
    if names is None:
        names = _CLASS_FACTS[kind] = (
            kind.OPCODE,
            kind.PROFILER_OPCODE or kind.OPCODE.upper(),
            bool(kind.IS_DMA),
        )
    if operands is None:
        operands = {}
    reads = instruction.moved_reads()
    spans: list[tuple[str, int, int, int, int]] = []
    read_bytes = _add_operands(reads, operands, spans)
    write_bytes = _add_operands(instruction.writes(), operands, spans)
    signals = instruction.signals
    return InstructionFacts(
        names[0],
        names[1],
        instruction.tag,
        int(instruction.flops()),
        reads[0].dtype.name if reads else "",
        read_bytes,
        write_bytes,
        tuple(spans),
        names[2],
        (signals[0][0],) if len(signals) == 1 else tuple([name for name, _ in signals]),
    )


def _add_operands(
    aps: Sequence[Any],
    operands: dict[int, tuple[Any, OperandFacts]],
    spans: list[tuple[str, int, int, int, int]],
) -> tuple[int, int, int]:
    """Bytes of ``aps`` per memory (MEMORIES order); their on-chip spans appended to ``spans``."""
    totals = [0, 0, 0]
    for ap in aps:
        hit = operands.get(id(ap))
        if hit is None or hit[0] is not ap:
            hit = operands[id(ap)] = (ap, operand_facts(ap))
        memory, nbytes, span = hit[1]
        totals[memory] += nbytes
        if span is not None:
            spans.append(span)
    return totals[0], totals[1], totals[2]


#: Per instruction class: (OPCODE, profiler opcode, IS_DMA), read once.
_CLASS_FACTS: dict[type, tuple[str, str, bool]] = {}


def _on_chip_span(ap: Any) -> tuple[int, int]:
    """``AccessPattern.byte_span()`` of an SBUF/PSUM operand, inlined: it runs once per operand of
    every instruction of a trace, and the generic method (HBM rows, strict zips) is ~5x slower."""
    low = high = 0
    for n, stride in zip(ap.free_sizes, ap.free_strides):  # noqa: B905 (lengths are checked)
        if stride > 0:
            high += (n - 1) * stride
        elif stride < 0:
            low += (n - 1) * stride
    size = ap.dtype.itemsize
    return ap.offset_bytes + low * size, ap.offset_bytes + (high + 1) * size


T = TypeVar("T")


class IdentityMemo(Generic[T]):
    """``fn(instruction)`` memoised by object identity, bounded to ``limit`` entries.

    Programs reuse instruction objects (unrolled loops, repeated layers), so most look-ups hit;
    a trace of distinct objects only costs a cleared cache now and then, never unbounded memory.
    The memo keeps a reference to each key object so an id is never reused while cached.
    """

    def __init__(self, fn: Callable[[Any], T], limit: int = 8192) -> None:
        self._fn = fn
        self._limit = limit
        self._memo: dict[int, tuple[Any, T]] = {}

    def __call__(self, obj: Any) -> T:
        hit = self._memo.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = self._fn(obj)
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[id(obj)] = (obj, value)
        return value


#: Operands whose facts a ``FactsMemo`` keeps (bounded: a trace of distinct objects would keep
#: every operand alive, in the memory a streamed export must not use).
_OPERANDS_KEPT = 8192


class FactsMemo:
    """``instruction_facts`` memoised by what the facts depend on: the instruction's static twin
    (the first emitted instruction with the same operands, ``hwsim.builder.STATIC_TWIN``), its
    tag and its signals. An unrolled kernel has thousands of instructions per twin, so a trace
    computes the facts of each distinct instruction once, not once per record."""

    def __init__(self, limit: int = 65536) -> None:
        self._limit = limit
        self._memo: dict[tuple[int, str, Any], tuple[Any, InstructionFacts]] = {}
        self._last_ids: tuple[Any, tuple[np.ndarray, list[InstructionFacts]]] | None = None
        #: ``instruction_facts``' operand memo, cleared when it passes ``_OPERANDS_KEPT``.
        self._operands: dict[int, tuple[Any, OperandFacts]] = {}
        #: Instructions and their facts worked out by ``ids`` but not memoised yet: a summary
        #: reads the table only, so their keys are made on the first look-up that misses.
        self._unmemoised: tuple[list[Any], list[InstructionFacts]] | None = None

    def __call__(self, instruction: Any) -> InstructionFacts:
        twin = instruction.__dict__.get(STATIC_TWIN, instruction)
        key = (id(twin), instruction.tag, instruction.signals)
        hit = self._memo.get(key)
        if hit is None and self._unmemoised is not None:
            self._memoise(*self._unmemoised)
            hit = self._memo.get(key)
        if hit is not None and hit[0] is twin:
            return hit[1]
        value = self._facts(instruction)
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[key] = (twin, value)
        return value

    def _facts(self, instruction: Any) -> InstructionFacts:
        if len(self._operands) > _OPERANDS_KEPT:
            self._operands.clear()
        return instruction_facts(instruction, self._operands)

    def _memoise(self, instructions: list[Any], table: list[InstructionFacts]) -> None:
        self._unmemoised = None
        for instruction, value in zip(instructions, table, strict=True):
            if len(self._memo) >= self._limit:
                break
            twin = instruction.__dict__.get(STATIC_TWIN, instruction)
            self._memo[id(twin), instruction.tag, instruction.signals] = (twin, value)

    def ids(self, records: Sequence[Any]) -> tuple[np.ndarray, list[InstructionFacts]]:
        """Per record, an index into a table of the distinct facts of ``records`` (one pass; each
        distinct instruction's facts are in the table once, whatever the memo's limit). The
        simulator's columns carry these indices (worked out once per program)."""
        if self._last_ids is not None and self._last_ids[0] is records:
            return self._last_ids[1]  # the same records again (a summary asks more than once)
        if isinstance(records, InstructionColumns) and records.fact_keys is not None:
            ids, first = records.fact_keys
            table: list[InstructionFacts] = [self._facts(instruction) for instruction in first]
            if self._unmemoised is not None:
                self._memoise(*self._unmemoised)
            self._unmemoised = (first, table)
            self._last_ids = (records, (ids, table))
            return ids, table
        ids, _, first = summary_keys([record.instruction for record in records])
        return ids, [self(instruction) for instruction in first]


def summary_keys(stream: Sequence[Any]) -> tuple[np.ndarray, list[Any], list[Any]]:
    """What the summary's facts of each instruction depend on (``FactsMemo``:
    its static twin, tag and signals): per pc an index into the distinct keys, and the first
    instruction of each, in order of first appearance. Worked out once per program
    (``hwsim.machine.prepare``), or per trace of plain records."""
    index: dict[Any, int] = {}
    first: list[Any] = []

    def code(instruction: Any) -> int:
        twin = instruction.__dict__.get(STATIC_TWIN, instruction)
        key = (id(twin), instruction.tag, instruction.signals)  # twins live in the stream
        found = index.get(key)
        if found is None:
            found = index[key] = len(first)
            first.append(instruction)
        return found

    ids = np.fromiter(map(code, stream), np.int64, len(stream))
    return ids, list(index), first


def facts_memo() -> FactsMemo:
    return FactsMemo()

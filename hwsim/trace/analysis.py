"""Derived views of a trace that its exports share: engine codes, record indexes, who released
whom, DMA transfers, semaphore waits and HBM traffic per DMA piece (instruction facts are in
``hwsim.trace.facts``, the array steps they use in ``hwsim.trace.array_ops``).

Nothing here keeps state between runs; each view is built from a ``Trace`` on demand. Everything
that touches every record is either one Python pass or numpy, so traces of 1e6 records stay fast.
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from hwsim.engines import engine_label, engine_names
from hwsim.trace.array_ops import (
    dense_codes,
    distinct,
    order_by_group_and_key,
    sums_in_order_met,
    unique_runs,
)
from hwsim.trace.columns import InstructionColumns, RecordColumns
from hwsim.trace.facts import HBM, FactsMemo
from hwsim.trace.records import Trace

#: Semaphore-source class of DMA transfer completions (``SemaphoreUpdate.source_engine``).
DMA_SOURCE = "dma"

_ENGINE_CODES: dict[str, int] = {}
_ENGINE_NAMES: list[str] = []
_KEY_CORE_SHIFT = 48
_KEY_ENGINE_SHIFT = 40
_PC_MASK = (1 << _KEY_ENGINE_SHIFT) - 1
#: Streams (core << 8 | engine) an ``InstructionIndex`` finds by position, without a search.
_DENSE_STREAMS = 1 << 16

__all__ = ["engine_label"]  # re-exported for the trace modules


def engine_code(engine: str) -> int:
    """A small integer per engine name: the registered engines in order, then other names in the
    order they are met (codes never change once given)."""
    code = _ENGINE_CODES.get(engine)
    if code is None:
        for name in (*engine_names(), engine):
            if name not in _ENGINE_CODES:
                _ENGINE_CODES[name] = len(_ENGINE_NAMES)
                _ENGINE_NAMES.append(name)
        code = _ENGINE_CODES[engine]
    return code


def engine_of_code(code: int) -> str:
    return _ENGINE_NAMES[code]


def semaphore_class(name: str, source_engine: str = "") -> str:
    """What a semaphore counts: 'dma' (DMA queue completions), an engine name, or 'other'.

    Follows the builder's convention (``S.<engine>``, ``S.dma.q<k>``); a semaphore named otherwise
    is classed by the engine that signalled it.
    """
    if name.startswith("S.dma"):
        return DMA_SOURCE
    if name.startswith("S.") and name[2:] in _ENGINE_CODES:
        return name[2:]
    if source_engine:
        return source_engine
    return "other"


def instruction_at(records: Sequence[Any], index: int) -> Any:
    """The instruction of record ``index``, without building the record from columns."""
    if isinstance(records, InstructionColumns):
        return records.objects("instruction")[index]
    return records[index].instruction


def instructions_of(records: Sequence[Any]) -> Sequence[Any]:
    """The instruction of every record (the columns' own list: do not modify it)."""
    if isinstance(records, InstructionColumns):
        return records.objects("instruction")
    return [r.instruction for r in records]


# ---- columns ----------------------------------------------------------------------------------


def int_column(records: Sequence[Any], field: str) -> np.ndarray:
    """One integer field of every record as an int64 array (do not modify it)."""
    if isinstance(records, RecordColumns):
        return records.column(field)
    return np.fromiter(map(attrgetter(field), records), np.int64, len(records))


def engine_codes(records: Sequence[Any], field: str = "engine") -> np.ndarray:
    """An engine-name field of every record as ``engine_code``s (int64)."""
    if isinstance(records, RecordColumns):
        return name_codes(records, field, engine_code)
    get = attrgetter(field)
    return np.fromiter((engine_code(get(r)) for r in records), np.int64, len(records))


def name_codes(records: RecordColumns[Any], field: str, code: Callable[[str], int]) -> np.ndarray:
    """A string field of columns as ``code(name)`` per record."""
    local, names = records.names(field)
    table = np.array([code(name) for name in names], np.int64)
    return table[local] if len(names) else np.zeros(len(local), np.int64)


def instruction_keys(cores: np.ndarray, engines: np.ndarray, pcs: np.ndarray) -> np.ndarray:
    """One int64 per (core, engine code, pc), for sorted look-ups."""
    return (cores << _KEY_CORE_SHIFT) | (engines << _KEY_ENGINE_SHIFT) | pcs


class InstructionIndex:
    """Find an instruction record by (core, engine, pc) without a per-record dict."""

    def __init__(self, trace: Trace) -> None:
        recs = trace.instructions
        keys = instruction_keys(
            int_column(recs, "core"), engine_codes(recs), int_column(recs, "pc")
        )
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]
        self._streams = self._dense_streams()

    def _dense_streams(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per stream (core << 8 | engine code): its first position in the sorted keys and its
        length, if every stream's pcs are 0, 1, ... once each (as a simulator's trace has
        them): a key's position is then its stream's first plus its pc, no search needed."""
        keys = self._keys
        if not len(keys) or keys[0] < 0 or keys[-1] >> _KEY_ENGINE_SHIFT >= _DENSE_STREAMS:
            return None
        stream = keys >> _KEY_ENGINE_SHIFT
        first = np.flatnonzero(np.append(True, stream[1:] != stream[:-1]))
        length = np.diff(np.append(first, len(keys)))
        if not ((keys & _PC_MASK) == np.arange(len(keys)) - np.repeat(first, length)).all():
            return None
        start = np.zeros(int(stream[-1]) + 1, np.int64)
        count = np.zeros(int(stream[-1]) + 1, np.int64)
        start[stream[first]], count[stream[first]] = first, length
        return start, count

    def find_many(self, keys: np.ndarray) -> np.ndarray:
        """Record indices of the given keys, -1 where absent."""
        if not len(self._keys):
            return np.full(len(keys), -1, np.int64)
        if self._streams is not None:
            start, count = self._streams
            stream = keys >> _KEY_ENGINE_SHIFT
            known = (keys >= 0) & (stream < len(start))
            stream = np.where(known, stream, 0)
            pc = keys & _PC_MASK
            known &= pc < count[stream]
            return np.where(known, self._order[np.where(known, start[stream] + pc, 0)], -1)
        pos = np.searchsorted(self._keys, keys)
        pos = np.minimum(pos, len(self._keys) - 1)
        found = self._keys[pos] == keys
        return np.where(found, self._order[pos], -1)

    def find(self, core: int, engine: str, pc: int) -> int:
        key = (core << _KEY_CORE_SHIFT) | (engine_code(engine) << _KEY_ENGINE_SHIFT) | pc
        return int(self.find_many(np.array([key], np.int64))[0])


class SemaphoreIndex:
    """For a wait (core, semaphore, value): the first update that brought it to >= value."""

    def __init__(self, trace: Trace) -> None:
        updates = trace.semaphore_updates
        names: dict[tuple[int, str], int] = {}
        if isinstance(updates, RecordColumns):  # group by (core, name code): no pass per update
            codes, sem_names = updates.names("semaphore")
            width = max(len(sem_names), 1)
            pairs, group = dense_codes(updates.column("core") * width + codes)
            for g, pair in enumerate(pairs.tolist()):
                core_of, code = divmod(pair, width)
                names[core_of, sem_names[code]] = g
        else:
            group = np.fromiter(
                (names.setdefault((u.core, u.semaphore), len(names)) for u in updates),
                np.int64,
                len(updates),
            )
        ticks = int_column(updates, "tick")
        values = int_column(updates, "value")
        order = order_by_group_and_key(group, ticks)
        bounds = np.searchsorted(group[order], np.arange(len(names) + 1))
        self.group_of = names
        #: Per group: values reached (running maximum, in tick order) and their update indices.
        self.by_group: list[tuple[np.ndarray, np.ndarray]] = []
        for g in range(len(names)):
            members = order[bounds[g] : bounds[g + 1]]
            self.by_group.append((np.maximum.accumulate(values[members]), members))
        self._groups: dict[tuple[int, str], tuple[array[int], array[int]]] | None = None

    def satisfying(self, core: int, semaphore: str, value: int) -> int:
        """Index into trace.semaphore_updates, or -1 if the wait never needed an update."""
        if self._groups is None:  # as arrays for bisect, once (a summary looks up in bulk)
            self._groups = {
                key: (_as_array(self.by_group[g][0]), _as_array(self.by_group[g][1]))
                for key, g in self.group_of.items()
            }
        group = self._groups.get((core, semaphore))
        if group is None:
            return -1
        reached, members = group
        k = bisect_left(reached, value)
        return members[k] if k < len(reached) else -1

    def satisfying_many(self, groups: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``satisfying`` of many waits at once, given as group indices (``group_of``)."""
        out = np.full(len(groups), -1, np.int64)
        for g in distinct(groups).tolist():
            rows = np.flatnonzero(groups == g)
            reached, members = self.by_group[g]
            k = np.searchsorted(reached, values[rows], side="left")
            hit = k < len(reached)
            out[rows[hit]] = members[k[hit]]
        return out


def _as_array(values: np.ndarray) -> array[int]:
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, np.int64).tobytes())
    return out


class Transfers:
    """DMA pieces grouped into transfers, one per triggering DMA instruction, as columns.

    piece_transfer[i]: transfer of piece i. Per transfer t: last_piece[t] (its last-ending piece),
    core[t], engine_code[t], pc[t] (the triggering instruction) and trigger_record[t] (its index
    in trace.instructions, -1 if absent).
    """

    def __init__(self, trace: Trace, index: InstructionIndex | None = None) -> None:
        dma = trace.dma
        keys = instruction_keys(
            int_column(dma, "core"),
            engine_codes(dma, "trigger_engine"),
            int_column(dma, "trigger_pc"),
        )
        self.keys, self.piece_transfer = unique_runs(keys)
        self.core = self.keys >> _KEY_CORE_SHIFT
        self.engine_code = (self.keys >> _KEY_ENGINE_SHIFT) & 0xFF
        self.pc = self.keys & ((1 << _KEY_ENGINE_SHIFT) - 1)
        index = index or InstructionIndex(trace)
        self.trigger_record = index.find_many(self.keys)
        # the last piece of each transfer: of its latest-ending pieces, the last listed
        ends = int_column(dma, "end_tick")
        latest = np.full(len(self.keys), np.iinfo(np.int64).min)
        np.maximum.at(latest, self.piece_transfer, ends)
        at_latest = np.flatnonzero(ends == latest[self.piece_transfer])
        last = np.full(len(self.keys), -1, np.int64)
        np.maximum.at(last, self.piece_transfer[at_latest], at_latest)
        self.last_piece = last
        core_pc = (self.core << _KEY_ENGINE_SHIFT) | self.pc
        self.by_pc_order = np.argsort(core_pc, kind="stable")
        self._by_pc_keys = core_pc[self.by_pc_order]

    def __len__(self) -> int:
        return len(self.keys)

    def trigger(self, t: int) -> tuple[int, str, int]:
        """(core, engine, pc) of transfer t's triggering instruction."""
        key = int(self.keys[t])
        return (
            key >> _KEY_CORE_SHIFT,
            engine_of_code((key >> _KEY_ENGINE_SHIFT) & 0xFF),
            key & ((1 << _KEY_ENGINE_SHIFT) - 1),
        )

    def candidates(self, cores: np.ndarray, pcs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (core, pc): the range [lo, hi) of ``by_pc_order`` holding its transfers."""
        key = (cores << _KEY_ENGINE_SHIFT) | pcs
        return (
            np.searchsorted(self._by_pc_keys, key, side="left"),
            np.searchsorted(self._by_pc_keys, key, side="right"),
        )

    def signalled_by(
        self, core: int, pc: int, semaphore: str, signals_of: Callable[[int], tuple[str, ...]]
    ) -> int:
        """The transfer whose completion is a ``("dma", pc)`` update of ``semaphore``, or -1.

        pcs count per engine stream, so (core, pc) may name DMAs of several trigger engines; the
        one whose instruction signals this semaphore is the source.
        """
        key = (core << _KEY_ENGINE_SHIFT) | pc
        lo, hi = np.searchsorted(self._by_pc_keys, [key, key + 1])
        candidates = self.by_pc_order[lo:hi].tolist()
        if len(candidates) > 1:
            candidates = [t for t in candidates if semaphore in signals_of(t)] or candidates
        return candidates[0] if candidates else -1


# ---- who released whom ------------------------------------------------------------------------


class Dependencies:
    """Which record each semaphore update came from, and which update released each wait.

    An update's source is an instruction record (``update_instruction[u]``) or, for DMA completions,
    a transfer (``update_transfer[u]``; its last piece is the slice that finished it).
    """

    def __init__(self, trace: Trace, facts: FactsMemo) -> None:
        self.trace = trace
        self.semaphores = SemaphoreIndex(trace)
        self.instructions = InstructionIndex(trace)
        self.transfers = Transfers(trace, self.instructions)
        updates = trace.semaphore_updates
        n = len(updates)
        source = engine_codes(updates, "source_engine")
        is_dma = source == engine_code(DMA_SOURCE)
        update_core, update_pc = int_column(updates, "core"), int_column(updates, "source_pc")
        keys = instruction_keys(update_core, np.where(is_dma, 0, source), update_pc)
        self.update_instruction = np.where(is_dma, -1, self.instructions.find_many(keys))
        self.update_transfer = np.full(n, -1, np.int64)
        if is_dma.any():
            records = trace.instructions

            def signals_of(t: int) -> tuple[str, ...]:
                index = self.transfers.trigger_record[t]
                return facts(instruction_at(records, index)).signals if index >= 0 else ()

            # one candidate transfer per (core, pc) is the usual case: looked up at once; pcs
            # shared by triggers of several engines are told apart by their signals
            dma_updates = np.flatnonzero(is_dma)
            lo, hi = self.transfers.candidates(update_core[dma_updates], update_pc[dma_updates])
            single = hi - lo == 1
            self.update_transfer[dma_updates[single]] = self.transfers.by_pc_order[lo[single]]
            several = hi - lo > 1
            if isinstance(updates, RecordColumns) and isinstance(records, InstructionColumns):
                self.update_transfer[dma_updates[several]] = self._by_signals(
                    updates, dma_updates[several], lo[several], hi[several], facts
                )
            else:
                for u in dma_updates[several].tolist():
                    up = updates[u]
                    self.update_transfer[u] = self.transfers.signalled_by(
                        up.core, up.source_pc, up.semaphore, signals_of
                    )
        self.update_tick = int_column(updates, "tick")

    def _by_signals(
        self,
        updates: RecordColumns[Any],
        which: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        facts: FactsMemo,
    ) -> np.ndarray:
        """``Transfers.signalled_by`` of the updates ``which``, whose (core, pc) has the
        candidate transfers ``by_pc_order[lo:hi]``: the first whose instruction signals the
        update's semaphore, else the first."""
        if not len(which):
            return np.zeros(0, np.int64)
        sem_codes, sem_names = updates.names("semaphore")
        fid, table = facts.ids(self.trace.instructions)
        name_code = {name: i for i, name in enumerate(sem_names)}
        width = max(len(sem_names), 1)
        signals = [
            f * width + name_code[name]
            for f, fact in enumerate(table)
            for name in fact.signals
            if name in name_code
        ]
        counts = hi - lo
        owner = np.repeat(np.arange(len(which)), counts)  # per (update, candidate) pair
        offset = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        candidate = self.transfers.by_pc_order[np.repeat(lo, counts) + offset]
        trigger = self.transfers.trigger_record[candidate]
        key = np.where(trigger >= 0, fid[np.maximum(trigger, 0)], -1) * width
        key = key + sem_codes[which][owner]
        signals_it = (trigger >= 0) & np.isin(key, np.array(signals, np.int64))
        # per update: the first candidate that signals, else the first candidate
        rank = np.where(signals_it, offset, offset + counts.max(initial=0) + 1)
        order = np.lexsort((rank, owner))
        first = order[np.append(True, owner[order][1:] != owner[order][:-1])]
        return candidate[first]

    def wait_updates(self, record_index: int) -> list[tuple[str, int, int]]:
        """(semaphore, value, update index) for each wait of an instruction that an update met.

        A wait on the instruction's own engine semaphore is a same-engine dependency, which the
        engine meets by streaming the instruction behind its producer (``Cost.chain_ticks``),
        not through the semaphore: it is not listed."""
        rec = self.trace.instructions[record_index]
        own = f"S.{rec.engine}"
        out = []
        for semaphore, value in rec.instruction.waits:
            if semaphore == own:
                continue
            u = self.semaphores.satisfying(rec.core, semaphore, value)
            if u >= 0:
                out.append((semaphore, value, u))
        return out


def semaphore_waits(
    trace: Trace, deps: Dependencies, ready: np.ndarray, start: np.ndarray
) -> tuple[dict[str, Counter[str]], np.ndarray]:
    """Wait ticks per engine by semaphore class, and the update that released each instruction:
    of the waits an update met (``Dependencies.wait_updates``), the one met last (the first of
    equal ticks), if after the instruction was ready; else the wait is class 'other'.

    The waits are listed in one pass; the look-ups and sums are numpy."""
    recs = trace.instructions
    binding = np.full(len(recs), -1, np.int64)
    waiting = np.flatnonzero(start > ready)
    engines = engine_codes(recs)
    row, groups, values = _waits_on_updates(
        instructions_of(recs), waiting, int_column(recs, "core"), engines, deps.semaphores
    )
    met = deps.semaphores.satisfying_many(groups, values)
    row, met = row[met >= 0], met[met >= 0]
    met_tick = deps.update_tick[met]
    # per instruction, its latest update; the first of equal ticks (rows are in wait order)
    order = np.lexsort((np.arange(len(row)), -met_tick, row))
    first = order[np.append(True, row[order][1:] != row[order][:-1])] if len(order) else order
    released = first[met_tick[first] > ready[row[first]]]
    binding[row[released]] = met[released]

    names, update_class = _update_classes(trace.semaphore_updates, binding[waiting])
    bound = binding[waiting]
    cls = np.where(bound >= 0, update_class[np.maximum(bound, 0)], 0) if len(bound) else bound
    pair = engines[waiting] * len(names) + cls
    keys, totals = sums_in_order_met(pair, (start - ready)[waiting])
    waits: dict[str, Counter[str]] = defaultdict(Counter)
    for key, total in zip(keys.tolist(), totals.tolist(), strict=True):
        engine, c = divmod(key, len(names))
        waits[engine_of_code(engine)][names[c]] += total
    return waits, binding


def _waits_on_updates(
    instructions: Sequence[Any],
    waiting: np.ndarray,
    cores: np.ndarray,
    engines: np.ndarray,
    semaphores: SemaphoreIndex,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waits of the instructions ``waiting`` (record indices) on semaphores that have
    updates, but not on their own engine's (``Dependencies.wait_updates``), in record then wait
    order: per wait its record, semaphore group (``SemaphoreIndex.group_of``) and value."""
    lists = [instructions[i].waits for i in waiting.tolist()]
    flat = list(itertools.chain.from_iterable(lists))
    if not flat:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    code_of: dict[str, int] = {}
    codes = np.array([code_of.setdefault(name, len(code_of)) for name, _ in flat], np.int64)
    values = np.array([value for _, value in flat], np.int64)
    rows = np.repeat(waiting, np.fromiter(map(len, lists), np.int64, len(lists)))
    # (core, semaphore) -> group, looked up once per distinct pair
    width = len(code_of)
    pairs, inverse = np.unique(cores[rows] * width + codes, return_inverse=True)
    name_of = list(code_of)
    group_of = semaphores.group_of
    found = [group_of.get((p // width, name_of[p % width]), -1) for p in pairs.tolist()]
    group = np.array(found, np.int64)[inverse.reshape(-1)]
    # the own engine's semaphore: its code among the names, per engine (-1: not waited on)
    own_code = np.full(int(engines.max(initial=0)) + 1, -1, np.int64)
    for engine in distinct(engines[rows]).tolist():
        own_code[engine] = code_of.get(f"S.{engine_of_code(engine)}", -1)
    keep = (group >= 0) & (codes != own_code[engines[rows]])
    return rows[keep], group[keep], values[keep]


def _update_classes(updates: Sequence[Any], used: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The semaphore classes (``semaphore_class``; 'other' first) and each update's class index,
    worked out for the updates in ``used`` (-1 entries ignored), once per distinct pair of
    semaphore and source engine."""
    names = ["other"]
    update_class = np.zeros(len(updates), np.int64)
    used = distinct(used[used >= 0])
    if isinstance(updates, RecordColumns):
        sem_codes, sem_names = updates.names("semaphore")
        source_codes, source_names = updates.names("source_engine")
        pairs = sem_codes[used] * max(len(source_names), 1) + source_codes[used]
        pair_keys, inverse = np.unique(pairs, return_inverse=True)
        per_pair = []
        for pair in pair_keys.tolist():
            sem, source = divmod(pair, max(len(source_names), 1))
            per_pair.append(_class_index(names, sem_names[sem], source_names[source]))
        if len(used):
            update_class[used] = np.array(per_pair, np.int64)[inverse.reshape(-1)]
        return names, update_class
    for u in used.tolist():
        up = updates[u]
        update_class[u] = _class_index(names, up.semaphore, up.source_engine)
    return names, update_class


def _class_index(names: list[str], semaphore: str, source_engine: str) -> int:
    name = semaphore_class(semaphore, source_engine)
    if name not in names:
        names.append(name)
    return names.index(name)


# ---- HBM traffic ------------------------------------------------------------------------------


class DmaColumns(NamedTuple):
    """Per DMA piece: core, start/end ticks, HBM bytes read and written (by transfer direction)."""

    core: np.ndarray
    start: np.ndarray
    end: np.ndarray
    hbm_read: np.ndarray
    hbm_write: np.ndarray


def dma_columns(
    trace: Trace,
    facts: FactsMemo,
    index: InstructionIndex | None = None,
    transfers: Transfers | None = None,
) -> DmaColumns:
    """Columns of the DMA pieces; a piece reads HBM if its instruction's source is in HBM, writes
    HBM if its destination is (both for HBM->HBM copies)."""
    dma = trace.dma
    transfers = transfers or Transfers(trace, index)
    reads = np.zeros(len(transfers), bool)
    writes = np.zeros(len(transfers), bool)
    records = trace.instructions
    if isinstance(records, InstructionColumns):  # by distinct facts, not per transfer
        fid, table = facts.ids(records)
        trigger = transfers.trigger_record
        has = trigger >= 0
        of_trigger = fid[trigger[has]]
        reads[has] = np.array([f.read_bytes[HBM] > 0 for f in table], bool)[of_trigger]
        writes[has] = np.array([f.write_bytes[HBM] > 0 for f in table], bool)[of_trigger]
    else:
        for t, found in enumerate(transfers.trigger_record.tolist()):
            if found >= 0:
                f = facts(records[found].instruction)
                reads[t] = f.read_bytes[HBM] > 0
                writes[t] = f.write_bytes[HBM] > 0
    size = int_column(dma, "transfer_bytes")
    of = transfers.piece_transfer
    return DmaColumns(
        int_column(dma, "core"),
        int_column(dma, "start_tick"),
        int_column(dma, "end_tick"),
        np.where(reads[of], size, 0) if len(dma) else size,
        np.where(writes[of], size, 0) if len(dma) else size,
    )


def end_tick(trace: Trace) -> int:
    """End of the run: the last instruction done or DMA piece end."""
    ends = 0
    if trace.instructions:
        ends = int(int_column(trace.instructions, "done_tick").max())
    if trace.dma:
        ends = max(ends, int(int_column(trace.dma, "end_tick").max()))
    return ends


def cores_of(trace: Trace) -> list[int]:
    """The cores with records, ascending ([0] if none)."""
    cores = [int_column(trace.instructions, "core"), int_column(trace.dma, "core")]
    if all(c.min(initial=0) >= 0 for c in cores):  # core indices: count them, no sort
        seen = np.bincount(np.concatenate(cores)) if any(len(c) for c in cores) else np.zeros(0)
        return np.flatnonzero(seen).tolist() or [0]
    return np.union1d(*cores).tolist() or [0]

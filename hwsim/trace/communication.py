"""Per core of a multi-core run: compute, communication, and how much of the communication the
compute hid (the report of runs whose cores take part in collectives).

Communication is the union of a core's collective slices (its CollectiveE track, from the moment
every rank had arrived to the end); compute is the union of its other engines' slices and its DMA
pieces. Overlapped communication runs while compute does; exposed communication is the rest,
the time the core only communicated. Waiting is the time a rank had arrived at a collective and
waited for slower ranks (not counted as communication: the core's engines may still run then).
Bytes per link sum what the core's rank sent over each class of link.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hwsim.engines import engine_spec
from hwsim.trace.array_ops import union_ticks
from hwsim.trace.records import Trace


def communication_report(trace: Trace) -> dict[str, Any]:
    """``{"cores": {core: {...ns and bytes...}}, "total": {...}}`` for the cores that ran a
    collective (empty when none did). Times in ns."""
    ns_per_tick = 1000 / trace.base_mhz
    cores = sorted({record.core for record in trace.collectives})
    compute: dict[int, list[tuple[int, int]]] = {}
    communication: dict[int, list[tuple[int, int]]] = {}
    for core in cores:
        compute[core], communication[core] = busy_intervals(trace, core)
    report: dict[int, dict[str, Any]] = {}
    for core in cores:
        records = [r for r in trace.collectives if r.core == core]
        comm, work = _union(communication[core]), _union(compute[core])
        both = _union(communication[core] + compute[core])
        overlapped = comm + work - both
        link_bytes: dict[str, int] = {}
        for record in records:
            for link, nbytes in record.link_bytes.items():
                link_bytes[link] = link_bytes.get(link, 0) + nbytes
        report[core] = {
            "collectives": len(records),
            "compute_ns": work * ns_per_tick,
            "communication_ns": comm * ns_per_tick,
            "overlapped_ns": overlapped * ns_per_tick,
            "exposed_ns": (comm - overlapped) * ns_per_tick,
            "waiting_ns": sum(r.start_tick - r.arrival_tick for r in records) * ns_per_tick,
            "link_bytes": link_bytes,
        }
    if not report:
        return {}
    keys = ("compute_ns", "communication_ns", "overlapped_ns", "exposed_ns", "waiting_ns")
    total = {key: max(row[key] for row in report.values()) for key in keys}
    return {"cores": report, "max_over_cores": total}


def busy_intervals(
    trace: Trace, core: int | None = None
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(compute, communication) busy intervals (ticks) of ``core`` (None: every core): its
    engines' and DMA pieces' slices, and its collective engine's."""
    compute: list[tuple[int, int]] = []
    communication: list[tuple[int, int]] = []
    for rec in trace.instructions:
        if core in (None, rec.core) and rec.end_tick > rec.start_tick:
            is_collective = engine_spec(rec.engine).kind == "collective"
            target = communication if is_collective else compute
            target.append((rec.start_tick, rec.end_tick))
    for piece in trace.dma:
        if core in (None, piece.core):
            compute.append((piece.start_tick, piece.end_tick))
    return compute, communication


def _union(intervals: list[tuple[int, int]]) -> int:
    if not intervals:
        return 0
    pairs = np.asarray(intervals, np.int64)
    return union_ticks(pairs[:, 0], pairs[:, 1])

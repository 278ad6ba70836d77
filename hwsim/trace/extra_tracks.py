"""The Chrome trace's derived tracks: the critical path and the per-op spans (``chrome`` writes
the engines, DMA queues, flows and counters)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hwsim.engines import engine_label
from hwsim.isa.origin import origin_of
from hwsim.trace.analysis import Dependencies, engine_of_code
from hwsim.trace.records import Trace

if TYPE_CHECKING:
    from hwsim.trace.chrome import _Writer

Emit = Callable[[str], None]


def _track(emit: Emit, pid: int, tid: int, name: str, kind: str, sort_index: int) -> None:
    from hwsim.trace.chrome import _meta

    emit(_meta("thread_name", pid, tid, {"name": name, "hwsim_track": kind}))
    emit(_meta("thread_sort_index", pid, tid, {"sort_index": sort_index}))


def critical_links(trace: Trace, deps: Dependencies) -> list[tuple[int, str, int, int]]:
    """(core, resource label, first tick, last tick) of each link's share of the run, earliest
    first: from its predecessor's release of it to its own release of the next link, so the
    links tile the run as the summary's critical-path shares add up."""
    from hwsim.trace.critical_path import critical_path_columns

    c = critical_path_columns(trace, deps)
    names = [_resource_label(code) for code in c.resource.tolist()]
    return list(
        zip(c.core.tolist(), names, c.begin_tick.tolist(), c.end_tick.tolist(), strict=True)
    )


def _resource_label(code: int) -> str:
    return {-1: "DMA", -2: "startup"}.get(code) or engine_label(engine_of_code(code))


def write_critical_path(writer: _Writer, deps: Dependencies) -> None:
    """One "Critical path" track per core the path visits, on top: a slice per link, named by
    its resource, over the link's share of the run (``critical_links``), with the record's own
    engine, pc and ticks as args."""
    from hwsim.trace.chrome import CRITICAL_TID, core_pid
    from hwsim.trace.critical_path import critical_path_columns

    emit, ns, us = writer.events.emit, writer.ns, writer.us
    c = critical_path_columns(writer.trace, deps)
    for core in sorted(set(c.core.tolist())):
        _track(emit, core_pid(core), CRITICAL_TID, "Critical path", "critical", -1)
    labels: dict[int, str] = {}
    for core, code, pc, first, last, begin, end in zip(*(col.tolist() for col in c), strict=True):
        name = labels.get(code) or labels.setdefault(code, _resource_label(code))
        kind = {-1: "dma", -2: "startup"}.get(code, "instruction")
        t0, t1 = ns(begin), ns(end)
        emit(
            f'{{"ph":"X","pid":{core_pid(core)},"tid":{CRITICAL_TID},"ts":{us(t0)},'
            f'"dur":{us(t1 - t0)},"name":"{name}","cat":"critical","args":{{'
            f'"kind":"{kind}","pc":{pc},"start_tick":{first},"end_tick":{last},'
            f'"share_ticks":{end - begin}}}}}'
        )


def write_op_spans(writer: _Writer) -> None:
    """Per core, an "Ops" track: one span per source tag (a bridge run tags each instruction with
    its op and graph node), from its first instruction's start to its last one's end, with the
    instruction count, busy time and engines as args. Tags whose spans partly overlap (pipelined
    ops) go on further lanes, "Ops (2)", ...; a fused group's tag lists its members."""
    from hwsim.trace.chrome import OPS_TID_BASE, core_pid, host_lanes

    emit, ns, us, facts = writer.events.emit, writer.ns, writer.us, writer.facts
    spans: dict[tuple[int, str], dict[str, Any]] = {}
    for rec in writer.trace.instructions:
        tag = facts(rec.instruction).tag
        if not tag:
            continue
        span = spans.get((rec.core, tag))
        if span is None:
            span = spans[rec.core, tag] = {
                "name": tag,
                "start_ns": rec.start_tick,
                "end_ns": rec.end_tick,
                "busy": 0,
                "count": 0,
                "engines": set(),
            }
        span["start_ns"] = min(span["start_ns"], rec.start_tick)
        span["end_ns"] = max(span["end_ns"], rec.end_tick)
        span["busy"] += rec.end_tick - rec.start_tick
        span["count"] += 1
        span["engines"].add(rec.engine)
    for core in sorted({core for core, _ in spans}):
        pid = core_pid(core)
        mine = [span for (c, _), span in spans.items() if c == core]
        placed = host_lanes(mine)  # in ticks: lanes nest exactly as the floored ns do
        for lane in sorted({lane for lane, _ in placed}):
            name = "Ops" + (f" ({lane + 1})" if lane else "")
            _track(emit, pid, OPS_TID_BASE + lane, name, "ops", 10_000 + lane)
        for lane, span in placed:
            t0, t1 = ns(span["start_ns"]), ns(span["end_ns"])
            members = _members(span["name"])
            extra = f',"members":{json.dumps(members)}' if members else ""
            emit(
                f'{{"ph":"X","pid":{pid},"tid":{OPS_TID_BASE + lane},"ts":{us(t0)},'
                f'"dur":{us(t1 - t0)},"name":{json.dumps(span["name"])},"cat":"op","args":{{'
                f'"instructions":{span["count"]},"busy_ns":{ns(span["busy"])},'
                f'"engines":{json.dumps(sorted(span["engines"]))}{extra}}}}}'
            )


def _members(tag: str) -> list[str]:
    """The graph nodes of a fused group's tag (``Origin.members``), or [] for a single op."""
    origin = origin_of(tag)
    return list(origin.members) if origin is not None else []

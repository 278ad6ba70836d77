"""The bottleneck verdict of a run: which resource bounds it, and by which mechanism.

Derived from the summary's numbers alone (``bottleneck_verdict``). The verdict follows the
critical path: among the resources that are saturated (busy at least ``SATURATED_PCT`` of the
run), the one with the largest share of the critical path bounds the run, and it is named by
what keeps it busy:

- a compute engine or Sync whose busy time is mostly DMA triggers is **trigger-bound** (the
  descriptors it must issue or generate: doorbells, software DGE on GpSimdE, hardware DGE);
  otherwise it is **compute-bound**;
- DMA is **HBM-bandwidth-bound** when MBU reaches ``MBU_SATURATED_PCT``; else
  **descriptor-overhead-bound** when its data moves at less than ``EFFICIENT_PCT`` of the engines'
  bandwidth because its descriptors are small (the saturation curve of [S11][S12]); else
  **DMA-bandwidth-bound** (the engines move full-size descriptors as fast as they can).

With nothing saturated: **sync/latency-bound** when nothing is busy for ``IDLE_LATENCY_PCT`` of
the run (waits on semaphores, start latencies), else "<resource>-limited" after the largest
critical-path share.
"""

from __future__ import annotations

from hwsim.trace.analysis import DMA_SOURCE, engine_label
from hwsim.trace.summary import DmaStats, EngineStats

#: A resource busy this share of the run bounds it. Neuron's own target for a compute-bound
#: kernel is engine active >= 90% [S10]; 70% names the limiter before it is fully saturated.
SATURATED_PCT = 70.0
#: MBU at which DMA traffic counts as HBM-bandwidth-bound (Neuron's "good" MBU target, [S10]).
MBU_SATURATED_PCT = 60.0
#: DMA data moving below this share of the engines' bandwidth is descriptor-overhead-bound.
EFFICIENT_PCT = 70.0
#: An engine whose busy time is at least this share DMA triggers is trigger-bound.
TRIGGER_SHARE_PCT = 50.0
#: Nothing busy for this share of the run: the run is bound by sync/latency, not by throughput.
IDLE_LATENCY_PCT = 50.0


def bottleneck_verdict(
    engines: dict[str, EngineStats],
    dma: DmaStats,
    mbu_pct: float,
    idle_pct: float,
    path_share_pct: dict[str, float],
    mfu_pct: float,
) -> tuple[str, str, dict[str, float]]:
    """(verdict text, bounding resource, evidence numbers); see the module docstring.

    ``dma`` is the summary's DMA section (``active_pct``, ``data_efficiency_pct``,
    ``descriptor_bytes_mean``); each engine's entry has ``busy_pct``, ``trigger_busy_pct`` and
    ``wait_pct_by_source``.
    """
    busy = {name: e.busy_pct for name, e in engines.items()}
    dma_active = float(dma.active_pct)
    share = {k: v for k, v in path_share_pct.items() if k != "startup"}
    top = max(busy, key=busy.__getitem__)
    evidence = {
        "dma_active_pct": dma_active,
        "mbu_pct": mbu_pct,
        "idle_pct": idle_pct,
        "mfu_pct": mfu_pct,
        f"{top}_busy_pct": busy[top],
    }
    saturated = {name: pct for name, pct in busy.items() if pct >= SATURATED_PCT}
    if dma_active >= SATURATED_PCT:
        saturated[DMA_SOURCE] = dma_active
    if saturated:
        bound = max(saturated, key=lambda r: (share.get(r, 0.0), saturated[r]))
        evidence[f"critical_path_{bound}_pct"] = share.get(bound, 0.0)
        on_path = f"critical path {share.get(bound, 0.0):.0f}% on {_label(bound)}"
        if bound == DMA_SOURCE:
            return _dma_verdict(dma, mbu_pct, busy, top, on_path, evidence), bound, evidence
        return _engine_verdict(bound, engines, dma_active, mfu_pct, on_path), bound, evidence
    if idle_pct >= IDLE_LATENCY_PCT:
        waiter = max(engines, key=lambda e: engines[e].wait_pct)
        sources = engines[waiter].wait_pct_by_source
        on = max(sources, key=sources.__getitem__) if sources else ""
        detail = (
            f"; {engine_label(waiter)} waits {engines[waiter].wait_pct:.0f}% of the time, "
            f"mostly on {_label(on)} semaphores"
            if on
            else ""
        )
        text = (
            f"sync/latency-bound: nothing busy {idle_pct:.0f}% of the time; busiest "
            f"{engine_label(top)} busy {busy[top]:.0f}%, DMA active {dma_active:.0f}%{detail}"
        )
        return text, "latency", evidence
    limiter = max(share, key=share.__getitem__) if share else top
    evidence[f"critical_path_{limiter}_pct"] = share.get(limiter, 0.0)
    text = (
        f"{_label(limiter)}-limited (no resource saturated): critical path "
        f"{share.get(limiter, 0.0):.0f}% on {_label(limiter)}; busiest {engine_label(top)} busy "
        f"{busy[top]:.0f}%, DMA active {dma_active:.0f}%"
    )
    return text, limiter, evidence


def _dma_verdict(
    dma: DmaStats,
    mbu_pct: float,
    busy: dict[str, float],
    top: str,
    on_path: str,
    evidence: dict[str, float],
) -> str:
    efficiency = float(dma.data_efficiency_pct)
    descriptor = float(dma.descriptor_bytes_mean)
    evidence["dma_data_efficiency_pct"] = efficiency
    head = f"DMA active {dma.active_pct:.0f}%, MBU {mbu_pct:.0f}%"
    tail = f"{on_path}; busiest engine {engine_label(top)} busy {busy[top]:.0f}%"
    if mbu_pct >= MBU_SATURATED_PCT:
        return f"HBM-bandwidth-bound: {head}, {tail}"
    if efficiency < EFFICIENT_PCT:
        return (
            f"descriptor-overhead-bound: {head}; descriptors average {descriptor:,.0f} B and move "
            f"at {efficiency:.0f}% of the DMA engines' bandwidth (>= 4 KiB saturates [S11]); {tail}"
        )
    return f"DMA-bandwidth-bound: {head}, descriptors average {descriptor:,.0f} B; {tail}"


def _engine_verdict(
    engine: str, engines: dict[str, EngineStats], dma_active: float, mfu_pct: float, on_path: str
) -> str:
    entry = engines[engine]
    label = engine_label(engine)
    triggers = float(entry.trigger_busy_pct)
    if entry.busy_pct and 100.0 * triggers / entry.busy_pct >= TRIGGER_SHARE_PCT:
        return (
            f"trigger-bound on {label}: {label} busy {entry.busy_pct:.0f}%, "
            f"{triggers:.0f}% of the run issuing DMA triggers (descriptor generation); {on_path}; "
            f"DMA active {dma_active:.0f}%"
        )
    return (
        f"compute-bound on {label}: {label} busy {entry.busy_pct:.0f}%, {on_path}, "
        f"DMA active {dma_active:.0f}%, MFU {mfu_pct:.0f}%"
    )


def _label(name: str) -> str:
    return "DMA" if name == DMA_SOURCE else engine_label(name)

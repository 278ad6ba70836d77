"""The printed summary of a run (``hwsim run``, ``hwsim report``, ``hwsim demo``): run, engines,
throughput, on-chip memory, critical path and bottleneck, as rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from hwsim.trace.analysis import engine_label


def print_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    """The summary as rich tables: run, engines, throughput, memory, critical path, bottleneck."""
    out = console or Console()
    s = summary
    total_ns = float(s.get("total_ns", 0.0))
    cores = s.get("cores", 1)
    out.print(
        f"[bold]{s.get('workload') or 'run'}[/bold] on [bold]{s.get('config_name') or '?'}[/bold]: "
        f"{_time(total_ns)} ({s.get('total_ticks', 0):,} ticks at {s.get('base_mhz', '?')} MHz"
        f"{f', {cores} cores' if cores and cores > 1 else ''}), "
        f"{s.get('instructions', 0):,} instructions"
    )
    engines = Table(title="Engines", title_justify="left")
    for column in ("engine", "busy %", "instr.", "top opcodes", "wait %", "waits on"):
        left = column in ("engine", "top opcodes", "waits on")
        engines.add_column(column, justify="left" if left else "right")
    for name, e in (s.get("engines") or {}).items():
        opcodes = ", ".join(f"{op} {n:,}" for op, n in list(e.get("opcodes", {}).items())[:2])
        by = e.get("wait_pct_by_source") or {}
        waits = ", ".join(
            f"{_source(k)} {v:.1f}%" for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:2]
        )
        engines.add_row(
            e.get("label", name),
            f"{e.get('busy_pct', 0.0):.1f}",
            f"{e.get('instructions', 0):,}",
            opcodes,
            f"{e.get('wait_pct', 0.0):.1f}",
            waits,
        )
    dma = s.get("dma") or {}
    engines.add_row(
        "DMA",
        f"{s.get('dma_active_pct', 0.0):.1f}",
        f"{dma.get('transfers', 0):,}",
        f"{dma.get('pieces', 0):,} pieces, {_bytes(dma.get('bytes', 0))}",
        "",
        "",
    )
    out.print(engines)

    flops = s.get("flops") or {}
    peaks = s.get("peaks") or {}
    rates = Table(title="Throughput", title_justify="left", show_header=False)
    rates.add_column("metric")
    rates.add_column("value", justify="right")
    rates.add_column("note")
    rates.add_row(
        "MFU", f"{s.get('mfu_pct', 0.0):.2f} %", f"model FLOPs {flops.get('model_flops', 0):,.0f}"
    )
    rates.add_row(
        "HFU",
        f"{s.get('hfu_pct', 0.0):.2f} %",
        f"TensorE FLOPs {flops.get('tensor_flops', 0):,.0f} vs peak "
        f"{peaks.get('flops_per_s', 0) / 1e12:,.1f} TFLOP/s ({peaks.get('dtype', '?')})",
    )
    rates.add_row(
        "MBU",
        f"{s.get('mbu_pct', 0.0):.2f} %",
        f"HBM read {_bytes(s.get('hbm_read_bytes', 0))}, "
        f"write {_bytes(s.get('hbm_write_bytes', 0))} "
        f"vs {peaks.get('hbm_bytes_per_s', 0) / 1e9:,.0f} GB/s",
    )
    rates.add_row(
        "DMA active", f"{s.get('dma_active_pct', 0.0):.2f} %", "union of DMA transfers over the run"
    )
    rates.add_row("idle", f"{s.get('idle_pct', 0.0):.2f} %", "no engine and no DMA busy")
    out.print(rates)

    memory = s.get("memory") or {}
    mem = Table(title="On-chip memory", title_justify="left")
    for column in ("memory", "peak", "% of capacity", "allocations"):
        mem.add_column(column, justify="left" if column == "memory" else "right")
    for name in ("sbuf", "psum"):
        m = memory.get(name) or {}
        mem.add_row(
            name.upper(),
            _bytes(m.get("peak_bytes", 0)),
            f"{m.get('peak_pct', 0.0):.1f}",
            f"{m.get('allocations', 0):,}",
        )
    out.print(mem)

    path = s.get("critical_path") or {}
    shares = ", ".join(f"{_source(k)} {v:.1f}%" for k, v in (path.get("share_pct") or {}).items())
    out.print(
        f"[bold]Critical path[/bold]: {path.get('length', 0):,} links "
        f"({path.get('instructions', 0):,} instructions, {path.get('dma_transfers', 0):,} DMA "
        f"transfers); time on {shares or '-'}"
    )
    out.print(f"[bold]Bottleneck[/bold]: {s.get('bottleneck', 'n/a')}")


def _source(name: str) -> str:
    return "DMA" if name == "dma" else engine_label(name)


def _time(ns: float) -> str:
    if ns < 2_000:
        return f"{ns:,.1f} ns"
    if ns < 2_000_000:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns / 1e6:,.3f} ms"


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"

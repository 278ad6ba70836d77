"""The printed summary of a run (``hwsim run``, ``hwsim report``, ``hwsim demo``): run, engines,
throughput, on-chip memory, critical path and bottleneck, as rich tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hwsim.report.console import report_console
from hwsim.trace.analysis import engine_label
from hwsim.trace.summary import RunSummary
from hwsim.units import size_text, time_text


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    """The summary as rich tables: run, engines, throughput, memory, critical path, bottleneck."""
    out = console or report_console()
    s = summary
    cores = s.cores
    out.print(
        f"[bold]{s.workload or 'run'}[/bold] on [bold]{s.config_name or '?'}[/bold]: "
        f"{time_text(float(s.total_ns))} ({s.total_ticks:,} ticks at {s.base_mhz or '?'} MHz"
        f"{f', {cores} cores' if cores and cores > 1 else ''}), "
        f"{s.instructions:,} instructions"
    )
    engines = Table(title="Engines", title_justify="left")
    for column in ("engine", "busy %", "instr.", "top opcodes", "wait %", "waits on"):
        left = column in ("engine", "top opcodes", "waits on")
        engines.add_column(column, justify="left" if left else "right")
    for name, e in s.engines.items():
        opcodes = ", ".join(f"{op} {n:,}" for op, n in list(e.opcodes.items())[:2])
        by = e.wait_pct_by_source
        waits = ", ".join(
            f"{_source(k)} {v:.1f}%" for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:2]
        )
        engines.add_row(
            e.label or name,
            f"{e.busy_pct:.1f}",
            f"{e.instructions:,}",
            opcodes,
            f"{e.wait_pct:.1f}",
            waits,
        )
    dma = s.dma
    engines.add_row(
        "DMA",
        f"{s.dma_active_pct:.1f}",
        f"{dma.transfers:,}",
        f"{dma.pieces:,} pieces, {size_text(dma.bytes)}",
        "",
        "",
    )
    out.print(engines)

    flops, peaks = s.flops, s.peaks
    rates = Table(title="Throughput", title_justify="left", show_header=False)
    rates.add_column("metric")
    rates.add_column("value", justify="right")
    rates.add_column("note")
    rates.add_row("MFU", f"{s.mfu_pct:.2f} %", f"model FLOPs {flops.model_flops:,.0f}")
    rates.add_row(
        "HFU",
        f"{s.hfu_pct:.2f} %",
        f"TensorE FLOPs {flops.tensor_flops:,.0f} vs peak "
        f"{peaks.flops_per_s / 1e12:,.1f} TFLOP/s ({peaks.dtype})",
    )
    rates.add_row(
        "MBU",
        f"{s.mbu_pct:.2f} %",
        f"HBM read {size_text(s.hbm_read_bytes)}, "
        f"write {size_text(s.hbm_write_bytes)} "
        f"vs {peaks.hbm_bytes_per_s / 1e9:,.0f} GB/s",
    )
    rates.add_row("DMA active", f"{s.dma_active_pct:.2f} %", "union of DMA transfers over the run")
    rates.add_row("idle", f"{s.idle_pct:.2f} %", "no engine and no DMA busy")
    out.print(rates)

    mem = Table(title="On-chip memory", title_justify="left")
    for column in ("memory", "peak", "% of capacity", "allocations"):
        mem.add_column(column, justify="left" if column == "memory" else "right")
    for name in ("sbuf", "psum"):
        m = s.memory_stats(name)
        mem.add_row(
            name.upper(), size_text(m.peak_bytes), f"{m.peak_pct:.1f}", f"{m.allocations:,}"
        )
    out.print(mem)

    path = s.critical_path
    shares = ", ".join(f"{_source(k)} {v:.1f}%" for k, v in path.share_pct.items())
    out.print(
        f"[bold]Critical path[/bold]: {path.length:,} links "
        f"({path.instructions:,} instructions, {path.dma_transfers:,} DMA "
        f"transfers); time on {shares or '-'}"
    )
    out.print(f"[bold]Bottleneck[/bold]: {s.bottleneck}")


def _source(name: str) -> str:
    return "DMA" if name == "dma" else engine_label(name)

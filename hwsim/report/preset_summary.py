"""The printed summary of what a hardware preset implies: time base, peaks, memories, DMA, HBM."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from hwsim.config import HardwareConfig, TimeBase, config_hash, load_config
from hwsim.report import peaks
from hwsim.report.console import report_console

_BINARY_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def print_preset_summary(
    name_or_path: str,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    console: Console | None = None,
) -> None:
    """Load a preset (or YAML path) with optional overrides and print its implied numbers."""
    config = load_config(name_or_path, overrides)
    out = console or report_console()
    chip = config.chip
    out.print(
        f"[bold]{chip.name}[/bold]: NeuronCore-{chip.generation}, "
        f"{_count(chip.cores_per_chip, 'core')} per chip, {chip.cores_per_logical_core} per "
        f"logical core, hash {config_hash(config)}"
    )
    for table in (
        time_base_table(config),
        tensor_peak_table(config),
        compute_engine_table(config),
        memory_table(config),
        dma_table(config),
        hbm_table(config),
    ):
        out.print(table)


def time_base_table(config: HardwareConfig) -> Table:
    """Base clock, and each engine's clock and cycle length in ticks and ns."""
    base = TimeBase.from_config(config)
    table = Table(title=f"Time base: {base.base_mhz} MHz, 1 tick = {base.ticks_to_ns(1):.4g} ns")
    for column in ("engine", "clock MHz", "ticks/cycle", "cycle ns"):
        table.add_column(column, justify="left" if column == "engine" else "right")
    clocks = {
        "tensor": config.tensor_engine.clock_mhz,
        "vector": config.vector_engine.clock_mhz,
        "scalar": config.scalar_engine.clock_mhz,
        "gpsimd": config.gpsimd_engine.clock_mhz,
    }
    for engine, mhz in clocks.items():
        ticks = base.ticks_per_cycle[engine]
        table.add_row(engine, str(mhz), str(ticks), f"{base.ticks_to_ns(ticks):.4g}")
    return table


def tensor_peak_table(config: HardwareConfig) -> Table:
    """TensorE dense peak per input dtype, per core and per chip."""
    te = config.tensor_engine
    table = Table(title=f"TensorE peak ({te.rows}x{te.cols} PE array @ {te.clock_mhz} MHz)")
    for column in ("dtype", "cycle x", "K packing", "FLOP/cycle", "TFLOPS/core", "TFLOPS/chip"):
        table.add_column(column, justify="left" if column == "dtype" else "right")
    for dtype in peaks.matmul_dtypes(config):
        table.add_row(
            dtype,
            str(te.cycles_multiplier_by_dtype.get(dtype, 1)),  # type: ignore[call-overload]
            str(te.contraction_packing_by_dtype.get(dtype, 1)),  # type: ignore[call-overload]
            f"{peaks.flops_per_tensor_cycle(config, dtype):,.0f}",
            f"{peaks.peak_flops_per_s(config, dtype) / 1e12:.2f}",
            f"{peaks.chip_peak_flops_per_s(config, dtype) / 1e12:.2f}",
        )
    return table


def compute_engine_table(config: HardwareConfig) -> Table:
    """VectorE, ScalarE and GpSimdE element throughput per dtype listed in the config."""
    table = Table(title="Element-wise engines (streaming rate of one input, per core)")
    for column in ("engine", "lanes", "dtype", "elem/cycle", "Gelem/s", "MIN_II"):
        table.add_column(column, justify="left" if column in ("engine", "dtype") else "right")
    table.add_column("notes")
    for engine in peaks.compute_engines():
        cfg = peaks.compute_engine(config, engine)
        notes = []
        if cfg.performance_mode:
            notes.append("perf mode")
        if not cfg.can_access_psum:
            notes.append("no PSUM")
        for i, dtype in enumerate(cfg.elements_per_cycle_per_lane_by_dtype):
            first = i == 0
            table.add_row(
                engine if first else "",
                str(cfg.lanes) if first else "",
                dtype,
                str(peaks.elements_per_cycle(cfg, dtype)),
                f"{peaks.elements_per_s(cfg, dtype) / 1e9:.1f}",
                str(cfg.min_ii_cycles) if first else "",
                ", ".join(notes) if first else "",
            )
    return table


def memory_table(config: HardwareConfig) -> Table:
    """SBUF and PSUM capacity per partition, per core and per chip, and PSUM banks."""
    sbuf, psum, cores = config.sbuf, config.psum, config.chip.cores_per_chip
    table = Table(title="On-chip memories")
    table.add_column("item")
    table.add_column("SBUF", justify="right")
    table.add_column("PSUM", justify="right")
    sbuf_core, psum_core = peaks.sbuf_bytes_per_core(config), peaks.psum_bytes_per_core(config)
    table.add_row("partitions", str(sbuf.partitions), str(psum.partitions))
    table.add_row(
        "per partition",
        format_bytes(sbuf.bytes_per_partition),
        format_bytes(psum.bytes_per_partition),
    )
    table.add_row("per core", format_bytes(sbuf_core), format_bytes(psum_core))
    table.add_row("per chip", format_bytes(sbuf_core * cores), format_bytes(psum_core * cores))
    table.add_row(
        "banks per partition",
        "-",
        f"{psum.banks} x {format_bytes(psum.bank_bytes)} "
        f"({peaks.psum_bank_fp32_elements(config)} fp32)",
    )
    return table


def dma_table(config: HardwareConfig) -> Table:
    """DMA engines, queues, bandwidth and fixed costs of one core."""
    dma = config.dma
    table = Table(title="DMA (per core)")
    table.add_column("item")
    table.add_column("value", justify="right")
    table.add_row("engines x queues", f"{dma.engines} x {dma.queues_per_engine}")
    table.add_row("bandwidth per engine", f"{dma.bandwidth_bytes_per_ns:g} GB/s")
    aggregate = peaks.dma_bandwidth_bytes_per_ns_per_core(config)
    table.add_row("aggregate bandwidth", f"{aggregate:g} GB/s")
    table.add_row("start latency", f"{dma.start_latency_ns:g} ns")
    table.add_row("trigger cost (static descriptors)", f"{dma.trigger_ns:g} ns")
    table.add_row(
        "hardware DGE trigger", "none" if dma.hwdge_ns is None else f"{dma.hwdge_ns:g} ns"
    )
    table.add_row("default DGE mode", dma.default_dge_mode)
    curve = ", ".join(
        f"{format_bytes(size)}: {eff:.0%}"
        for size, eff in sorted(dma.descriptor_efficiency.items())
    )
    table.add_row("efficiency by descriptor size", curve)
    return table


def hbm_table(config: HardwareConfig) -> Table:
    """HBM capacity and bandwidth per stack, per chip and one core's share."""
    hbm = config.hbm
    table = Table(title="HBM")
    for column in ("scope", "capacity", "bandwidth GB/s"):
        table.add_column(column, justify="left" if column == "scope" else "right")
    table.add_row(
        f"per stack (shared by {_count(hbm.cores_per_stack, 'core')})",
        format_bytes(hbm.capacity_bytes_per_stack),
        f"{hbm.bandwidth_bytes_per_ns_per_stack:g}",
    )
    table.add_row(
        f"per chip ({_count(hbm.stacks, 'stack')})",
        format_bytes(peaks.hbm_capacity_bytes_per_chip(config)),
        f"{peaks.hbm_bandwidth_bytes_per_ns_per_chip(config):g}",
    )
    table.add_row(
        "per core (share)",
        format_bytes(peaks.hbm_capacity_bytes_per_core(config)),
        f"{peaks.hbm_bandwidth_bytes_per_ns_per_core(config):g}",
    )
    return table


def format_bytes(size_bytes: float) -> str:
    """A byte count in the largest binary unit that keeps it >= 1 (e.g. '224 KiB', '28 MiB')."""
    for unit, scale in _BINARY_UNITS:
        if size_bytes >= scale:
            return f"{size_bytes / scale:.4g} {unit}"
    return f"{size_bytes:g} B"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

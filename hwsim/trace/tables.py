"""Tables named and shaped like Neuron Explorer's (HARDWARE.md §6): Instruction, DmaPacket,
SemaphoreUpdate and Summary, as CSV and (when pyarrow is installed) Parquet.

Columns use the Neuron Explorer field names where one exists, so analysis code written against a
real profile reads a simulated one; hwsim-only columns follow them (ticks, core, hwsim opcode).
Timestamps are ns from the start of the run (float: one tick is a fraction of a ns).

Mappings where the simulator has no exact equivalent of a profiler field:
``engine`` is the profiler's engine name (Tensor, Vector, Scalar, GpSimd, Sync);
``timeline_track`` is "NC<core> <engine>"; ``nki_source_location`` is the instruction's source tag;
``evt_wait_time_ns`` is start - ready (the semaphore wait); ``queue_name`` is "q<trigger><k>";
``queue_type`` is "input" (HBM->SBUF), "output" (SBUF->HBM) or "data";
``update_source`` is the signalling engine, or "AXI" for DMA completions;
``update_operation_type`` is "sem_inc" (+1) or "sem_add_imm"; ``update_trigger_timing`` "complete".
"""

from __future__ import annotations

import csv
import warnings
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwsim.csv_cells import csv_cell
from hwsim.engines import profiler_name
from hwsim.trace.analysis import DMA_SOURCE, Transfers
from hwsim.trace.facts import HBM, MEMORIES, facts_memo
from hwsim.trace.records import Trace
from hwsim.trace.summary import RunSummary

if TYPE_CHECKING:
    from hwsim.outputs_guard import OutputFolder

TABLE_NAMES = ("Instruction", "DmaPacket", "SemaphoreUpdate", "Summary")
#: Rows per Parquet record batch (bounds memory for million-row tables).
BATCH_ROWS = 65_536


Column = tuple[str, str]  # (name, kind: "int" | "float" | "str")

INSTRUCTION_COLUMNS: list[Column] = [
    ("start_ts", "float"),
    ("end_ts", "float"),
    ("duration_ns", "float"),
    ("engine", "str"),
    ("timeline_track", "str"),
    ("opcode", "str"),
    ("operands", "str"),
    ("pc", "int"),
    ("evt_wait_time_ns", "float"),
    *((f"{m}_{d}_bytes", "int") for m in MEMORIES for d in ("read", "write")),
    ("raw_flops", "int"),
    ("nki_source_location", "str"),
    ("core", "int"),
    ("hwsim_opcode", "str"),
    ("ready_ts", "float"),
    ("done_ts", "float"),
    ("ready_tick", "int"),
    ("start_tick", "int"),
    ("end_tick", "int"),
    ("done_tick", "int"),
    ("semaphore_waits", "str"),
    ("semaphore_signals", "str"),
]
DMA_PACKET_COLUMNS: list[Column] = [
    ("engine_idx", "int"),
    ("queue_name", "str"),
    ("queue_idx", "int"),
    ("queue_type", "str"),
    ("transfer_bytes", "int"),
    ("throughput", "float"),
    ("start_ts", "float"),
    ("end_ts", "float"),
    ("duration_ns", "float"),
    ("queued_ts", "float"),
    ("core", "int"),
    ("trigger_engine", "str"),
    ("trigger_pc", "int"),
    ("piece", "int"),
    ("descriptors", "int"),
    ("nki_source_location", "str"),
    ("queued_tick", "int"),
    ("start_tick", "int"),
    ("end_tick", "int"),
]
SEMAPHORE_UPDATE_COLUMNS: list[Column] = [
    ("timestamp", "float"),
    ("id", "str"),
    ("value", "int"),
    ("update_source", "str"),
    ("update_operation_type", "str"),
    ("update_trigger_timing", "str"),
    ("core", "int"),
    ("increment", "int"),
    ("source_pc", "int"),
    ("tick", "int"),
]


def write_tables(
    trace: Trace,
    out_dir: str | Path | OutputFolder,
    summary: RunSummary | None = None,
    *,
    parquet: bool = True,
) -> dict[str, Path]:
    """Write the four tables as ``<Name>.csv`` (and ``<Name>.parquet``) in ``out_dir`` (a folder
    claimed through the output guard, or a path that is claimed here).

    Returns {"Instruction.csv": path, ...}. Parquet is skipped, with a warning, when pyarrow is
    not installed (``pip install hwsim[parquet]``).
    """
    from hwsim.outputs_guard import OutputFolder, claim_folder

    if not isinstance(out_dir, OutputFolder):
        with claim_folder(out_dir) as folder:
            return write_tables(trace, folder, summary, parquet=parquet)
    from hwsim.trace.stats import summarize

    out = out_dir
    pa = _pyarrow() if parquet else None
    summary = summary if summary is not None else summarize(trace)
    tables = {
        "Instruction": (INSTRUCTION_COLUMNS, instruction_rows(trace)),
        "DmaPacket": (DMA_PACKET_COLUMNS, dma_packet_rows(trace)),
        "SemaphoreUpdate": (SEMAPHORE_UPDATE_COLUMNS, semaphore_update_rows(trace)),
        "Summary": summary_table(summary),
    }
    paths: dict[str, Path] = {}
    for name, (columns, rows) in tables.items():
        paths.update(_write_table(out, name, columns, rows, pa))
    return paths


# ---- rows ---------------------------------------------------------------------------------------


def instruction_rows(trace: Trace) -> Iterator[tuple[Any, ...]]:
    """One row per instruction record, in INSTRUCTION_COLUMNS order."""
    facts = facts_memo()
    ns = 1000 / trace.base_mhz
    for rec in trace.instructions:
        instruction = rec.instruction
        f = facts(instruction)
        engine = profiler_name(rec.engine)
        yield (
            rec.start_tick * ns,
            rec.end_tick * ns,
            (rec.end_tick - rec.start_tick) * ns,
            engine,
            f"NC{rec.core} {engine}",
            f.profiler_opcode,
            instruction.describe(),
            rec.pc,
            (rec.start_tick - rec.ready_tick) * ns,
            *(b for m in range(3) for b in (f.read_bytes[m], f.write_bytes[m])),
            f.flops,
            f.tag,
            rec.core,
            f.opcode,
            rec.ready_tick * ns,
            rec.done_tick * ns,
            rec.ready_tick,
            rec.start_tick,
            rec.end_tick,
            rec.done_tick,
            ";".join(f"{s}>={v}" for s, v in instruction.waits),
            ";".join(f"{s}+={v}" for s, v in instruction.signals),
        )


def dma_packet_rows(trace: Trace) -> Iterator[tuple[Any, ...]]:
    """One row per DMA piece (a packet of one transfer on one DMA engine)."""
    facts = facts_memo()
    transfers = Transfers(trace)
    kinds, tags = [], []
    for index in transfers.trigger_record.tolist():
        if index < 0:
            kinds.append("data")
            tags.append("")
            continue
        f = facts(trace.instructions[index].instruction)
        reads_hbm, writes_hbm = f.read_bytes[HBM] > 0, f.write_bytes[HBM] > 0
        kinds.append(
            "input"
            if reads_hbm and not writes_hbm
            else "output"
            if writes_hbm and not reads_hbm
            else "data"
        )
        tags.append(f.tag)
    ns = 1000 / trace.base_mhz
    for r, t in zip(trace.dma, transfers.piece_transfer.tolist(), strict=True):
        duration = (r.end_tick - r.start_tick) * ns
        trigger = profiler_name(r.trigger_engine)
        yield (
            r.dma_engine,
            f"q{trigger}{r.queue}",
            r.queue,
            kinds[t],
            r.transfer_bytes,
            r.transfer_bytes / duration if duration else 0.0,
            r.start_tick * ns,
            r.end_tick * ns,
            duration,
            r.queued_tick * ns,
            r.core,
            r.trigger_engine,
            r.trigger_pc,
            r.piece,
            r.descriptors,
            tags[t],
            r.queued_tick,
            r.start_tick,
            r.end_tick,
        )


def semaphore_update_rows(trace: Trace) -> Iterator[tuple[Any, ...]]:
    """One row per semaphore update; ``increment`` is the change from its previous value."""
    ns = 1000 / trace.base_mhz
    last: dict[tuple[int, str], int] = {}
    for u in sorted(trace.semaphore_updates, key=lambda u: (u.core, u.tick)):
        key = (u.core, u.semaphore)
        increment = u.value - last.get(key, 0)
        last[key] = u.value
        source = "AXI" if u.source_engine == DMA_SOURCE else profiler_name(u.source_engine)
        yield (
            u.tick * ns,
            u.semaphore,
            u.value,
            source,
            "sem_inc" if increment == 1 else "sem_add_imm" if increment >= 0 else "sem_sub_imm",
            "complete",
            u.core,
            increment,
            u.source_pc,
            u.tick,
        )


def summary_table(summary: RunSummary) -> tuple[list[Column], Iterator[tuple[Any, ...]]]:
    """The Summary table: one row of the summary's scalar fields (nested details are left out)."""
    columns: list[Column] = []
    row: list[Any] = []
    for key, value in summary.to_dict().items():
        if isinstance(value, bool):
            columns.append((key, "str"))
            row.append(str(value))
        elif isinstance(value, int):
            columns.append((key, "int"))
            row.append(value)
        elif isinstance(value, float):
            columns.append((key, "float"))
            row.append(value)
        elif isinstance(value, str):
            columns.append((key, "str"))
            row.append(value)
    return columns, iter([tuple(row)])


# ---- writing ------------------------------------------------------------------------------------


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        warnings.warn(
            "pyarrow is not installed: tables written as CSV only (pip install 'hwsim[parquet]')",
            stacklevel=3,
        )
        return None
    return pa


def _write_table(
    out: OutputFolder, name: str, columns: list[Column], rows: Iterable[tuple[Any, ...]], pa: Any
) -> dict[str, Path]:
    csv_name, parquet_name = f"{name}.csv", f"{name}.parquet"
    with ExitStack() as files:
        writer = None
        if pa is not None:
            types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
            schema = pa.schema([(column, types[kind]) for column, kind in columns])
            stream = files.enter_context(out.open(parquet_name, "wb"))
            writer = files.enter_context(pa.parquet.ParquetWriter(stream, schema))
        f = files.enter_context(out.open(csv_name, "w", newline=""))
        out_csv = csv.writer(f)
        out_csv.writerow([column for column, _ in columns])
        text = [i for i, (_, kind) in enumerate(columns) if kind == "str"]
        batch: list[tuple[Any, ...]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH_ROWS:
                _flush(batch, out_csv, writer, pa, text)
                batch = []
        _flush(batch, out_csv, writer, pa, text)
    if writer is not None:
        return {csv_name: out.path / csv_name, parquet_name: out.path / parquet_name}
    return {csv_name: out.path / csv_name}


def _flush(
    batch: list[tuple[Any, ...]], out_csv: Any, writer: Any, pa: Any, text: list[int]
) -> None:
    if text:  # only text cells can start like a formula (CSV injection; hwsim.csv_cells)
        out_csv.writerows(_text_cells_safe(row, text) for row in batch)
    else:
        out_csv.writerows(batch)
    if writer is not None and batch:
        arrays = [list(values) for values in zip(*batch, strict=True)]
        writer.write_batch(pa.record_batch(arrays, schema=writer.schema))


def _text_cells_safe(row: tuple[Any, ...], text: list[int]) -> list[Any]:
    cells = list(row)
    for i in text:
        cells[i] = csv_cell(cells[i])
    return cells

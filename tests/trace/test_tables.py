"""Neuron Explorer-shaped tables: names, columns, values, CSV and optional Parquet."""

from __future__ import annotations

import builtins
import csv
from pathlib import Path

import pytest
from synthetic_traces import small_trace

from hwsim.trace.tables import TABLE_NAMES, write_tables

NEURON_COLUMNS = {
    "Instruction": [
        "start_ts",
        "end_ts",
        "duration_ns",
        "engine",
        "timeline_track",
        "opcode",
        "operands",
        "pc",
        "evt_wait_time_ns",
        "hbm_read_bytes",
        "hbm_write_bytes",
        "sbuf_read_bytes",
        "sbuf_write_bytes",
        "psum_read_bytes",
        "psum_write_bytes",
        "raw_flops",
        "nki_source_location",
    ],
    "DmaPacket": [
        "engine_idx",
        "queue_name",
        "queue_idx",
        "queue_type",
        "transfer_bytes",
        "throughput",
        "start_ts",
        "end_ts",
    ],
    "SemaphoreUpdate": [
        "timestamp",
        "id",
        "value",
        "update_source",
        "update_operation_type",
        "update_trigger_timing",
    ],
    "Summary": [
        "total_time",
        "mfu_estimated_percent",
        "hfu_estimated_percent",
        "mbu_estimated_percent",
        "dma_active_time_percent",
        "tensor_engine_active_time_percent",
        "tensor_instruction_count",
        "hardware_flops",
        "total_ns",
        "mfu_pct",
        "bottleneck",
    ],
}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_tables_have_neuron_explorer_columns(tmp_path: Path) -> None:
    paths = write_tables(small_trace(), tmp_path)
    for name in TABLE_NAMES:
        rows = read_csv(paths[f"{name}.csv"])
        header = list(rows[0])
        missing = [c for c in NEURON_COLUMNS[name] if c not in header]
        assert not missing, f"{name} lacks {missing}"


def test_table_values(tmp_path: Path) -> None:
    paths = write_tables(small_trace(), tmp_path)
    inst = read_csv(paths["Instruction.csv"])
    matmul = next(r for r in inst if r["opcode"] == "MATMUL")
    ns = 1000 / 4800
    assert float(matmul["start_ts"]) == pytest.approx(4000 * ns)
    assert float(matmul["duration_ns"]) == pytest.approx(2000 * ns)
    assert float(matmul["evt_wait_time_ns"]) == pytest.approx(4000 * ns)
    assert matmul["engine"] == "Tensor" and matmul["timeline_track"] == "NC0 Tensor"
    assert matmul["nki_source_location"] == "matmul" and matmul["raw_flops"] == str(
        2 * 128 * 128 * 512
    )
    assert matmul["semaphore_waits"] == "S.dma.q0>=1"
    packets = read_csv(paths["DmaPacket.csv"])
    assert [p["queue_type"] for p in packets] == ["input", "input", "output", "output"]
    assert packets[0]["queue_name"] == "qSync0"
    assert float(packets[0]["throughput"]) == pytest.approx(32768 / (3000 * ns))
    updates = read_csv(paths["SemaphoreUpdate.csv"])
    assert [(u["id"], u["update_source"], u["update_operation_type"]) for u in updates] == [
        ("S.dma.q0", "AXI", "sem_inc"),
        ("S.tensor", "Tensor", "sem_inc"),
        ("S.vector", "Vector", "sem_inc"),
        ("S.dma.q1", "AXI", "sem_inc"),
    ]
    (summary,) = read_csv(paths["Summary.csv"])
    assert float(summary["dma_active_time_percent"]) == 45.0


def test_parquet_matches_csv(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    paths = write_tables(small_trace(), tmp_path)
    for name in TABLE_NAMES:
        table = pq.read_table(paths[f"{name}.parquet"])
        assert table.column_names == list(read_csv(paths[f"{name}.csv"])[0])
        assert table.num_rows == len(read_csv(paths[f"{name}.csv"]))


def test_csv_only_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("pyarrow"):
            raise ImportError("no pyarrow")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.warns(UserWarning, match="pyarrow is not installed"):
        paths = write_tables(small_trace(), tmp_path)
    assert sorted(paths) == sorted(f"{n}.csv" for n in TABLE_NAMES)
    assert not list(tmp_path.glob("*.parquet"))

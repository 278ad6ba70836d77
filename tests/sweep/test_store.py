"""The results database: columns by role, export to CSV and Parquet, the Python API."""

from __future__ import annotations

import builtins
import csv
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hwsim.sweep import SweepError, export_results, load_results, load_sweep, run_sweep
from tests.sweep.helpers import write_spec


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("store")
    spec = write_spec(
        directory,
        workloads=["gemm:32x64x64", "workloads_for_tests.py:fails_on_two_engines"],
    )
    path = directory / "r.sqlite"
    run_sweep(load_sweep(spec), path, jobs=1, progress=False)
    return path


def test_tables_and_wal_mode(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        roles = dict(conn.execute("SELECT name, role FROM columns").fetchall())
        configs = conn.execute("SELECT count(*) FROM configs").fetchone()[0]
        invocation = conn.execute("SELECT planned, ok, failed, outcome FROM invocations").fetchone()
    assert roles["dma.engines"] == "parameter" and roles["total_ns"] == "metric"
    assert configs == 4
    assert invocation == (8, 6, 2, "completed")


def test_load_results_is_a_dataframe_in_column_order(db: Path) -> None:
    frame = load_results(db)
    columns = list(frame.columns)
    assert columns[:3] == ["workload", "hbm.bandwidth_bytes_per_ns_per_stack", "dma.engines"]
    assert columns.index("total_ns") < columns.index("status") < columns.index("config_hash")
    assert len(frame) == 8 and len(load_results(db, status="failed")) == 2


def test_load_results_without_pandas_gives_dicts(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pandas":
            raise ImportError("no pandas here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    rows = load_results(db, status="ok")
    assert isinstance(rows, list) and len(rows) == 6
    assert rows[0]["workload"] == "gemm:32x64x64:bf16" and rows[0]["total_ns"] > 0


def test_export_csv(db: Path, tmp_path: Path) -> None:
    path = export_results(db, tmp_path / "out" / "results.csv")
    with path.open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 8
    assert {r["status"] for r in rows} == {"ok", "failed"}
    failed = next(r for r in rows if r["status"] == "failed")
    assert failed["error"].startswith("WorkloadError: workloads_for_tests.py:fails_on_two_engines")
    assert "raised ValueError at workloads_for_tests.py:" in failed["error"]


def test_export_parquet(db: Path, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.read_parquet(export_results(db, tmp_path / "results.parquet"))
    assert len(frame) == 8 and frame["total_ns"].notna().sum() == 6


def test_export_and_load_errors(db: Path, tmp_path: Path) -> None:
    with pytest.raises(SweepError, match=r"export writes \.csv or \.parquet files"):
        export_results(db, tmp_path / "r.xlsx")
    with pytest.raises(SweepError, match="no such results database"):
        load_results(tmp_path / "missing.sqlite")
    not_db = tmp_path / "text.sqlite"
    not_db.write_text("hello")
    with pytest.raises(SweepError, match="is not an hwsim sweep database: it is not an SQLite"):
        load_results(not_db)

"""Sweep results in SQLite: one row per (config hash, workload), written as each run finishes.

Tables:

- ``runs``: the key (``config_hash``, ``workload``), ``status`` ('ok' or 'failed'), ``error`` and
  ``traceback`` of a failed run, ``attempts`` (times the row was written: 1 unless retried),
  timings (``wall_s``, ``build_s``, ``simulate_s``), ``lowering_cached``, and one column per swept
  parameter and per recorded metric, named by its dotted path;
- ``columns``: which of those columns are parameters and which metrics (in first-seen order);
- ``configs``: the effective config of each hash, as JSON;
- ``invocations``: one row per ``hwsim sweep`` run (spec text, jobs, backend, counts, when).

Each result is its own transaction and the database is in WAL mode, so a sweep killed at any
moment leaves every finished row and a consistent file; readers (export, plots) never block the
writer. Only the sweep's parent process writes.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwsim.sweep.errors import SweepError

if TYPE_CHECKING:
    from hwsim.sweep.spec import SweepPlan

#: Fixed columns of ``runs`` (after the key), in the order results list them.
RUN_COLUMNS = {
    "status": "TEXT NOT NULL CHECK (status IN ('ok', 'failed'))",
    "error": "TEXT",
    "attempts": "INTEGER NOT NULL DEFAULT 1",
    "wall_s": "REAL",
    "build_s": "REAL",
    "simulate_s": "REAL",
    "lowering_cached": "INTEGER",
    "numerics": "INTEGER NOT NULL",
    "sweep": "TEXT",
    "point": "INTEGER",
    "worker": "TEXT",
    "finished_at": "TEXT",
    "trace_dir": "TEXT",
    "traceback": "TEXT",
}
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    config_hash TEXT NOT NULL,
    workload TEXT NOT NULL,
    {", ".join(f"{name} {kind}" for name, kind in RUN_COLUMNS.items())},
    PRIMARY KEY (config_hash, workload)
);
CREATE TABLE IF NOT EXISTS columns (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('parameter', 'metric'))
);
CREATE TABLE IF NOT EXISTS configs (
    config_hash TEXT PRIMARY KEY,
    config_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS invocations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sweep TEXT NOT NULL,
    spec_path TEXT,
    spec_text TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    jobs INTEGER,
    backend TEXT,
    planned INTEGER,
    ok INTEGER,
    failed INTEGER,
    outcome TEXT
);
"""


def quote(name: str) -> str:
    """A column name as an SQLite identifier (dotted paths need quoting)."""
    return '"' + name.replace('"', '""') + '"'


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection in WAL mode that waits (rather than fails) while another holds the lock."""
    try:
        conn = sqlite3.connect(path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit survives the process being killed (it is in the WAL); only a power
        # cut can roll back the last commits, and the file stays consistent either way.
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise SweepError(f"{path}: not a sweep results database ({exc})") from exc
    return conn


class ResultStore:
    """The writer side: prepares the tables for a plan, says what is finished, records results."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = connect(self.path)
        with self.conn:
            self.conn.executescript(_SCHEMA)
        self._invocation: int | None = None
        self._params: list[str] = []
        self._metrics: list[str] = []
        self._sweep = ""

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prepare(self, plan: SweepPlan, jobs: int, backend: str) -> None:
        """Add the plan's parameter and metric columns, its configs, and an invocation row."""
        self._params, self._metrics = list(plan.parameters), plan.metrics
        self._sweep = plan.spec.name
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(runs)")}
        roles = dict(self.conn.execute("SELECT name, role FROM columns").fetchall())
        with self.conn:
            for names, role in ((self._params, "parameter"), (self._metrics, "metric")):
                for name in names:
                    if roles.get(name, role) != role:
                        raise SweepError(
                            f"{self.path}: '{name}' is a {roles[name]} column there, "
                            f"a {role} in this sweep; use another --db"
                        )
                    if name not in have:
                        self.conn.execute(f"ALTER TABLE runs ADD COLUMN {quote(name)}")
                    self.conn.execute(
                        "INSERT OR IGNORE INTO columns (name, role) VALUES (?, ?)", (name, role)
                    )
            self.conn.executemany(
                "INSERT OR IGNORE INTO configs (config_hash, config_json) VALUES (?, ?)",
                (
                    (p.config_hash, json.dumps(p.config.model_dump(mode="json"), sort_keys=True))
                    for p in plan.points
                ),
            )
            cursor = self.conn.execute(
                "INSERT INTO invocations (sweep, spec_path, spec_text, started_at, jobs, backend,"
                " planned) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (plan.spec.name, plan.source, plan.spec_text, _now(), jobs, backend, plan.runs),
            )
            self._invocation = cursor.lastrowid

    def finished(self, numerics: bool, retry_failed: bool) -> set[tuple[str, str]]:
        """Keys (config hash, workload) a run of this plan skips.

        Skipped: ok rows (that ran with numerics, if numerics are asked for now) and, unless
        ``retry_failed``, failed rows.
        """
        rows = self.conn.execute("SELECT config_hash, workload, status, numerics FROM runs")
        done = set()
        for config_hash, workload, status, had_numerics in rows:
            finished = status == "ok" and (had_numerics or not numerics)
            if finished or (status == "failed" and not retry_failed):
                done.add((config_hash, workload))
        return done

    def record(self, result: Mapping[str, Any], params: Mapping[str, Any]) -> None:
        """Write a finished run in its own transaction; a rerun overwrites it, attempts + 1."""
        row: dict[str, Any] = {
            "config_hash": result["config_hash"],
            "workload": result["workload"],
            **{name: result.get(name) for name in RUN_COLUMNS if name != "attempts"},
            **{name: params.get(name) for name in self._params},
            **{name: result.get("metrics", {}).get(name) for name in self._metrics},
        }
        row["finished_at"] = _now()
        row["sweep"] = self._sweep
        names = list(row)
        updates = ", ".join(
            f"{quote(n)} = excluded.{quote(n)}"
            for n in names
            if n not in ("config_hash", "workload")
        )
        sql = (
            f"INSERT INTO runs ({', '.join(map(quote, names))}) "
            f"VALUES ({', '.join('?' for _ in names)}) "
            f"ON CONFLICT (config_hash, workload) DO UPDATE SET {updates}, "
            "attempts = runs.attempts + 1"
        )
        with self.conn:
            self.conn.execute(sql, [_sqlite_value(row[n]) for n in names])

    def finish(self, ok: int, failed: int, outcome: str) -> None:
        """Close this invocation's row ('completed', 'interrupted', 'error: ...')."""
        if self._invocation is None:
            return
        with self.conn:
            self.conn.execute(
                "UPDATE invocations SET finished_at = ?, ok = ?, failed = ?, outcome = ? "
                "WHERE id = ?",
                (_now(), ok, failed, outcome, self._invocation),
            )


def _sqlite_value(value: Any) -> Any:
    if value is None or isinstance(value, (int, float, str, bytes)):
        return value
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    return json.dumps(value, default=str)


# ---- reading -----------------------------------------------------------------------------------


def read_rows(
    db: str | Path, *, status: str | None = None, sweep: str | None = None
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(rows as dicts, parameter columns, metric columns) of a results database."""
    path = Path(db)
    if not path.is_file():
        raise SweepError(f"{db}: no such results database")
    with closing(connect(path)) as conn:
        try:
            roles = conn.execute("SELECT name, role FROM columns ORDER BY rowid").fetchall()
        except sqlite3.DatabaseError as exc:
            raise SweepError(f"{db}: not a sweep results database ({exc})") from exc
        params = [name for name, role in roles if role == "parameter"]
        metrics = [name for name, role in roles if role == "metric"]
        order = ["workload", *params, *metrics, *RUN_COLUMNS, "config_hash"]
        where, args = [], []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if sweep is not None:
            where.append("sweep = ?")
            args.append(sweep)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        cursor = conn.execute(
            f"SELECT {', '.join(map(quote, order))} FROM runs{clause} "
            "ORDER BY sweep, workload, point, config_hash",
            args,
        )
        rows = [dict(zip(order, values, strict=True)) for values in cursor]
    return rows, params, metrics


def load_results(db: str | Path, *, status: str | None = None, sweep: str | None = None) -> Any:
    """The results as a pandas DataFrame (a list of dicts when pandas is not installed).

    Columns: workload, the swept parameters (dotted config paths), the metrics, then status,
    error, attempts, timings and bookkeeping. ``status='ok'`` keeps finished runs only.
    """
    rows, params, metrics = read_rows(db, status=status, sweep=sweep)
    try:
        import pandas as pd
    except ImportError:
        return rows
    columns = ["workload", *params, *metrics, *RUN_COLUMNS, "config_hash"]
    return pd.DataFrame.from_records(rows, columns=columns)


def export_results(db: str | Path, output: str | Path) -> Path:
    """Write the results to ``output`` (.csv, or .parquet with pyarrow); returns the path."""
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise SweepError(f"{output}: export writes .csv or .parquet files")
    rows, params, metrics = read_rows(db)
    columns = ["workload", *params, *metrics, *RUN_COLUMNS, "config_hash"]
    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".csv":
        _write_csv(output, columns, rows)
        return output
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise SweepError(
            f"{output}: Parquet export needs pandas and pyarrow "
            "(pip install 'hwsim[parquet,sweep]')"
        ) from exc
    frame = pd.DataFrame.from_records(rows, columns=columns)
    for name in frame.columns:  # a column mixing ints and text (e.g. a point set) as text
        if frame[name].dtype == object and frame[name].map(type).nunique() > 1:
            frame[name] = frame[name].map(lambda v: None if v is None else str(v))
    frame.to_parquet(output, index=False)
    return output


def _write_csv(output: Path, columns: list[str], rows: Iterable[Mapping[str, Any]]) -> None:
    with output.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

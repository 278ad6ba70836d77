"""Sweep results in SQLite: one row per (config hash, workload), written as each run finishes.

Tables (schema and versions in ``hwsim.sweep.db``):

- ``runs``: the key (``config_hash``, ``workload``), ``status`` ('ok' or 'failed'), ``error`` and
  ``traceback`` of a failed run, ``attempts`` (times the row was written: 1 unless retried),
  timings (``wall_s``, ``build_s``, ``simulate_s``), ``lowering_cached``, the ``worker`` process
  and the ``runner`` (``hwsim sweep`` process) that ran it, and one column per swept parameter and
  per recorded metric, named by its dotted path;
- ``columns``: which of those columns are parameters and which metrics (in first-seen order);
- ``configs``: the effective config of each hash, as JSON;
- ``invocations``: one row per ``hwsim sweep`` run (spec text, jobs, backend, counts, when);
- ``claims``: which runner holds which run, until when (``hwsim.sweep.leases``).

Each result is its own transaction and the database is in WAL mode, so a sweep killed at any
moment leaves every finished row and a consistent file; readers (export, plots) never block the
writers. Several runners may write one database at once: each records only the runs it claimed.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hwsim import strict_json
from hwsim.config.loader import canonical_json
from hwsim.csv_cells import csv_cell
from hwsim.outputs_guard import output_file
from hwsim.sweep.db import (
    RUN_COLUMNS,
    database_errors,
    immediate,
    open_database,
    run_columns,
)
from hwsim.sweep.errors import SweepError

if TYPE_CHECKING:
    from hwsim.sweep.spec import SweepPlan

__all__ = ["RUN_COLUMNS", "ResultStore", "export_results", "load_results", "read_rows"]


def quote(name: str) -> str:
    """A column name as an SQLite identifier (dotted paths need quoting)."""
    return '"' + name.replace('"', '""') + '"'


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class ResultStore:
    """The writer side: prepares the tables for a plan, says what is left, records results.

    Every method turns an SQLite error into a one-line ``SweepError`` naming the database.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.conn = open_database(self.path, write=True)
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
        with database_errors(self.path), immediate(self.conn):
            # read under the write lock: another runner may be adding the same columns
            have = {row[1] for row in self.conn.execute("PRAGMA table_info(runs)")}
            roles = dict(self.conn.execute("SELECT name, role FROM columns").fetchall())
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
                ((p.config_hash, canonical_json(p.config)) for p in plan.points),
            )
            cursor = self.conn.execute(
                "INSERT INTO invocations (sweep, spec_path, spec_text, started_at, jobs, backend,"
                " planned) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (plan.spec.name, plan.source, plan.spec_text, _now(), jobs, backend, plan.runs),
            )
            self._invocation = cursor.lastrowid

    def todo(
        self, keys: Iterable[tuple[str, str]], numerics: bool, retry_failed: bool
    ) -> dict[tuple[str, str], int]:
        """The keys (config hash, workload) not finished -> their row's ``attempts`` (0: none).

        Finished: ok rows (that ran with numerics, if numerics are asked for now) and, unless
        ``retry_failed``, failed rows.
        """
        with database_errors(self.path):
            rows = self.conn.execute(
                "SELECT config_hash, workload, status, numerics, attempts FROM runs"
            ).fetchall()
        found = {(h, w): (status, had, attempts) for h, w, status, had, attempts in rows}
        left = {}
        for key in keys:
            if key not in found:
                left[key] = 0
                continue
            status, had_numerics, attempts = found[key]
            finished = status == "ok" and (had_numerics or not numerics)
            if not (finished or (status == "failed" and not retry_failed)):
                left[key] = int(attempts)
        return left

    def attempts(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, str]]:
        """(attempts, status) of the keys that have a row."""
        wanted = set(keys)
        with database_errors(self.path):
            rows = self.conn.execute("SELECT config_hash, workload, attempts, status FROM runs")
            return {(h, w): (int(a), s) for h, w, a, s in rows if (h, w) in wanted}

    def record(
        self,
        result: Mapping[str, Any],
        params: Mapping[str, Any],
        *,
        seen_attempts: int = 0,
        runner: str | None = None,
    ) -> bool:
        """Write a finished run in its own transaction (a rerun overwrites it, attempts + 1) and
        release ``runner``'s lease on it; False, writing nothing, if another runner recorded it
        since this one saw ``seen_attempts``."""
        row: dict[str, Any] = {
            "config_hash": result["config_hash"],
            "workload": result["workload"],
            **{name: result.get(name) for name in RUN_COLUMNS if name != "attempts"},
            **{name: params.get(name) for name in self._params},
            **{name: result.get("metrics", {}).get(name) for name in self._metrics},
        }
        row["finished_at"] = _now()
        row["sweep"] = self._sweep
        row["runner"] = runner
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
        key = (row["config_hash"], row["workload"])
        with database_errors(self.path), immediate(self.conn):
            found = self.conn.execute(
                "SELECT attempts FROM runs WHERE config_hash = ? AND workload = ?", key
            ).fetchone()
            if (found[0] if found else 0) != seen_attempts:
                return False
            self.conn.execute(sql, [_sqlite_value(row[n]) for n in names])
            self.conn.execute(
                "UPDATE claims SET claimed_by = NULL, lease_until = NULL "
                "WHERE config_hash = ? AND workload = ? AND claimed_by = ?",
                (*key, runner),
            )
        return True

    def finish(self, ok: int, failed: int, outcome: str) -> None:
        """Close this invocation's row ('completed', 'interrupted', 'error: ...')."""
        if self._invocation is None:
            return
        with database_errors(self.path), immediate(self.conn):
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
    return strict_json.dumps(value, default=str)


# ---- reading -----------------------------------------------------------------------------------


def read_rows(
    db: str | Path, *, status: str | None = None, sweep: str | None = None
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(rows as dicts, parameter columns, metric columns) of a results database.

    Rows have every column of ``RUN_COLUMNS`` (None where an older database lacks one).
    """
    with closing(open_database(db, write=False)) as conn, database_errors(db):
        roles = conn.execute("SELECT name, role FROM columns ORDER BY rowid").fetchall()
        params = [name for name, role in roles if role == "parameter"]
        metrics = [name for name, role in roles if role == "metric"]
        order = ["workload", *params, *metrics, *run_columns(conn), "config_hash"]
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
        blank = dict.fromkeys(RUN_COLUMNS)
        rows = [blank | dict(zip(order, values, strict=True)) for values in cursor]
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
    with output_file(output, "wb") as file:
        frame.to_parquet(file, index=False)
    return output


def _write_csv(output: Path, columns: list[str], rows: Iterable[Mapping[str, Any]]) -> None:
    with output_file(output, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow([csv_cell(name) for name in columns])
        writer.writerows([csv_cell(row.get(name)) for name in columns] for row in rows)

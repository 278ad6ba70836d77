"""Fuzz results in SQLite, one row per (seed, case index, config), written as each case ends.

An interrupted ``hwsim fuzz`` run resumes: cases already in the database are not run again. The
file is data: a database that is not a fuzz store of this hwsim is refused in one line, and the
specs read back are checked (``hwsim.fuzz.spec.check_spec``) before anything uses them.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from hwsim.fuzz.spec import FuzzError

SCHEMA = "hwsim.fuzz/1"


def _checked(kind: str, text: str | None) -> dict[str, Any] | None:
    from hwsim.fuzz.kinds import load_kind

    return load_kind(kind).check_spec(json.loads(text)) if text else None


class FuzzStore:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        where = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(where, timeout=30)
            self._init()
        except sqlite3.DatabaseError as exc:
            raise FuzzError(f"{where}: not a fuzz database ({exc})") from None

    def _init(self) -> None:
        with self.db:
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master")}
            if tables and "fuzz_meta" not in tables:
                raise FuzzError(f"{self.path}: an SQLite file, but not a fuzz database of hwsim")
            self.db.execute("CREATE TABLE IF NOT EXISTS fuzz_meta (key TEXT PRIMARY KEY, value)")
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS cases (seed INTEGER, idx INTEGER, config TEXT, "
                "kind TEXT, spec TEXT, status TEXT, failures TEXT, shrunk TEXT, wall_s REAL, "
                "cpu_s REAL, created REAL, "
                "PRIMARY KEY (seed, idx, config))"
            )
            row = self.db.execute("SELECT value FROM fuzz_meta WHERE key='schema'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO fuzz_meta VALUES ('schema', ?)", (SCHEMA,))
            elif row[0] != SCHEMA:
                raise FuzzError(f"{self.path}: a fuzz database of another hwsim ({row[0]!r})")

    def done(self, seed: int, config: str) -> set[int]:
        rows = self.db.execute("SELECT idx FROM cases WHERE seed=? AND config=?", (seed, config))
        return {int(r[0]) for r in rows}

    def put(self, seed: int, config: str, result: dict[str, Any]) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO cases VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    seed,
                    result["index"],
                    config,
                    result["kind"],
                    json.dumps(result["spec"]),
                    result["status"],
                    json.dumps(result["failures"]),
                    json.dumps(result["shrunk"]) if result.get("shrunk") else None,
                    result["wall_s"],
                    result.get("cpu_s", 0.0),
                    time.time(),
                ),
            )

    def results(self, seed: int, config: str, below: int) -> list[dict[str, Any]]:
        """The cases 0..below-1 of a seed already run, in index order (specs checked)."""
        rows = self.db.execute(
            "SELECT idx, kind, spec, status, failures, shrunk, wall_s, cpu_s FROM cases "
            "WHERE seed=? AND config=? AND idx < ? ORDER BY idx",
            (seed, config, below),
        )
        out = []
        for idx, kind, spec, status, failures, shrunk, wall_s, cpu_s in rows:
            try:
                out.append(
                    {
                        "index": int(idx),
                        "kind": kind,
                        "spec": _checked(kind, spec),
                        "status": status,
                        "failures": json.loads(failures),
                        "shrunk": _checked(kind, shrunk),
                        "wall_s": float(wall_s or 0.0),
                        "cpu_s": float(cpu_s or 0.0),
                    }
                )
            except (ValueError, TypeError, FuzzError) as exc:
                raise FuzzError(f"{self.path}: case {idx} is damaged ({exc}); delete it") from None
        return out

    def close(self) -> None:
        self.db.close()

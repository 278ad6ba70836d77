"""Fuzz results in SQLite, one row per (seed, case index, config), written as each case ends.

An interrupted ``hwsim fuzz`` run resumes: cases already in the database are not run again. The
file is data: a database that is not a fuzz store of this hwsim is refused in one line, and the
specs read back are checked (``hwsim.fuzz.spec.check_spec``) before anything uses them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from hwsim.fuzz.spec import FuzzError
from hwsim.sqlite_store import SqliteStore


def _checked(kind: str, text: str | None) -> dict[str, Any] | None:
    from hwsim.fuzz.kinds import load_kind

    return load_kind(kind).check_spec(json.loads(text)) if text else None


class FuzzStore(SqliteStore):
    """Open (or create) a results file; ``None`` keeps results in memory only."""

    WHAT = "a fuzz"
    META_TABLE = "fuzz_meta"
    SCHEMA = "hwsim.fuzz/1"
    TABLES = (
        "CREATE TABLE IF NOT EXISTS cases (seed INTEGER, idx INTEGER, config TEXT, "
        "kind TEXT, spec TEXT, status TEXT, failures TEXT, shrunk TEXT, wall_s REAL, "
        "cpu_s REAL, created REAL, PRIMARY KEY (seed, idx, config))",
    )
    ERROR = FuzzError

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

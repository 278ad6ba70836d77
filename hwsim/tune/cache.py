"""The tuner's results, in SQLite: one row per (kernel, space point, config hash).

A candidate simulated once is never simulated again for the same kernel source, inputs and
effective config, in this run or a later one (an interrupted ``hwsim tune`` resumes where it
stopped). Rows are written as each candidate finishes. The file is data: a database that is not
a tuner cache of this hwsim is refused in one line, and nothing in one is ever evaluated.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from hwsim.sqlite_store import SqliteStore
from hwsim.tune.space import TuneError


@dataclass(frozen=True)
class Outcome:
    """What simulating one candidate gave: ``ok`` with its time, or ``infeasible`` (the kernel
    refused the point: it does not fit, an illegal instruction) with the reason."""

    status: str  # "ok" | "infeasible"
    total_ns: float | None = None
    bottleneck: str = ""
    error: str = ""
    wall_s: float = 0.0
    instructions: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class TuneCache(SqliteStore):
    """Open (or create) a cache file; ``None`` keeps results in memory only."""

    WHAT = "a tuner cache"
    META_TABLE = "tune_meta"
    SCHEMA = "hwsim.tune/1"
    TABLES = (
        "CREATE TABLE IF NOT EXISTS candidates (kernel TEXT, point TEXT, "
        "config_hash TEXT, status TEXT, total_ns REAL, bottleneck TEXT, error TEXT, "
        "wall_s REAL, instructions INTEGER, created REAL, "
        "PRIMARY KEY (kernel, point, config_hash))",
    )
    ERROR = TuneError

    def get(self, kernel: str, point: str, config_hash: str) -> Outcome | None:
        row = self.db.execute(
            "SELECT status, total_ns, bottleneck, error, wall_s, instructions FROM candidates "
            "WHERE kernel=? AND point=? AND config_hash=?",
            (kernel, point, config_hash),
        ).fetchone()
        if row is None:
            return None
        status, total_ns, bottleneck, error, wall_s, instructions = row
        if status not in ("ok", "infeasible") or (status == "ok" and total_ns is None):
            raise TuneError(f"{self.path}: a damaged candidate row ({kernel} {point}); delete it")
        return Outcome(
            status, total_ns, bottleneck or "", error or "", wall_s or 0.0, int(instructions or 0)
        )

    def put(self, kernel: str, point: str, config_hash: str, outcome: Outcome) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO candidates VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    kernel,
                    point,
                    config_hash,
                    outcome.status,
                    outcome.total_ns,
                    outcome.bottleneck,
                    outcome.error,
                    outcome.wall_s,
                    outcome.instructions,
                    time.time(),
                ),
            )

    def rows(self, kernel: str, config_hash: str) -> list[dict[str, Any]]:
        """Every cached candidate of a kernel on a config, oldest first."""
        cursor = self.db.execute(
            "SELECT point, status, total_ns, bottleneck, error FROM candidates "
            "WHERE kernel=? AND config_hash=? ORDER BY created",
            (kernel, config_hash),
        )
        return [
            {"point": json.loads(p), "status": s, "total_ns": t, "bottleneck": b, "error": e}
            for p, s, t, b, e in cursor
        ]


def outcome_dict(outcome: Outcome) -> dict[str, Any]:
    return asdict(outcome)

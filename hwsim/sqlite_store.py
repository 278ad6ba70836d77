"""Opening the small SQLite files hwsim keeps for itself (the tuner's cache, the fuzzer's results).

Such a file is data a user names on the command line, so it is checked before anything trusts it:
a path that exists but is not a regular file (a FIFO, whose reading would wait for a writer
forever; a device; a folder) is refused before it is opened; an SQLite file of something else, or
of another version of the store, is refused in one line naming the file; and the store's tables
are created on first use. ``None`` keeps the store in memory.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

#: Seconds a writer waits for another process's transaction (several processes may share a file).
BUSY_TIMEOUT_S = 30


class SqliteStore:
    """A store file of one kind, which a subclass declares: ``WHAT`` names it in messages ('a
    tuner cache'), ``META_TABLE`` holds its ``SCHEMA`` under the key 'schema', ``TABLES`` are
    its CREATE TABLE IF NOT EXISTS statements, problems raise ``ERROR``. Opening it (``path``;
    ``None`` keeps it in memory) creates the file and its tables if missing."""

    WHAT: ClassVar[str]
    META_TABLE: ClassVar[str]
    SCHEMA: ClassVar[str]
    TABLES: ClassVar[Sequence[str]]
    ERROR: ClassVar[type[Exception]]

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        where = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            if self.path.exists() and not self.path.is_file():
                raise self.ERROR(
                    f"{where}: not {self.WHAT} database (not a regular file); give a file path"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(where, timeout=BUSY_TIMEOUT_S)
            self._init(where)
        except sqlite3.DatabaseError as exc:
            raise self.ERROR(f"{where}: not {self.WHAT} database ({exc})") from None

    def close(self) -> None:
        self.db.close()

    def _init(self, where: str) -> None:
        meta, error = self.META_TABLE, self.ERROR
        with self.db as db:
            found = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if found and meta not in found:
                raise error(f"{where}: an SQLite file, but not {self.WHAT} database of hwsim")
            db.execute(f"CREATE TABLE IF NOT EXISTS {meta} (key TEXT PRIMARY KEY, value)")
            for statement in self.TABLES:
                db.execute(statement)
            row = db.execute(f"SELECT value FROM {meta} WHERE key='schema'").fetchone()
            if row is None:
                db.execute(f"INSERT INTO {meta} VALUES ('schema', ?)", (self.SCHEMA,))
            elif row[0] != self.SCHEMA:
                raise error(
                    f"{where}: {self.WHAT} database of another hwsim (schema "
                    f"{str(row[0])[:40]!r}, this one reads {self.SCHEMA!r}); use a new file"
                )

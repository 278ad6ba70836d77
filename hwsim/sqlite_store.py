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

#: Seconds a writer waits for another process's transaction (several processes may share a file).
BUSY_TIMEOUT_S = 30


def open_store(
    path: Path | None,
    *,
    what: str,
    meta_table: str,
    schema: str,
    tables: Sequence[str],
    error: type[Exception],
) -> sqlite3.Connection:
    """An open connection to the store at ``path`` (created if missing), whose ``meta_table``
    holds ``schema`` under the key 'schema' and whose ``tables`` (CREATE TABLE IF NOT EXISTS
    statements) exist. ``what`` names the store in messages ('a tuner cache'); problems raise
    ``error``."""
    where = ":memory:" if path is None else str(path)
    if path is not None:
        if path.exists() and not path.is_file():
            raise error(f"{where}: not {what} database (not a regular file); give a file path")
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(where, timeout=BUSY_TIMEOUT_S)
        _init(db, where, what, meta_table, schema, tables, error)
    except sqlite3.DatabaseError as exc:
        raise error(f"{where}: not {what} database ({exc})") from None
    return db


def _init(
    db: sqlite3.Connection,
    where: str,
    what: str,
    meta_table: str,
    schema: str,
    tables: Sequence[str],
    error: type[Exception],
) -> None:
    with db:
        found = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if found and meta_table not in found:
            raise error(f"{where}: an SQLite file, but not {what} database of hwsim")
        db.execute(f"CREATE TABLE IF NOT EXISTS {meta_table} (key TEXT PRIMARY KEY, value)")
        for statement in tables:
            db.execute(statement)
        row = db.execute(f"SELECT value FROM {meta_table} WHERE key='schema'").fetchone()
        if row is None:
            db.execute(f"INSERT INTO {meta_table} VALUES ('schema', ?)", (schema,))
        elif row[0] != schema:
            raise error(
                f"{where}: {what} database of another hwsim (schema {str(row[0])[:40]!r}, this "
                f"one reads {schema!r}); use a new file"
            )

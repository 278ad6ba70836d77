"""Opening a sweep database: its schema and version, recognising ours, refusing anything else.

A sweep database is untrusted data: hwsim reads it only as SQLite values (nothing in it is ever
unpickled or evaluated) and checks what it is before writing a byte to it. Ours carries
``PRAGMA application_id`` = ``APPLICATION_ID`` and ``PRAGMA user_version`` = its schema version.
Version 1 (before leases) set neither and is recognised by its tables; a writer upgrades it in
place, readers read it as it is. Random bytes, a truncated file, a database of another schema or
program, or one written by a newer hwsim is refused with one line (``SweepError``).

Connections are in autocommit mode; writes go in explicit ``BEGIN IMMEDIATE`` transactions
(``immediate``), which take the write lock up front, so concurrent runners queue (for up to
``BUSY_TIMEOUT_S``) instead of failing half way. The file is in WAL mode: readers never block.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path

from hwsim.errors import shorten
from hwsim.output_paths import shown
from hwsim.run_marker import kind_of_mode
from hwsim.sweep.errors import SweepError

#: "HWSW": marks an SQLite file as an hwsim sweep database.
APPLICATION_ID = 0x48575357
#: 1: runs, columns, configs, invocations. 2: + claims (leases), runs.runner.
SCHEMA_VERSION = 2
#: How long a statement waits for another process's write lock before failing.
BUSY_TIMEOUT_S = 30.0
#: Backoff between tries of a statement SQLite fails at once rather than waiting (``_use_wal``).
_FIRST_RETRY_PAUSE_S = 0.001
_LAST_RETRY_PAUSE_S = 0.05
_SQLITE_HEADER = b"SQLite format 3\x00"
_V1_TABLES = frozenset({"runs", "columns", "configs", "invocations"})
#: Every table hwsim creates (``sqlite_sequence`` is SQLite's, for AUTOINCREMENT); their primary
#: keys come with SQLite's own ``sqlite_autoindex_<table>_<n>`` indexes. Any other object (a view,
#: a trigger, an index, another table) was not made by hwsim, and the file is refused.
_OUR_TABLES = _V1_TABLES | {"claims", "sqlite_sequence"}

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
    "runner": "TEXT",
    "finished_at": "TEXT",
    "trace_dir": "TEXT",
    "traceback": "TEXT",
}
_CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    config_hash TEXT NOT NULL,
    workload TEXT NOT NULL,
    claimed_by TEXT,
    lease_until REAL,
    heartbeat_at REAL,
    PRIMARY KEY (config_hash, workload)
);
"""
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
{_CLAIMS}"""


def open_database(path: str | Path, *, write: bool) -> sqlite3.Connection:
    """A connection to the sweep database at ``path``, checked to be ours.

    ``write``: create it (and its folder) if missing, upgrade an older schema, WAL mode. Without
    it nothing is written, and a missing or empty file is an error.
    """
    path = Path(path)
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a name over NAME_MAX, a path over PATH_MAX, ...
        raise SweepError(f"{shown(path)}: cannot be a results database ({exc.strerror})") from None
    if is_dir:
        raise SweepError(f"{path} is not an hwsim sweep database: it is a folder")
    if exists and not path.is_file():  # reading a FIFO would wait for a writer forever
        kind = kind_of_mode(path.stat().st_mode)
        raise SweepError(f"{path} is not an hwsim sweep database: it is a {kind}")
    if not exists:
        if not write:
            raise SweepError(f"{path}: no such results database")
        _create(path)
    _check_header(path)
    with database_errors(path):
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            version = _identify(conn, path)
            if version is None and not write:
                raise SweepError(f"{path} is not an hwsim sweep database: it has no tables")
            if version is not None:
                _quick_check(conn, path)
                check_stored_configs(conn, path)
            if write:
                _use_wal(conn)
                # NORMAL: a commit survives the process being killed (it is in the WAL); only a
                # power cut can roll back the last commits, and the file stays consistent.
                conn.execute("PRAGMA synchronous=NORMAL")
                if version != SCHEMA_VERSION:
                    with immediate(conn):  # again under the lock: another runner may be at it
                        _create_or_upgrade(conn, _identify(conn, path))
        except BaseException:
            conn.close()
            raise
    return conn


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode, waiting out other runners that switch it at the same time.

    The switch needs the file to itself. When two connections switch a file that is not yet in WAL
    mode at once (an empty file both found, e.g. one made by a reader's ``sqlite3.connect``),
    SQLite fails one of them at once with "database is locked" instead of calling its busy
    handler, since each waits on the other. So the switch is retried here, with backoff, for up
    to ``BUSY_TIMEOUT_S``; once another runner has switched it, it is WAL and nothing is left.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause_s = _FIRST_RETRY_PAUSE_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause_s > deadline:
                raise
        time.sleep(pause_s)
        pause_s = min(2 * pause_s, _LAST_RETRY_PAUSE_S)


def _is_busy(exc: sqlite3.Error) -> bool:
    """Whether an SQLite error says another connection holds the lock it needed."""
    text = str(exc)
    return "locked" in text or "busy" in text


def _create(path: Path) -> None:
    """A new database at ``path``, made whole under a temporary name and linked into place, so
    no runner ever opens a half-made one (when several make it at once, the first link wins)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with database_errors(temporary), closing(sqlite3.connect(temporary)) as conn:
            conn.isolation_level = None
            conn.execute("PRAGMA journal_mode=WAL")
            with immediate(conn):
                _create_or_upgrade(conn, None)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another runner made it first: theirs is used
        except OSError:  # a filesystem without hard links
            if not path.exists():
                os.replace(temporary, path)
    except OSError as exc:
        raise SweepError(f"cannot create {path}: {exc.strerror}") from None
    finally:
        for leftover in (temporary, Path(f"{temporary}-wal"), Path(f"{temporary}-shm")):
            with suppress(OSError):
                leftover.unlink()


@contextmanager
def database_errors(path: str | Path) -> Iterator[None]:
    """SQLite errors inside the block become one-line ``SweepError``s naming ``path``."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise SweepError(describe(path, exc)) from None


def describe(path: str | Path, exc: sqlite3.DatabaseError) -> str:
    """What an SQLite error on the database at ``path`` means, in one line."""
    text = str(exc)
    if _is_busy(exc):
        return (
            f"{path}: the database stayed locked for {BUSY_TIMEOUT_S:.0f} s (another process "
            f"holds it); try again ({text})"
        )
    if "unable to open" in text:
        return f"cannot open {path}: {text} (is its folder writable?)"
    if "readonly" in text:
        return f"{path} is read-only: a sweep writes its results into it ({text})"
    return f"{path} is not an hwsim sweep database: {text}"


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction that holds the write lock from its start (``BEGIN IMMEDIATE``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise SweepError(f"cannot read {path}: {exc.strerror}") from None
    if head and head != _SQLITE_HEADER:
        raise SweepError(f"{path} is not an hwsim sweep database: it is not an SQLite file")


def _identify(conn: sqlite3.Connection, path: Path) -> int | None:
    """The schema version of our database, None for an empty one; refuses anything else,
    including one of ours to which objects hwsim never creates were added (a trigger on
    ``runs`` could delete every result as it is written)."""
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    objects = conn.execute("SELECT type, name, tbl_name FROM sqlite_master").fetchall()
    tables = {name for kind, name, _ in objects if kind == "table"}
    foreign = [f"{kind} {name!r}" for kind, name, table in objects if not _ours(kind, name, table)]
    if foreign and (application_id == APPLICATION_ID or tables & _V1_TABLES):
        raise SweepError(
            f"{path} is not an hwsim sweep database as hwsim made it: it has "
            f"{_listed(foreign)}, which hwsim does not create; use another --db"
        )
    if application_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise SweepError(
                f"{path} was written by a newer hwsim (sweep database version {version}; this "
                f"hwsim reads versions up to {SCHEMA_VERSION}): upgrade hwsim or use another --db"
            )
        return int(version)
    if application_id != 0:
        raise SweepError(
            f"{path} is not an hwsim sweep database: its application id {application_id:#x} "
            "is another program's"
        )
    tables.discard("sqlite_sequence")
    if not objects:
        return None
    if tables >= _V1_TABLES and {"config_hash", "workload", "status"} <= _columns(conn, "runs"):
        return 1
    if not tables:
        raise SweepError(
            f"{path} is not an hwsim sweep database: it holds no tables but {_listed(foreign)}"
        )
    raise SweepError(f"{path} is not an hwsim sweep database: its tables are {_listed(tables)}")


def _ours(kind: str, name: str, table: str) -> bool:
    if kind == "table":
        return name in _OUR_TABLES
    return (
        kind == "index" and table in _OUR_TABLES and name.startswith(f"sqlite_autoindex_{table}_")
    )


def _listed(names: Iterable[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:5]) + (", ..." if len(ordered) > 5 else "")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """A damaged or truncated file shows here, not half way through a sweep or an export."""
    verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    if verdict != "ok":
        raise SweepError(f"{path} is not an hwsim sweep database: it is damaged ({verdict})")


def _create_or_upgrade(conn: sqlite3.Connection, version: int | None) -> None:
    if version == SCHEMA_VERSION:
        return
    if version is None:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
    else:  # version 1: the claims table and the runner of each result are new
        conn.execute(_CLAIMS)
        if "runner" not in _columns(conn, "runs"):
            conn.execute("ALTER TABLE runs ADD COLUMN runner TEXT")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def check_stored_configs(conn: sqlite3.Connection, path: str | Path) -> None:
    """Every stored config must hash to its key, as ``config_hash`` computes it: a row edited or
    damaged inside an intact file (flipped bytes) is refused rather than trusted, since a
    result's config is known only through it."""
    for key, text in conn.execute("SELECT config_hash, config_json FROM configs"):
        if isinstance(text, str) and _digest(text) == key:
            continue  # stored in canonical form (as hwsim writes it since it checks this)
        try:
            canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            canonical = None
        if canonical is None or _digest(canonical) != key:
            raise SweepError(
                f"{path} is damaged or was edited: the stored config of {shorten(str(key))} "
                "does not hash to its key; use another --db (a copy made before the damage "
                "still reads)"
            )


def _digest(text: str) -> str:
    """``config_hash`` of a config from its canonical JSON."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_columns(conn: sqlite3.Connection) -> list[str]:
    """The fixed columns of ``runs`` this database has (a version-1 file lacks ``runner``)."""
    have = _columns(conn, "runs")
    return [name for name in RUN_COLUMNS if name in have]

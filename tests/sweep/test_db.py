"""A sweep database that is not ours, is damaged or is newer is refused in one line (exit 2) by
``hwsim sweep``, ``sweep plot`` and ``sweep export``, and never written to; an older one of ours
is upgraded in place."""

from __future__ import annotations

import ast
import importlib
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hwsim.sweep import db, load_results, load_sweep, run_sweep
from hwsim.sweep.db import APPLICATION_ID, SCHEMA_VERSION, open_database
from hwsim.sweep.errors import SweepError
from tests.sweep.helpers import write_spec

cli = importlib.import_module("hwsim.cli.main")
SWEEP_DIR = Path(__file__).resolve().parents[2] / "hwsim" / "sweep"
#: Rounds of three processes creating one new database at the same moment.
CREATION_ROUNDS = 20


def _random_bytes(db: Path, good: Path) -> None:
    db.write_bytes(os.urandom(20_000))


def _truncated(db: Path, good: Path) -> None:
    db.write_bytes(good.read_bytes()[: good.stat().st_size // 2])


def _someone_elses(db: Path, good: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
        conn.execute("INSERT INTO photos (path) VALUES ('holiday.jpg')")
    conn.close()


def _another_programs(db: Path, good: Path) -> None:
    _someone_elses(db, good)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()


def _newer(db: Path, good: Path) -> None:
    db.write_bytes(good.read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()


BAD = {
    "random bytes": (_random_bytes, "is not an hwsim sweep database: it is not an SQLite file"),
    "truncated": (_truncated, "is not an hwsim sweep database: database disk image is malformed"),
    "another schema": (_someone_elses, "is not an hwsim sweep database: its tables are photos"),
    "another program": (
        _another_programs,
        "is not an hwsim sweep database: its application id 0x4d2",
    ),
    "newer": (_newer, f"was written by a newer hwsim (sweep database version {SCHEMA_VERSION + 1}"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(spec, a finished results database of it)."""
    directory = tmp_path_factory.mktemp("good")
    spec = write_spec(directory)
    db = directory / "good.sqlite"
    run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    return spec, db


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_database_is_one_line_and_exit_2_everywhere(
    case: str,
    good: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec, good_db = good
    make, message = BAD[case]
    db = tmp_path / "bad.sqlite"
    make(db, good_db)
    before = db.read_bytes()
    plot = [
        "--kind",
        "line",
        "--x",
        "dma.engines",
        "--metric",
        "total_ns",
        "-o",
        str(tmp_path / "p.png"),
    ]
    for argv in (
        ["sweep", str(spec), "--db", str(db), "-j", "1", "-q"],
        ["sweep", "plot", str(db), *plot],
        ["sweep", "export", str(db), "-o", str(tmp_path / "r.csv")],
    ):
        capsys.readouterr()
        assert cli.main(argv) == 2, argv
        out = capsys.readouterr()
        lines = out.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"hwsim: error: {db} {message}"), lines
        assert "Traceback" not in out.err
    assert db.read_bytes() == before  # not converted, not upgraded, not extended
    assert not (tmp_path / "r.csv").exists() and not (tmp_path / "p.png").exists()


def test_a_folder_or_an_empty_file_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is not an hwsim sweep database: it is a folder"):
        load_results(tmp_path)
    (tmp_path / "empty.sqlite").touch()
    with pytest.raises(Exception, match="is not an hwsim sweep database: it has no tables"):
        load_results(tmp_path / "empty.sqlite")


def test_a_version_1_database_is_read_as_it_is_and_upgraded_by_a_sweep(
    good: tuple[Path, Path], tmp_path: Path
) -> None:
    """Version 1 had no claims table, no runner column and no application id or version."""
    spec, good_db = good
    db = tmp_path / "v1.sqlite"
    db.write_bytes(good_db.read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE claims")
        conn.execute("ALTER TABLE runs DROP COLUMN runner")
        conn.execute("PRAGMA application_id = 0")
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    before = db.read_bytes()
    rows = load_results(db)
    assert len(rows) == 4 and rows["runner"].isna().all()
    assert db.read_bytes() == before  # a reader does not upgrade
    outcome = run_sweep(load_sweep(spec), db, jobs=1, progress=False)
    assert (outcome.skipped, outcome.ran) == (4, 0)  # its finished rows still count
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT count(*) FROM claims").fetchone() == (0,)
    conn.close()


def _calls_and_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.add(node.func.id)
    return names


@pytest.mark.parametrize("module", sorted(p.name for p in SWEEP_DIR.glob("*.py")))
def test_nothing_read_from_a_database_is_unpickled_or_evaluated(module: str) -> None:
    used = _calls_and_imports((SWEEP_DIR / module).read_text())
    assert not used & {"pickle", "marshal", "shelve", "dill", "cloudpickle", "eval", "exec"}


def test_the_checks_above_would_see_an_unpickling() -> None:
    check: Callable[[str], set[str]] = _calls_and_imports
    assert "pickle" in check("import pickle\npickle.loads(b'')") and "eval" in check("eval('1')")


def _open_at_once(path: str, barrier: Any, results: Any) -> None:
    from hwsim.sweep.store import ResultStore

    barrier.wait()
    try:
        ResultStore(path).close()
        results.put("ok")
    except Exception as exc:  # reported to the test, which names it
        results.put(f"{type(exc).__name__}: {exc}")


def test_runners_creating_one_database_at_once_all_open_it(tmp_path: Path) -> None:
    """Made whole under a temporary name and linked into place: no runner sees a half-made
    database (switching a new file to WAL in place made a racing runner fail as 'locked')."""
    context = multiprocessing.get_context("fork")
    for round_ in range(CREATION_ROUNDS):
        path = str(tmp_path / f"r{round_}.sqlite")
        barrier, results = context.Barrier(3), context.Queue()
        workers = [
            context.Process(target=_open_at_once, args=(path, barrier, results)) for _ in range(3)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert [results.get(timeout=5) for _ in workers] == ["ok"] * 3
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


#: Rounds of two runners switching one empty file to WAL at once; before ``_use_wal`` retried,
#: about 4 rounds in 100 failed one of them at once with "database is locked".
EMPTY_FILE_ROUNDS = 200


def test_runners_opening_one_empty_file_at_once_all_open_it(tmp_path: Path) -> None:
    """An empty file (here: made by a reader's ``sqlite3.connect`` before any runner) is
    switched to WAL in place, and SQLite fails one of two runners doing that at once without
    waiting: the switch is retried, so both open it and the schema is made once."""
    failures: list[str] = []

    def open_after(barrier: threading.Barrier, path: Path) -> None:
        barrier.wait()
        try:
            open_database(path, write=True).close()
        except Exception as exc:  # collected: the test names it
            failures.append(f"{type(exc).__name__}: {exc}")

    for round_ in range(EMPTY_FILE_ROUNDS):
        path = tmp_path / f"r{round_}.sqlite"
        sqlite3.connect(path).close()  # an empty file, as a careless reader leaves one
        barrier = threading.Barrier(2)
        runners = [threading.Thread(target=open_after, args=(barrier, path)) for _ in range(2)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        assert not failures, f"round {round_}: {failures}"
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_switch_to_wal_locked_for_the_whole_busy_timeout_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry is bounded: a file another connection keeps locked is refused with the lock
    named, after ``BUSY_TIMEOUT_S`` (shortened here), not waited on forever."""
    path = tmp_path / "r.sqlite"
    sqlite3.connect(path).close()
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # rollback mode: others may read, none may switch it
    try:
        started = time.monotonic()
        with pytest.raises(SweepError, match="stayed locked"):
            open_database(path, write=True)
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    open_database(path, write=True).close()  # free again: it opens

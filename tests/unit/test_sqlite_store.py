"""hwsim's own SQLite stores (tuner cache, fuzz results) refuse what is not theirs, in one line."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hwsim.fuzz.spec import FuzzError
from hwsim.fuzz.store import FuzzStore
from hwsim.tune.cache import TuneCache
from hwsim.tune.space import TuneError

STORES = [(TuneCache, TuneError, "a tuner cache"), (FuzzStore, FuzzError, "a fuzz")]


@contextmanager
def _no_longer_than(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: opening a FIFO for reading blocks until a writer comes."""

    def _expired(*_: object) -> None:
        raise AssertionError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("store", "error", "what"), STORES)
def test_a_fifo_is_refused_before_it_is_opened(
    tmp_path: Path, store: type, error: type[Exception], what: str
) -> None:
    fifo = tmp_path / "results.sqlite"
    os.mkfifo(fifo)
    with _no_longer_than(10), pytest.raises(error, match=f"not {what} database.*regular file"):
        store(fifo)


@pytest.mark.parametrize(("store", "error", "what"), STORES)
def test_another_programs_sqlite_file_is_refused(
    tmp_path: Path, store: type, error: type[Exception], what: str
) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE accounts (name TEXT)")
    with pytest.raises(error, match=f"not {what} database of hwsim"):
        store(path)
    with sqlite3.connect(path) as db:  # and left as it was
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert tables == {"accounts"}


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    TuneCache(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tune_meta SET value='hwsim.tune/0' WHERE key='schema'")
    with pytest.raises(TuneError, match=r"another hwsim .*'hwsim\.tune/0'"):
        TuneCache(path)


def test_a_store_reopens_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "fuzz.sqlite"
    FuzzStore(path).close()
    store = FuzzStore(path)
    assert store.done(0, "trn2") == set()
    store.close()

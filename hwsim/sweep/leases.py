"""Leases on the runs of a sweep database, so runners sharing one database split the work.

Every ``hwsim sweep`` process is a *runner*, named ``host:pid:uuid``. Before it hands a run to a
worker it claims the run's row in ``claims`` with one ``UPDATE`` in a ``BEGIN IMMEDIATE``
transaction; the update takes the row only if no live runner holds it (unclaimed, this runner's,
or a lease that ended) and nobody recorded a result for it since this runner looked
(``runs.attempts`` as this runner saw it). A heartbeat thread pushes this runner's leases
``lease_s`` ahead every third of that, so a runner that dies (or freezes) loses them after at
most ``lease_s``; a runner on the same host whose process is gone loses them at once. Leases are
released when a result is recorded (``ResultStore.record``) and when the runner stops.

A result is recorded only if nobody recorded one since the claim, so even a runner whose lease
lapsed while it was frozen never writes a run twice: the first result wins (runs are
deterministic, so it is the same result).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from hwsim.sweep.db import BUSY_TIMEOUT_S, immediate

#: Seconds a runner's claim lasts without a heartbeat (a dead runner's runs wait this long).
DEFAULT_LEASE_S = 60.0
#: Heartbeats per lease: a runner renews its leases this many times before they would end.
BEATS_PER_LEASE = 3


def runner_id() -> str:
    """``host:pid:uuid`` of a new runner in this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class Leases:
    """This runner's claims on one database: ``claim``, a heartbeat thread, release on exit.

    ``claim`` may be called from any thread (joblib dispatches from its callback threads): the
    connection is shared under a lock.
    """

    def __init__(self, path: str | Path, lease_s: float = DEFAULT_LEASE_S) -> None:
        if not lease_s > 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        self.me = runner_id()
        self.lease_s = lease_s
        self._conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        # as the store's connection: no fsync per claim or heartbeat (a runner frozen inside an
        # fsync would hold the write lock from every other runner meanwhile)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="hwsim-sweep-lease", daemon=True)

    def __enter__(self) -> Leases:
        self.reap()
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join()
        try:  # best effort: leases not released here end on their own within lease_s
            with self._lock, immediate(self._conn):
                self._conn.execute(
                    "UPDATE claims SET claimed_by = NULL, lease_until = NULL WHERE claimed_by = ?",
                    (self.me,),
                )
        except sqlite3.Error:
            pass
        finally:
            self._conn.close()

    @property
    def poll_s(self) -> float:
        """How often a runner waiting on other runners' leases looks again."""
        return min(1.0, self.lease_s / 4)

    def claim(self, key: tuple[str, str], seen_attempts: int) -> bool:
        """Take the run ``key`` (config hash, workload) if no live runner holds it and its row
        still has the attempts this runner saw (0: no row); True if it is now this runner's."""
        now = time.time()
        config_hash, workload = key
        with self._lock, immediate(self._conn):
            self._conn.execute(
                "INSERT OR IGNORE INTO claims (config_hash, workload) VALUES (?, ?)", key
            )
            cursor = self._conn.execute(
                "UPDATE claims SET claimed_by = :me, lease_until = :until, heartbeat_at = :now "
                "WHERE config_hash = :hash AND workload = :workload "
                "AND (claimed_by IS NULL OR claimed_by = :me OR lease_until < :now) "
                "AND COALESCE((SELECT attempts FROM runs WHERE runs.config_hash = :hash "
                "AND runs.workload = :workload), 0) = :seen",
                {
                    "me": self.me,
                    "until": now + self.lease_s,
                    "now": now,
                    "hash": config_hash,
                    "workload": workload,
                    "seen": seen_attempts,
                },
            )
            return cursor.rowcount == 1

    def reap(self) -> int:
        """Release the leases of runners on this host whose process is gone; how many runners."""
        host = socket.gethostname()
        with self._lock:
            holders = [
                row[0]
                for row in self._conn.execute(
                    "SELECT DISTINCT claimed_by FROM claims WHERE claimed_by IS NOT NULL "
                    "AND claimed_by != ?",
                    (self.me,),
                )
            ]
            dead = [holder for holder in holders if _dead_here(holder, host)]
            if dead:
                with immediate(self._conn):
                    self._conn.executemany(
                        "UPDATE claims SET claimed_by = NULL, lease_until = NULL "
                        "WHERE claimed_by = ?",
                        [(holder,) for holder in dead],
                    )
        return len(dead)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / BEATS_PER_LEASE):
            now = time.time()
            try:
                with self._lock, immediate(self._conn):
                    self._conn.execute(
                        "UPDATE claims SET lease_until = ?, heartbeat_at = ? WHERE claimed_by = ?",
                        (now + self.lease_s, now, self.me),
                    )
            except sqlite3.OperationalError:  # locked for a whole busy timeout: next beat
                continue


def _dead_here(holder: str, host: str) -> bool:
    """Whether runner ``holder`` (host:pid:uuid) ran on ``host`` in a process that is gone."""
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False

"""Where the ranks of a ``"hwsim"`` process group meet: in one process, or over the c10d store.

Both have the shape of ``hwsim.machine.collectives.Fabric``: a rank joins a collective with its
arrival tick, its modelled duration and its values, and is released with every rank's arrival and
values once all have joined. Ranks that are threads of one process share a ``ThreadFabric``;
ranks in separate processes (torchrun, ``torch.multiprocessing.spawn``) exchange them through the
store every process group already has (``StoreFabric``): a key per rank and collective, read by
all, deleted by the last reader. Values travel as ``.npy`` bytes (no pickle).
"""

from __future__ import annotations

import io
import os
import socket
import threading
import uuid
from datetime import timedelta
from typing import Any

import numpy as np

from hwsim.errors import HwsimError
from hwsim.machine.collectives import Arrival, release_of
from hwsim.machine.thread_fabric import ThreadFabric

_IN_PROCESS: dict[str, ThreadFabric] = {}
_LOCK = threading.Lock()


def fabric_for(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """A ``ThreadFabric`` shared by the group's ranks when all are in this process, else a
    ``StoreFabric`` over ``store`` (the group's prefix store)."""
    here = f"{socket.gethostname()}:{os.getpid()}"
    store.set(f"hwsim/where/{rank}", here)
    keys = [f"hwsim/where/{r}" for r in range(size)]
    store.wait(keys, timeout)
    if all(store.get(key).decode() == here for key in keys):
        if rank == 0:
            store.set("hwsim/token", uuid.uuid4().hex)
        store.wait(["hwsim/token"], timeout)
        token = store.get("hwsim/token").decode()
        with _LOCK:
            return _IN_PROCESS.setdefault(token, ThreadFabric(timeout.total_seconds()))
    return StoreFabric(store, timeout)


def _encode(arrival: int, duration: int, what: str, values: np.ndarray | None) -> bytes:
    buffer = io.BytesIO()
    head = np.array([arrival, duration, values is not None], np.int64)
    np.save(buffer, head, allow_pickle=False)
    np.save(buffer, np.frombuffer(what.encode(), np.uint8), allow_pickle=False)
    if values is not None:
        np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()


def _decode(data: bytes) -> tuple[int, int, str, np.ndarray | None]:
    buffer = io.BytesIO(data)
    arrival, duration, has_values = np.load(buffer, allow_pickle=False).tolist()
    what = np.load(buffer, allow_pickle=False).tobytes().decode()
    values = np.load(buffer, allow_pickle=False) if has_values else None
    return arrival, duration, what, values


class StoreFabric:
    """Ranks in separate processes meeting through a c10d ``Store``."""

    def __init__(self, store: Any, timeout: timedelta) -> None:
        self.store, self.timeout = store, timeout

    def join(self, arrival: Arrival) -> None:
        key, what, rank, size = arrival.key, arrival.what, arrival.rank, arrival.size
        name = f"hwsim/c/{key[1]}"
        self.store.set(f"{name}/{rank}", _encode(*arrival.timing()[:2], what, arrival.values))
        keys = [f"{name}/{r}" for r in range(size)]
        try:
            self.store.wait(keys, self.timeout)
        except Exception as error:  # the store's timeout: say which collective
            raise HwsimError(
                f"collective {key[1]} ({what}) on cores {list(key[0])}: not every rank arrived "
                f"within {self.timeout}: {error}"
            ) from error
        members = [_decode(self.store.get(k)) for k in keys]
        for r, member in enumerate(members):
            if member[2] != what:
                raise HwsimError(
                    f"collective {key[1]} on cores {list(key[0])}: rank {rank} runs {what} but "
                    f"rank {r} runs {member[2]}; every rank must run the same collectives in "
                    "the same order"
                )
        if self.store.add(f"{name}/read", 1) == size:  # the last reader tidies up
            for k in [*keys, f"{name}/read"]:
                self.store.delete_key(k)
        arrival.release(release_of([(m[0], m[1], m[3]) for m in members]))

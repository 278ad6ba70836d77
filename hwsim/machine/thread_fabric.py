"""Ranks simulated in separate runs, one thread each, meeting at their collectives.

Each rank is its own run (its own SimPy clock) of its own program; at a collective its collective
engine joins the shared ``ThreadFabric`` and its thread blocks until every rank of the group has
arrived: the arrival ticks are exchanged, the collective starts at the latest and lasts the
longest of the ranks' modelled durations (``hwsim.machine.collectives.release_of``), and each
rank's values are combined exactly. This is how ranks of ``torch.distributed`` threads, or rank
processes over Ray or Dask (a fabric of the same shape over their messaging), agree on simulated
time. A rank that fails aborts the fabric, so the others raise instead of waiting forever; a
rank that never arrives is reported after ``timeout_s`` of wall time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from hwsim.config import HardwareConfig
from hwsim.cost import CostModel
from hwsim.errors import HwsimError
from hwsim.machine.collectives import Arrival, Release, check_member, release_of
from hwsim.program import Program


class RankAborted(HwsimError):
    """A rank stopped waiting at a collective because another rank failed."""


class ThreadFabric:
    """The rendezvous of ranks on threads of one process (a ``Fabric``)."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._pending: dict[tuple[Any, ...], dict[int, tuple[Any, ...]]] = {}
        self._what: dict[tuple[Any, ...], tuple[int, str]] = {}
        self._done: dict[tuple[Any, ...], tuple[Release, set[int]]] = {}
        self._error: BaseException | None = None

    def join(self, arrival: Arrival) -> None:
        key, rank, size = arrival.key, arrival.rank, arrival.size
        with self._cond:
            members = self._pending.setdefault(key, {})
            check_member(self._what, members, arrival)
            members[rank] = arrival.timing()
            if len(members) == size:
                del self._pending[key], self._what[key]
                self._done[key] = (release_of([members[r] for r in range(size)]), set())
                self._cond.notify_all()
            elif not self._cond.wait_for(
                lambda: key in self._done or self._error is not None, self.timeout_s
            ):
                raise HwsimError(
                    f"collective {key[1]} on cores {list(key[0])}: ranks {sorted(members)} of "
                    f"{size} arrived; the others did not within {self.timeout_s:g} s"
                )
            if key not in self._done:
                raise RankAborted(
                    f"collective {key[1]} on cores {list(key[0])}: another rank failed: "
                    f"{self._error}"
                )
            done, taken = self._done[key]
            taken.add(rank)
            if len(taken) == size:
                del self._done[key]
        arrival.release(done)

    def abort(self, error: BaseException) -> None:
        """A rank failed: every rank waiting, or arriving later, raises naming ``error``."""
        with self._cond:
            self._error = error
            self._cond.notify_all()


def run_ranks(
    programs: Sequence[Program],
    config: HardwareConfig,
    core_ids: Sequence[int],
    *,
    numerics: bool = True,
    timeout_s: float = 600.0,
) -> list[Any]:
    """Run ``programs[k]`` (one core each) as physical core ``core_ids[k]``, each on a thread
    of its own, meeting at collectives; their ``RunResult``s in rank order. The first failure
    is raised after every thread has stopped."""
    from hwsim.machine.simulator import run

    if len(programs) != len(core_ids):
        raise HwsimError(f"{len(programs)} programs but {len(core_ids)} core ids")
    CostModel.for_config(config)  # built once here, found by every thread
    fabric = ThreadFabric(timeout_s)
    results: list[Any] = [None] * len(programs)
    errors: list[BaseException | None] = [None] * len(programs)

    def one(k: int) -> None:
        try:
            results[k] = run(
                programs[k], config, numerics=numerics, fabric=fabric, core_ids=[core_ids[k]]
            )
        except BaseException as error:  # handed to the caller below
            errors[k] = error
            fabric.abort(error)

    threads = [
        threading.Thread(target=one, args=(k,), name=f"rank{k}") for k in range(len(programs))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [e for e in errors if e is not None]
    if failed:  # the failure that stopped the others, not their aborted waits
        raise next((e for e in failed if not isinstance(e, RankAborted)), failed[0])
    return results

"""One reduction per collective for the ranks of a group that are threads of one process.

Every rank of a reducing collective (all-reduce, reduce-scatter) gets the same result: every
rank's values combined in rank order, rank 0 first. Ranks in separate processes each compute it
from the values they received. Ranks on threads share one ``ThreadFabric``, and each computing it
again cost the world size times the work and a copy of the result per rank (8 ranks of GPT-2
small's 0.5 GB gradient bucket: 64 sums of 124 M elements and 8 results of 0.5 GB): the first
rank to ask computes it, the others read that array (read-only), and the last to take it drops
it. No rank has written its tensor before it has the result, so the ranks' values need no copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: np.ndarray | None = None
    taken: int = 0


_ENTRIES: dict[Any, _Entry] = {}
_LOCK = threading.Lock()


def reduced_once(key: Any, size: int, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``'s result for the collective ``key`` (the fabric and the collective's key
    in it), computed by the first of its ``size`` ranks to ask. Shared: callers only read it."""
    with _LOCK:
        entry = _ENTRIES.setdefault(key, _Entry())
    with entry.lock:
        if entry.value is None:
            entry.value = compute()
        entry.taken += 1
        value, last = entry.value, entry.taken == size
    if last:
        with _LOCK:
            del _ENTRIES[key]
    return value


def entries_held() -> int:
    """Results computed and not yet taken by every rank (zero between collectives)."""
    with _LOCK:
        return len(_ENTRIES)

"""What the NKI front end keeps while one kernel builds: loops, allocation rings, PSUM groups,
DMA queue choice, SPMD program ids, ``no_reorder`` and ``sequential_range`` regions.

The NKI compiler multi-buffers a tile allocated inside a loop body; here each allocation site
inside an NKI loop (``affine_range`` & co.) gets a ring of ``buffers`` tiles, keyed by the loop's
source line, the allocation's source line and its occurrence within one iteration (so V1b's
K/128 lhsT tiles per M iteration are K/128 rings). A slot is handed out again only when every
tensor made from its previous allocation is dead, so a tile kept across iterations is never
aliased. Outside NKI loops tiles are allocated as the kernel language does.
"""

from __future__ import annotations

import contextvars
import itertools
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hwsim.errors import set_inside
from hwsim.lang.kernel import current

_STATE: contextvars.ContextVar[NkiState | None] = contextvars.ContextVar("hwsim_nki", default=None)
NKI_DIR = __file__.rsplit("/", 1)[0]
_LANG_DIR = NKI_DIR.rsplit("/", 1)[0] + "/lang"

#: Tiles per allocation site in an NKI loop (the compiler's multi-buffering depth: an
#: assumption, the same default as the library's tutorial kernels, DEFAULT_BUFFERS there).
DEFAULT_BUFFERS = 4
#: DMA queues loads rotate over (as the library's DmaQueues(load_queues=4)).
LOAD_QUEUES = 4


def user_site() -> tuple[str, int]:
    """(file, line) of the innermost frame outside hwsim.nki and hwsim.lang."""
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith((NKI_DIR, _LANG_DIR))
        or frame.f_code.co_filename.endswith("contextlib.py")
    ):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ("?", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


class Allocation:
    """Liveness token of one allocated tile: every tensor made from it holds it."""

    __slots__ = ("__weakref__", "name")

    def __init__(self, name: str) -> None:
        self.name = name


@dataclass
class Slot:
    tile: Any
    owner: weakref.ref[Allocation] | None = None


@dataclass
class LoopFrame:
    """One running NKI loop: its source line, its current iteration and the allocations of
    that iteration."""

    site: tuple[str, int]
    kind: str
    occurrences: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Direct-allocation declarations of this iteration, per site (``direct.traced_once``).
    direct_occurrences: dict[tuple[str, int], int] = field(default_factory=dict)
    step: int = 0  # iterations done before the current one
    value: int = 0  # the loop variable's current value
    #: Ring depth of the tiles allocated in the body (``ncc.multi_buffer``); None: the kernel's.
    buffers: int | None = None


class LoopIndex(int):
    """A loop variable of an NKI loop: an int that knows its loop, so that
    ``nl.loop_reduce(x, op, loop_indices=[k])`` can tell which enclosing loop it reduces over
    (two loops may well be at the same value). Arithmetic on it gives plain ints."""

    frame: LoopFrame

    def __new__(cls, value: int, frame: LoopFrame) -> LoopIndex:
        index = super().__new__(cls, value)
        index.frame = frame
        return index


@dataclass
class PsumGroup:
    """Accumulation state of a PSUM tile: ``open`` once a matmul wrote it and nothing else
    touched it since; ``zero_pending`` for ``nl.zeros(..., buffer=nl.psum)`` not yet emitted."""

    open: bool = False
    zero_pending: bool = False


class NkiState:
    def __init__(self, buffers: int = DEFAULT_BUFFERS) -> None:
        self.buffers = buffers
        self.loops: list[LoopFrame] = []
        self.rings: dict[tuple[Any, ...], list[Slot]] = {}
        self.ring_next: dict[tuple[Any, ...], int] = {}
        #: Most slots of each ring alive at once (the size of one buffered set).
        self.ring_live: dict[tuple[Any, ...], int] = {}
        self.psum: dict[str, PsumGroup] = {}
        self.program_ids: tuple[int, ...] = (0,)
        #: The physical core of the logical NeuronCore this build is for (``nl.nc`` grids).
        self.core = 0
        #: The rank this build is for in a multi-rank run (``nki.collectives.rank_id``).
        self.rank = 0
        self.grid: tuple[int, ...] = (1,)
        #: Dimensions of the launch grid as given (0: launched without one).
        self.grid_ndim = 0
        self.shared_hbm: list[Any] = []
        self.shared_hbm_seen = 0
        #: Regions a scheduler must keep in program order: per engine, the [start, end) pcs of
        #: its stream, with the kernel line that opened the region.
        self.no_reorder: list[dict[str, Any]] = []
        self.sequential: list[dict[str, Any]] = []
        self.notes: list[str] = []
        #: ``nl.loop_reduce`` accumulators not assigned into a tile, by call site and the
        #: iterations of the loops they do not reduce over (``hwsim.nki.pending``).
        self.reductions: dict[tuple[Any, ...], Any] = {}
        #: An ``nl.copy`` not yet emitted (``hwsim.nki.pending.PendingCopy``): written out
        #: before the next instruction, so it can still become a copy into an assigned tile.
        self.pending_copy: Any = None
        #: Directly allocated tiles by place (``hwsim.nki.direct``) and the bytes placements
        #: took from each memory's pool.
        self.direct_tiles: dict[tuple[Any, ...], Any] = {}
        self.direct_places: set[tuple[Any, ...]] = set()
        #: The direct-allocation buffer each declaration site in a traced loop body got first
        #: (``hwsim.nki.direct.traced_once``).
        self.traced_buffers: dict[tuple[Any, ...], Any] = {}
        #: Inside a call masked off by a constant False mask (``hwsim.nki.masking``).
        self.dropping = False
        self.direct_bytes: dict[Any, list[tuple[int, int]]] = {}
        self._load_queue = itertools.count()
        dma = current().config.dma
        self.load_queues = max(1, min(LOAD_QUEUES, dma.queues_per_engine - 2))
        self.store_queue = min(self.load_queues, dma.queues_per_engine - 1)

    def flush_copy(self) -> None:
        """Emit the pending ``nl.copy`` (into a new tile): before any other instruction."""
        pending = self.pending_copy
        if pending is not None:
            self.pending_copy = None
            pending.materialize()

    def forget_copy(self, pending: Any) -> None:
        if self.pending_copy is pending:
            self.pending_copy = None

    def next_load_queue(self) -> int:
        return next(self._load_queue) % self.load_queues

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @staticmethod
    def stream_marks() -> dict[str, int]:
        """Each engine's stream length so far (core 0)."""
        return {e: len(s) for e, s in current().builder.program.cores[0].streams.items()}

    @staticmethod
    def region(start: dict[str, int], line: str) -> dict[str, Any]:
        end = NkiState.stream_marks()
        spans = {e: (start[e], end[e]) for e in end if end[e] > start.get(e, 0)}
        return {"line": line, "pcs": spans}

    # ---- loops ----------------------------------------------------------------------------
    def loop(self, kind: str, values: range, buffers: int | None = None) -> Iterator[int]:
        frame = LoopFrame(user_site(), kind, buffers=buffers)
        self.flush_copy()  # a copy before the loop stays out of its regions
        self.loops.append(frame)
        first = self.stream_marks()
        from hwsim.lang.scheduling import schedule_barrier

        try:
            for step, value in enumerate(values):
                self.flush_copy()  # an iteration's copy stays in its iteration
                if step:
                    self.count_live(frame)
                frame.occurrences.clear()
                frame.direct_occurrences.clear()
                frame.step, frame.value = step, value
                if step and kind == "sequential_range":
                    schedule_barrier("sequential_range")  # honoured by a scheduled build
                yield LoopIndex(value, frame)
        finally:
            self.flush_copy()
            self.count_live(frame)
            if self.loops and self.loops[-1] is frame:
                self.loops.pop()
            if kind == "sequential_range":
                line = f"{frame.site[0].rsplit('/', 1)[-1]}:{frame.site[1]}"
                self.sequential.append(self.region(first, line))

    def count_live(self, frame: LoopFrame) -> None:
        """At the end of an iteration of ``frame``: how many tiles of each of its rings are
        still alive (the set one iteration keeps, which the ring holds ``buffers`` of)."""
        sites = tuple(f.site for f in self.loops)
        if not self.loops or self.loops[-1] is not frame:
            return
        for key, ring in self.rings.items():
            if key[0] == sites:
                live = sum(1 for s in ring if s.owner is not None and s.owner() is not None)
                if live > self.ring_live.get(key, 1):
                    self.ring_live[key] = live

    # ---- allocation -----------------------------------------------------------------------
    def ring_key(self, site: tuple[str, int]) -> tuple[Any, ...] | None:
        if not self.loops:
            return None
        frame = self.loops[-1]
        occurrence = frame.occurrences.get(site, 0)
        frame.occurrences[site] = occurrence + 1
        return (tuple(f.site for f in self.loops), site, occurrence)


def state() -> NkiState:
    return set_inside(
        _STATE,
        "nki.language / nki.isa calls must run inside an NKI kernel (a function decorated "
        "with @nki.jit, run with nki.simulate(kernel)(...), hwsim.nki.run or `hwsim nki`)",
    )


def active() -> NkiState | None:
    """The state of the NKI kernel being built, or None outside one."""
    return _STATE.get()


def enter(new: NkiState) -> contextvars.Token[NkiState | None]:
    return _STATE.set(new)


def leave(token: contextvars.Token[NkiState | None]) -> None:
    _STATE.reset(token)

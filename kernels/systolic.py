"""Cycle-by-cycle model of a weight-stationary systolic array (TensorE): cycle counts and numerics.

The array has ``rows`` x ``cols`` processing elements (PEs). A matmul multiplies a stationary
operand ``[K, M]`` (weights: PE(r, c) holds ``stationary[k0 + r, m0 + c]``) by a moving operand
``[K, N]`` and produces ``stationary.T @ moving`` of shape ``[M, N]``, as ``nc_matmul`` does:
K = partitions = PE rows (contraction), M = stationary free size = PE columns = output partitions,
N = moving free size = streamed over time.

Dataflow, one cycle per step (cycle 0 is the first cycle of the first weight load):

- **Weight load.** Weights shift into a shadow register plane, ``fast_load_factor`` PE positions
  per cycle. ``load_edge="left"`` (Trainium: each partition feeds its PE row from SBUF, weights
  shift right column by column) takes ``ceil(M_tile / f)`` cycles; ``load_edge="top"`` (SCALE-Sim,
  TPU: weights shift down row by row) takes ``ceil(K_tile / f)`` cycles. When a matmul starts, its
  first input latches the shadow plane into the active weights (double buffering), so the next
  load may start in the same cycle (``overlap_load=True``, Trainium's background LoadStationary).
  With ``overlap_load=False`` a load waits until the previous matmul has fully drained.
- **Moving inputs**, skewed: column ``n`` of the moving tile enters row ``r`` at cycle
  ``s + n + r`` (row r starts one cycle after row r-1) and moves one PE to the right per cycle.
- **Partial sums** move one PE down per cycle and gain ``input * weight`` at each PE; they pass
  through all ``rows`` rows (rows past the tile add zero; the model steps only the rows some tile
  uses and treats the rest as the pure delay line they are).
- **Outputs** leave the bottom edge skewed by column: element ``[m, n]`` leaves at cycle
  ``s + n + (rows - 1) + m``. Outputs of successive K tiles accumulate in place, as a PSUM
  accumulation group does (fp32).

GEMMs larger than the array are folded: for each column tile of M (outer), for each row tile of K
(inner), one matmul with the whole moving free size N. ``repeats`` replays that fold sequence back
to back (results accumulate), which exposes the steady state of a stream of equal matmuls.

Closed form of this model (checked against the simulation by ``reference_schedule``): with load
``L_j`` cycles, fold j starting to stream at ``s_j``::

    overlap:    s_0 = L_0,   s_j = s_{j-1} + max(N, L_j)
    no overlap: s_0 = L_0,   s_j = last_output_{j-1} + 1 + L_j
    first_output_j = s_j + rows - 1          (fill:  rows - 1 cycles)
    last_output_j  = s_j + N - 1 + rows - 1 + M_j - 1   (stream N, drain M_j - 1)
    total cycles   = max_j last_output_j + 1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np

from ._checks import f32

LoadEdge = Literal["left", "top"]
_LOAD_EDGES: dict[str, int] = {"left": 0, "top": 1}
_LEFT = 0

# Columns of the per-fold event table the jitted kernel fills (cycle numbers, -1 = not yet).
_LOAD_START, _LOAD_END, _FIRST_INPUT, _LAST_INPUT, _FIRST_OUTPUT, _LAST_OUTPUT = range(6)
_N_EVENTS = 6


@dataclass(frozen=True, slots=True)
class FoldCycles:
    """Observed cycles of one fold (one matmul on one [K_tile, M_tile] weight tile).

    All fields are absolute cycle numbers except the tile coordinates; the properties give the
    per-fold breakdown: weight load, fill, steady stream, drain.
    """

    k_start: int  # first contraction row of the tile
    k_rows: int  # rows of the tile (<= array rows)
    m_start: int  # first stationary column of the tile
    m_cols: int  # columns of the tile (<= array cols)
    load_start: int  # first cycle of the weight load
    load_end: int  # last cycle of the weight load
    first_input: int  # cycle moving column 0 enters PE(0, 0)
    last_input: int  # cycle the last moving column enters PE(0, 0)
    first_output: int  # cycle result [0, 0] leaves the bottom edge
    last_output: int  # cycle the last result leaves the bottom edge

    @property
    def load_cycles(self) -> int:
        return self.load_end - self.load_start + 1

    @property
    def fill_cycles(self) -> int:
        """Cycles from the first input until the first output (the pipeline depth)."""
        return self.first_output - self.first_input

    @property
    def stream_cycles(self) -> int:
        """Cycles row 0 accepts this fold's moving inputs (= N)."""
        return self.last_input - self.first_input + 1

    @property
    def drain_cycles(self) -> int:
        """Cycles after column 0's last output until the last column's (= M_tile - 1)."""
        return self.last_output - (self.first_output + self.stream_cycles - 1)


@dataclass(frozen=True, slots=True)
class SystolicRun:
    """Result of one simulation: the product (None for timing-only runs) and the cycle counts."""

    result: np.ndarray | None  # [M, N] float32 = repeats * stationary.T @ moving
    rows: int
    cols: int
    folds: tuple[FoldCycles, ...]

    @property
    def first_input_cycle(self) -> int:
        return self.folds[0].first_input

    @property
    def last_output_cycle(self) -> int:
        return max(f.last_output for f in self.folds)

    @property
    def total_cycles(self) -> int:
        """Cycles from cycle 0 (first weight load) through the last output, inclusive."""
        return self.last_output_cycle + 1

    @property
    def pe_cycles(self) -> int:
        """PE-cycles simulated: rows * cols * total cycles."""
        return self.rows * self.cols * self.total_cycles


@dataclass(frozen=True, slots=True)
class SystolicArray:
    """A ``rows`` x ``cols`` weight-stationary array and how it loads weights (module docstring)."""

    rows: int
    cols: int
    fast_load_factor: int = 1  # weight positions shifted in per load cycle
    load_edge: LoadEdge = "left"  # "left": Trainium, ceil(M/f) cycles; "top": ceil(K/f) cycles
    overlap_load: bool = True  # load the next weights while the current matmul streams

    def __post_init__(self) -> None:
        for name in ("rows", "cols", "fast_load_factor"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.load_edge not in _LOAD_EDGES:
            raise ValueError(
                f"load_edge must be one of {sorted(_LOAD_EDGES)}, got {self.load_edge!r}"
            )

    def matmul(self, stationary: np.ndarray, moving: np.ndarray, repeats: int = 1) -> SystolicRun:
        """Simulate ``stationary.T @ moving`` cycle by cycle, with numerics.

        ``stationary`` [K, M] and ``moving`` [K, N] are float32; the result is [M, N] float32,
        accumulated in fp32 (``repeats`` times, once per replay of the fold sequence).
        """
        st = f32(stationary, "stationary", 2)
        mv = f32(moving, "moving", 2)
        if st.shape[0] != mv.shape[0]:
            raise ValueError(
                f"stationary [K, M] and moving [K, N] must share K (partitions), got "
                f"stationary {st.shape} and moving {mv.shape}"
            )
        return self._run(st, mv, st.shape[0], st.shape[1], mv.shape[1], repeats, compute=True)

    def matmul_timing(
        self, k_rows: int, m_stationary: int, n_moving: int, repeats: int = 1
    ) -> SystolicRun:
        """The same cycle-by-cycle schedule without the arithmetic (``result`` is None)."""
        dummy = np.zeros((1, 1), dtype=np.float32)
        return self._run(dummy, dummy, k_rows, m_stationary, n_moving, repeats, compute=False)

    def reference_schedule(
        self, k_rows: int, m_stationary: int, n_moving: int, repeats: int = 1
    ) -> tuple[FoldCycles, ...]:
        """Plain-Python twin of the simulated schedule: the closed form in the module docstring."""
        folds: list[FoldCycles] = []
        tiles = fold_tiles(k_rows, m_stationary, self.rows, self.cols, repeats).tolist()
        for k0, kt, m0, mt in tiles:
            load = -(-(mt if self.load_edge == "left" else kt) // self.fast_load_factor)
            if not folds:
                load_start, start = 0, load
            elif self.overlap_load:
                load_start = folds[-1].first_input
                start = load_start + max(n_moving, load)
            else:
                load_start = folds[-1].last_output + 1
                start = load_start + load
            last_input = start + n_moving - 1
            first_output = start + self.rows - 1
            last_output = last_input + self.rows - 1 + mt - 1
            cycles = (load_start, load_start + load - 1, start, last_input, first_output)
            folds.append(FoldCycles(k0, kt, m0, mt, *cycles, last_output))
        return tuple(folds)

    def _run(
        self,
        stationary: np.ndarray,
        moving: np.ndarray,
        k: int,
        m: int,
        n: int,
        repeats: int,
        compute: bool,
    ) -> SystolicRun:
        for name, value in (("K", k), ("M", m), ("N", n), ("repeats", repeats)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        tiles = fold_tiles(k, m, self.rows, self.cols, repeats)
        out = np.zeros((m, n) if compute else (1, 1), dtype=np.float32)
        events = np.full((tiles.shape[0], _N_EVENTS), -1, dtype=np.int64)
        flow = (self.rows, self.fast_load_factor, _LOAD_EDGES[self.load_edge], self.overlap_load)
        _simulate(stationary, moving, tiles, n, out, events, *flow, compute)
        folds = tuple(
            FoldCycles(*(int(x) for x in tile), *(int(x) for x in ev))
            for tile, ev in zip(tiles, events, strict=True)
        )
        return SystolicRun(out if compute else None, self.rows, self.cols, folds)


def fold_tiles(k: int, m: int, rows: int, cols: int, repeats: int = 1) -> np.ndarray:
    """The fold sequence ``[F, 4]`` int64 (k_start, k_rows, m_start, m_cols), in issue order."""
    tiles = [
        (k0, min(rows, k - k0), m0, min(cols, m - m0))
        for m0 in range(0, m, cols)
        for k0 in range(0, k, rows)
    ]
    return np.array(tiles * repeats, dtype=np.int64).reshape(-1, 4)


# ---- the jitted cycle loop ----------------------------------------------------------------------


@numba.njit(cache=True)
def _simulate(
    stationary, moving, tiles, n_moving, out, events, rows, load_factor, load_edge, overlap, compute
):
    n_folds = tiles.shape[0]
    used_rows, used_cols, load_len, outputs_left, horizon = _plan(
        tiles, rows, load_factor, load_edge, n_moving
    )
    # Token bookkeeping: the moving column entering PE(0, 0) at cycle u belongs to fold
    # slot_fold[u] (-1: bubble), column slot_n[u]; the skew puts that token at PE(r, c) at cycle
    # u + r + c, so no per-PE tags are needed.
    slot_fold = np.full(horizon, -1, np.int64)
    slot_plane = np.zeros(horizon, np.int64)
    slot_n = np.zeros(horizon, np.int64)
    # Active weight planes of the folds in flight (a ring: a fold stays in the array for at most
    # n_moving + used_rows + used_cols cycles and folds start at least n_moving cycles apart).
    ring = min(n_folds, (used_rows + used_cols) // n_moving + 3) if compute else 1
    planes = np.zeros((ring, used_rows, used_cols), np.float32)
    shadow = np.zeros((used_rows, used_cols), np.float32)
    a_reg = np.zeros((used_rows, used_cols), np.float32)
    p_reg = np.zeros((used_rows, used_cols), np.float32)
    remaining = outputs_left.sum()
    next_load, loading, load_step, next_stream, streaming, t = 0, -1, 0, 0, -1, 0
    while remaining > 0:
        # 1. Stream: start the next fold once its weights are loaded and row 0 is free; its first
        #    input latches the shadow weights into the active plane.
        if streaming < 0 and next_stream < n_folds and 0 <= events[next_stream, _LOAD_END] < t:
            streaming = next_stream
            next_stream += 1
            events[streaming, _FIRST_INPUT] = t
            if compute:
                _latch(shadow, planes[streaming % ring], tiles[streaming])
        if streaming >= 0:
            slot_fold[t] = streaming
            slot_plane[t] = streaming % ring
            slot_n[t] = t - events[streaming, _FIRST_INPUT]
            if slot_n[t] == n_moving - 1:
                events[streaming, _LAST_INPUT] = t
                streaming = -1
        # 2. Load: shift the next fold's weights into the shadow plane.
        if (
            loading < 0
            and next_load < n_folds
            and _load_may_start(next_load, overlap, events, outputs_left, t)
        ):
            loading = next_load
            next_load += 1
            load_step = 0
            events[loading, _LOAD_START] = t
        if loading >= 0:
            if compute:
                f, n_steps = load_factor, load_len[loading]
                _shift_weights(shadow, stationary, tiles[loading], n_steps, load_step, f, load_edge)
            load_step += 1
            if load_step == load_len[loading]:
                events[loading, _LOAD_END] = t
                loading = -1
        # 3. The PE array.
        if compute:
            _step_array(a_reg, p_reg, planes, moving, tiles, slot_fold, slot_plane, slot_n, t)
        # 4. The bottom edge: results leave skewed by column.
        remaining -= _bottom_edge(
            p_reg, tiles, slot_fold, slot_n, rows, t, compute, out, events, outputs_left
        )
        t += 1


@numba.njit(cache=True)
def _plan(tiles, rows, load_factor, load_edge, n_moving):
    # The rows and columns any tile uses, each fold's load cycles, and a bound on the last cycle.
    n_folds = tiles.shape[0]
    used_rows = max(1, tiles[:, 1].max())
    used_cols = max(1, tiles[:, 3].max())
    load_len = np.empty(n_folds, np.int64)
    outputs = np.empty(n_folds, np.int64)
    horizon = 2
    for j in range(n_folds):
        span = tiles[j, 3] if load_edge == _LEFT else tiles[j, 1]
        load_len[j] = (span + load_factor - 1) // load_factor
        outputs[j] = tiles[j, 3] * n_moving
        horizon += load_len[j] + n_moving + rows + used_cols
    return used_rows, used_cols, load_len, outputs, horizon


@numba.njit(cache=True)
def _load_may_start(j, overlap, events, outputs_left, t):
    # Overlapped: once fold j-1 has latched the shadow plane. Otherwise: once it has drained.
    if j == 0:
        return True
    if overlap:
        return events[j - 1, _FIRST_INPUT] >= 0
    return outputs_left[j - 1] == 0 and events[j - 1, _LAST_OUTPUT] < t


@numba.njit(cache=True)
def _bottom_edge(p_reg, tiles, slot_fold, slot_n, rows, t, compute, out, events, outputs_left):
    # Results of the last used row leave the array after the unused rows below it, which only
    # add zero: a pure delay line. Returns the number of results that left in this cycle.
    used_rows, used_cols = p_reg.shape
    when = t + rows - used_rows
    left = 0
    for c in range(used_cols):
        u = t - (used_rows - 1) - c
        if u < 0:
            break
        j = slot_fold[u]
        if j < 0 or c >= tiles[j, 3]:
            continue
        if compute:
            out[tiles[j, 2] + c, slot_n[u]] += p_reg[used_rows - 1, c]
        if events[j, _FIRST_OUTPUT] < 0:
            events[j, _FIRST_OUTPUT] = when
        events[j, _LAST_OUTPUT] = when
        outputs_left[j] -= 1
        left += 1
    return left


@numba.njit(cache=True)
def _latch(shadow, plane, tile):
    # PEs outside the tile are disabled: they hold zero, whatever shifted through them.
    for r in range(plane.shape[0]):
        for c in range(plane.shape[1]):
            plane[r, c] = shadow[r, c] if (r < tile[1] and c < tile[3]) else 0.0


@numba.njit(cache=True)
def _shift_weights(shadow, stationary, tile, load_len, step, f, load_edge):
    # One load cycle: the plane shifts f positions away from the load edge and f new weights
    # enter at it, farthest-destination first, so after load_len cycles weight i sits at i.
    k0, kt, m0, mt = tile[0], tile[1], tile[2], tile[3]
    if load_edge == _LEFT:
        _shift_from_left(shadow, stationary, k0, kt, m0, mt, load_len, step, f)
    else:  # the top edge's rows are the left edge's columns of the transposed planes
        _shift_from_left(shadow.T, stationary.T, m0, mt, k0, kt, load_len, step, f)


@numba.njit(cache=True)
def _shift_from_left(shadow, stationary, r0, rt, c0, ct, load_len, step, f):
    # Every row shifts f columns right; the f new columns come from stationary[r0 + r, c0 + dest]
    # (zero outside the tile's rt x ct).
    n_rows, n_cols = shadow.shape
    for r in range(n_rows):
        for c in range(n_cols - 1, f - 1, -1):
            shadow[r, c] = shadow[r, c - f]
        for i in range(f):
            col = f - 1 - i
            if col >= n_cols:
                continue
            dest = load_len * f - 1 - (step * f + i)
            ok = r < rt and 0 <= dest < ct
            shadow[r, col] = stationary[r0 + r, c0 + dest] if ok else 0.0


@numba.njit(cache=True)
def _step_array(a_reg, p_reg, planes, moving, tiles, slot_fold, slot_plane, slot_n, t):
    # Rows bottom-up and columns right-to-left, so each PE reads its neighbours' previous-cycle
    # registers before they are overwritten: inputs move right, partial sums move down.
    n_rows, n_cols = a_reg.shape
    for r in range(n_rows - 1, -1, -1):
        x = np.float32(0.0)
        u = t - r
        if u >= 0:
            j = slot_fold[u]
            if j >= 0 and r < tiles[j, 1]:
                x = moving[tiles[j, 0] + r, slot_n[u]]
        for c in range(n_cols - 1, -1, -1):
            a = a_reg[r, c - 1] if c > 0 else x
            a_reg[r, c] = a
            u = t - r - c
            if u < 0 or slot_fold[u] < 0:
                p_reg[r, c] = 0.0
                continue
            above = p_reg[r - 1, c] if r > 0 else np.float32(0.0)
            p_reg[r, c] = above + a * planes[slot_plane[u], r, c]

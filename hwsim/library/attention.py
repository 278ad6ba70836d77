"""One attention head, flash-style: o = softmax(q k^T * scale [+ causal mask]) v, never
materialising the [S, S] score matrix.

Per query tile (<= 128 rows on partitions) the keys/values stream in blocks of <= 512 (one PSUM
bank of fp32 scores):

- TensorE: scores s = q k^T for the block (stationary q^T [d, 128], moving k^T [d, <= 512]);
- blocks that cross the diagonal are copied to SBUF and masked by GpSimdE ``affine_select``
  (keep where query index - key index >= 0); other blocks are read straight from PSUM;
- online softmax: VectorE ``tensor_reduce(max)`` of the block, running max m (kept scaled,
  as -scale*m), ScalarE ``activation_reduce(exp, scale, bias=-scale*m)`` gives p and its row
  sums, ``alpha = exp(m_old - m_new)`` rescales the running sum and output;
- p^T by TensorE transposes (several into one PSUM bank), then o += p v on TensorE
  (stationary p^T [keys, 128 queries], moving v [keys, d]), folded into the fp32 running output
  by one ``scalar_tensor_tensor`` (o * alpha + pv);
- at the end o / sum, cast to the output dtype, stored.

q^T and k^T come on chip once (``dma_transpose`` or TensorE transposes), v in natural layout.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile
from hwsim.library.common import (
    BufferRing,
    DmaQueues,
    Evacuator,
    Operand,
    TransposedLoader,
    cdiv,
    chunks,
    limits,
    require,
    row_tiles,
)

#: Score value of masked positions: exp(scale * MASKED - max) is exactly 0 in fp32.
MASKED = -1e30
#: Query tiles emitted interleaved, block by block (software pipelining across tiles).
INTERLEAVE = 2
#: Share of SBUF q^T, k^T and v may take (they stay resident).
RESIDENT_SBUF_SHARE = 0.5


@lang.kernel
def attention(q, k, v, causal=True, scale=None):
    """o[S, d] = softmax(q k^T * scale + mask) v for one head; q, k, v [S, d] in one float dtype.

    scale defaults to 1/sqrt(d); causal=True masks keys after each query. Any S as long as q^T,
    k^T and v stay in half of SBUF (S * (2 + d/128) * itemsize bytes per partition: S up to
    19,072 in bf16 with d = 128 on trn2), and d <= 128 (the contraction of q k^T is d, one
    PE-array pass). Matmuls run in the input dtype, softmax statistics and the
    running output in fp32.
    """
    _check(q, k, v)
    s_len, d = q.shape
    lim = limits()
    dt = q.dtype
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = lang.ndarray((s_len, d), dt, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    loader = TransposedLoader(queues)
    qt = lang.ndarray((lim.tile_k, 1, s_len), dt)
    kt = lang.ndarray((lim.tile_k, 1, s_len), dt)
    loader.load(qt, q, 0, s_len, 0, d)
    loader.load(kt, k, 0, s_len, 0, d, engine=queues.store_engine)
    v_sb = _rows_on_partitions(v, queues)
    loader.release()  # its PSUM banks go to the score / transpose / output rings
    head = _Head(qt, kt, v_sb, d, scale, bool(causal), queues)
    # Query tiles are independent: emitting two of them block by block, interleaved, lets one
    # tile's engines work while the other waits on its own chain of dependent instructions.
    pending = [head.query_tile(q0, qw, out) for q0, qw in chunks(s_len, lim.tile_m)]
    active = pending[:INTERLEAVE]
    pending = pending[INTERLEAVE:]
    while active:
        for tile in list(active):
            if next(tile, False) is False:  # the tile is complete
                active.remove(tile)
                if pending:
                    active.append(pending.pop(0))
    return out


def _check(q: Tile, k: Tile, v: Tile) -> None:
    require(
        q.ndim == 2 and q.shape == k.shape == v.shape,
        "attention",
        f"q {q.shape}, k {k.shape}, v {v.shape} must all be [S, d]",
    )
    require(
        q.dtype == k.dtype == v.dtype and q.dtype.is_float,
        "attention",
        f"q, k, v must share one float dtype, got {q.dtype.name}, {k.dtype.name}, {v.dtype.name}",
    )
    lim = limits()
    s_len, d = q.shape
    require(d <= lim.tile_k, "attention", f"head dim d={d} must be <= {lim.tile_k}")
    resident = (2 * s_len + cdiv(s_len, lim.tile_k) * d) * q.dtype.itemsize
    require(
        resident <= lim.sbuf_bytes * RESIDENT_SBUF_SHARE,
        "attention",
        f"S={s_len} needs {resident} bytes per SBUF partition for q^T, k^T and v, more than "
        f"half of the {lim.sbuf_bytes} there are; split the sequence",
    )


def _rows_on_partitions(v: Tile, queues: DmaQueues) -> Tile:
    """v [S, d] as SBUF [tile_k, S tiles, d]: full tiles in one DMA, a partial last one alone."""
    lim = limits()
    s_len, d = v.shape
    tiles = chunks(s_len, lim.tile_k)
    sb = lang.ndarray((lim.tile_k, len(tiles), d), v.dtype)
    full = s_len // lim.tile_k
    if full:
        queues.load(sb[:, 0:full, :], row_tiles(v, 0, lim.tile_k, full, 0, d))
    if full < len(tiles):
        r0, r = tiles[-1]
        queues.load(sb[:r, full, :], v[r0 : r0 + r, :])
    return sb


class _Head:
    """The per-query-tile loop of ``attention`` (state shared by its blocks)."""

    def __init__(
        self,
        qt: Tile,
        kt: Tile,
        v_sb: Tile,
        d: int,
        scale: float,
        causal: bool,
        queues: DmaQueues,
    ) -> None:
        self.qt, self.kt, self.v_sb, self.d = qt, kt, v_sb, d
        self.scale, self.causal, self.queues = scale, causal, queues
        self.lim = lim = limits()
        self.dt = qt.dtype
        rings = max(1, lim.psum_banks // 3)
        self.s_psum, self.t_psum, self.o_psum = (BufferRing(rings) for _ in range(3))
        s_len = kt.shape[2]
        self.q_max, self.kv_max = min(lim.tile_m, s_len), min(lim.tile_n, s_len)
        depth = INTERLEAVE + 1
        self.masked, self.p_ring, self.pt_ring = (BufferRing(INTERLEAVE) for _ in range(3))
        self.stats = BufferRing(2 * INTERLEAVE)  # per block: -scale*max, alpha, row sums
        self.acc, self.runs, self.outs = (BufferRing(depth) for _ in range(3))
        self.copy = Evacuator(("vector",))
        bank_bytes = lang.config().psum.bytes_per_partition // lim.psum_banks
        self.transposes_per_bank = max(1, bank_bytes // (lim.tile_m * self.dt.itemsize))

    def query_tile(self, q0: int, qw: int, out: Tile) -> Iterator[bool]:
        """Emit one query tile, yielding after each key block (the caller interleaves tiles)."""
        s_len = self.kt.shape[2]
        kv_end = q0 + qw if self.causal else s_len
        tm = self.q_max
        acc = self.acc((qw, self.d), lang.float32, lang.sbuf, max_shape=(tm, self.d))  # output
        run = self.runs((qw, 2), lang.float32, lang.sbuf, max_shape=(tm, 2))  # sum, 1/sum
        prev: Operand | None = None
        for k0, kb in chunks(kv_end, self.lim.tile_n):  # one PSUM bank of fp32 scores
            st = self.stats((qw, 4), lang.float32, lang.sbuf, max_shape=(tm, 4))
            yield from self.block(q0, qw, k0, kb, acc, run, prev, st)
            prev = st
        nisa.reciprocal(run[:, 1:2], run[:, 0:1])
        o = self.outs((qw, self.d), self.dt, lang.sbuf, max_shape=(tm, self.d))
        nisa.tensor_scalar(o, acc, lang.AluOp.multiply, run[:, 1:2])
        self.queues.store(out[q0 : q0 + qw, :], o)
        yield True

    def block(
        self,
        q0: int,
        qw: int,
        k0: int,
        kb: int,
        acc: Operand,
        run: Operand,
        prev: Operand | None,
        st: Operand,
    ) -> Iterator[bool]:
        """One key block, yielding between its stages (scores, statistics, exp, p^T, p v).

        st receives the block's statistics: -scale * running max, alpha, row sums, -max.
        """
        s_ps = self.s_psum((qw, kb), lang.float32, lang.psum, max_shape=(self.q_max, self.kv_max))
        nisa.nc_matmul(s_ps, self.qt[: self.d, 0, q0 : q0 + qw], self.kt[: self.d, 0, k0 : k0 + kb])
        scores: Operand = s_ps
        if self.causal and k0 + kb - 1 > q0:  # some key is after some query of the tile
            scores = self.masked(
                (qw, kb), lang.float32, lang.sbuf, max_shape=(self.q_max, self.kv_max)
            )
            self.copy(scores, s_ps)
            nisa.affine_select(
                scores,
                scores,
                MASKED,
                lang.AluOp.is_ge,
                steps=(-1,),
                offset=q0 - k0,
                channel_multiplier=1,
            )
        yield True
        neg, alpha, sums = st[:, 0:1], st[:, 1:2], st[:, 2:3]
        nisa.tensor_reduce(st[:, 3:4], lang.ReduceOp.max, scores, negate=True)
        if prev is None:
            nisa.tensor_scalar(neg, st[:, 3:4], lang.AluOp.multiply, self.scale)
        else:  # -scale * max(m_old, m_block) = min(-scale * m_old, -scale * m_block)
            nisa.scalar_tensor_tensor(
                neg, st[:, 3:4], lang.AluOp.multiply, self.scale, lang.AluOp.min, prev[:, 0:1]
            )
            nisa.activation(alpha, lang.ActivationFunction.exp, prev[:, 0:1], bias=neg, scale=-1.0)
        yield True
        p = self.p_ring((qw, kb), self.dt, lang.sbuf, max_shape=(self.q_max, self.kv_max))
        nisa.activation_reduce(
            p, lang.ActivationFunction.exp, scores, bias=neg, scale=self.scale, reduce_res=sums
        )
        yield True
        pv = yield from self.p_times_v(p, qw, k0, kb)
        if prev is None:
            nisa.tensor_copy(run[:, 0:1], sums)
            self.copy(acc, pv)
        else:
            nisa.scalar_tensor_tensor(
                run[:, 0:1], run[:, 0:1], lang.AluOp.multiply, alpha, lang.AluOp.add, sums
            )
            nisa.scalar_tensor_tensor(acc, acc, lang.AluOp.multiply, alpha, lang.AluOp.add, pv)
        yield True

    def p_times_v(self, p: Operand, qw: int, k0: int, kb: int) -> Generator[bool, None, Operand]:
        """pv[qw, d] = p[qw, kb] @ v[k0:k0+kb] in PSUM, via p^T (TensorE transposes); yields
        between the transposes and the matmuls, returns pv."""
        tk = self.lim.tile_k
        subs = chunks(kb, tk)
        most = cdiv(self.kv_max, tk)
        pt = self.pt_ring((tk, len(subs), qw), self.dt, lang.sbuf, max_shape=(tk, most, self.q_max))
        per_bank = self.transposes_per_bank
        for g0 in range(0, len(subs), per_bank):
            group = subs[g0 : g0 + per_bank]
            ps = self.t_psum(
                (tk, len(group), qw), self.dt, lang.psum, max_shape=(tk, per_bank, self.q_max)
            )
            for i, (c0, cw) in enumerate(group):
                nisa.nc_transpose(ps[:cw, i, :], p[:, c0 : c0 + cw])
            full = sum(1 for _, cw in group if cw == tk)
            if full:
                self.copy(pt[:, g0 : g0 + full, :], ps[:, 0:full, :])
            if full < len(group):
                cw = group[-1][1]
                self.copy(pt[:cw, g0 + full, :], ps[:cw, full, :])
        yield True
        pv = self.o_psum((qw, self.d), lang.float32, lang.psum, max_shape=(self.q_max, self.d))
        for c, (c0, cw) in enumerate(subs):
            row_tile = (k0 + c0) // tk
            nisa.nc_matmul(pv, pt[:cw, c, :], self.v_sb[:cw, row_tile, :], accumulate=c > 0)
        return pv

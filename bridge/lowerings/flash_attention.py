"""Lowering a fused attention node (``passes.attention_fusion``) as one flash-attention kernel.

o = softmax(scale * q kᵀ + mask) v per head, the scores never leaving the chip. Per batch and
group of heads (as many as fit in SBUF: all of them in the bench models):

- k and v come on chip once, rows on partitions, every head of the group in one DMA per 128
  keys (a head split of the QKV projection is one strided view); kᵀ by TensorE transposes
  into PSUM (several heads per bank), copied back to SBUF once per bank;
- per query tile (<= 128 rows): q for every head of the group in one DMA, qᵀ by TensorE
  transposes; the mask tile ([queries, keys], fp32) is loaded once and reused by every head
  that reads the same mask rows (a causal or padding mask is broadcast over heads);
- per head and block of <= 512 keys (one PSUM bank of fp32 scores): s = qᵀ·kᵀ on TensorE
  into PSUM; the mask add fused with the scale on the PSUM evacuation (VectorE
  ``scalar_tensor_tensor``, or the scores read straight from PSUM when there is no mask); the
  online softmax as ``hwsim.library.attention`` does it (running -scale·max, ``alpha`` =
  exp(m_old - m_new) rescaling the running sum and output), p = exp(...) with its row sums by
  one ScalarE ``activation_reduce``; pᵀ by TensorE transposes, p·v accumulated in PSUM;
- the output of every head is scaled by 1/sum (and by the row's "any key kept" flag: the safe
  softmax gives 0 for a row masked entirely, where exp(-inf - (-inf)) would give NaN) into one
  SBUF tile, stored by one DMA per query tile.

Masked positions: additive masks are clamped to ``MASKED`` (-inf + anything is NaN-prone in the
running max; exp(MASKED - max) is exactly 0 in fp32), boolean masks become 0 / ``MASKED``.
Matmul operands are in the precision's dtype for the ops' own dtypes (as ``bmm`` lowers them);
statistics, scores and the running output stay fp32.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.dtypes import HW_FP32
from hwsim.bridge.passes.attention_fusion import AttentionPlan, FusedAttention
from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fused_lowering import FusionFallback, _call, _lower_one_by_one, _meta
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.kernels.ops import ActivationFunction as Act
from hwsim.kernels.ops import AluOp, ReduceOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, Evacuator, cdiv, chunks

#: Score of a masked position (as ``hwsim.library.attention``): finite, so the running max
#: never meets -inf - -inf, and exp(MASKED - max) is exactly 0 in fp32.
MASKED = -1e30
#: Share of SBUF the resident kᵀ, v and the per-tile q of one head group may take.
RESIDENT_SBUF_SHARE = 0.5
#: Heads emitted interleaved, stage by stage (software pipelining: TensorE computes one head's
#: scores while VectorE/ScalarE run another's softmax), and the buffers of the per-head working
#: tiles (scores, p, pᵀ, statistics), one per head in flight.
INTERLEAVE = 2
BUFFERS = INTERLEAVE
#: Distinct mask row blocks (per batch, per head) loaded once per query tile and shared.
MASKS_SHARED = 8


@register_fused(FusedAttention)
def lower_fused_attention(
    ctx: LoweringContext, kernel: FusedAttention, outside: list[Any], escapes: bool
) -> HbmValue:
    """The fused node's value; its members one by one when the kernel cannot take them."""
    try:
        return _lower(ctx, kernel, outside, escapes)
    except FusionFallback as why:
        ctx.fusion_notes.append({"group": kernel.node_names, "fused": False, "why": str(why)})
        return _lower_one_by_one(ctx, kernel, outside, escapes)


@dataclass(frozen=True)
class _Shapes:
    batch: int
    heads: int
    queries: int
    keys: int
    dim: int
    dim_v: int


def _heads4(value: HbmValue, batch: int, heads: int) -> HbmValue:
    """[BH, r, c] (or [B, H, r, c]) as a [B, H, r, c] view (splitting a dim is a view)."""
    if value.ndim == 4 and value.shape[:2] == (batch, heads):
        return value
    viewed = value.view((batch, heads, *value.shape[-2:]))
    if viewed is None:
        raise FusionFallback(f"an operand {value.shape} has no [{batch}, {heads}, ...] view")
    return viewed


def _lower(
    ctx: LoweringContext, kernel: FusedAttention, outside: list[Any], escapes: bool
) -> HbmValue:
    plan = kernel.plan
    b, h = plan.batch, plan.heads
    q = _heads4(outside[plan.q], b, h)
    k = _heads4(outside[plan.kt], b, h).transpose(2, 3)
    v = _heads4(outside[plan.v], b, h)
    shapes = _Shapes(b, h, q.shape[2], k.shape[2], q.shape[3], v.shape[3])
    mask = None
    if plan.mask is not None:
        mask = outside[plan.mask].expand((b, h, shapes.queries, shapes.keys))
    last = kernel.members[-1]
    meta = _meta(last.val)
    group = _head_group(ctx, shapes, ctx.matmul_dtype(q.dtype), ctx.matmul_dtype(v.dtype))
    tag = group_tag(kernel)
    with ctx.node(last.name, meta, _call(last), escapes=escapes, tag=tag):
        out = ctx.new_value(meta.shape, meta.dtype)
        if plan.out_layout == "blhd":
            out4 = out.permute((0, 2, 1, 3))
        else:
            viewed = out.view((b, h, shapes.queries, shapes.dim_v))
            assert viewed is not None
            out4 = viewed
        _Flash(ctx, plan, shapes, group).emit(q, k, v, mask, out4)
    ctx.fusion_notes.append({"group": kernel.node_names, "fused": True, "attention": True})
    return out


def _head_group(ctx: LoweringContext, s: _Shapes, mm: DType, pv: DType) -> int:
    """Heads per group: their kᵀ, v (double-buffered), q and output tiles fit the SBUF share."""
    key_tiles = cdiv(s.keys, ctx.pmax)
    per_head = (
        2 * (s.keys * mm.itemsize + key_tiles * s.dim_v * pv.itemsize)  # kᵀ, v
        + 4 * s.dim * mm.itemsize  # k, q staging rows
        + 2 * ctx.pmax * mm.itemsize  # qᵀ
        + 2 * s.dim_v * 4  # output tile
    )
    block = min(s.keys, ctx.limits.tile_n)
    working = BUFFERS * (2 * s.keys * 4 + block * (4 + pv.itemsize) + ctx.pmax * pv.itemsize)
    masks = ctx.limits.sbuf_bytes // 8  # the shared mask tiles (``_Flash.cached_masks``)
    budget = int(ctx.limits.sbuf_bytes * RESIDENT_SBUF_SHARE) - working - masks
    if per_head > budget:
        raise FusionFallback(
            f"one head needs {per_head} bytes per SBUF partition for kᵀ and v "
            f"({s.keys} keys), more than the {budget} there are"
        )
    return max(1, min(s.batch * s.heads, budget // per_head))


def _interleave(stages: list[Iterator[None]], window: int) -> None:
    """Run the generators to completion, ``window`` at a time, one stage of each in turn."""
    pending = list(stages)
    active, pending = pending[:window], pending[window:]
    while active:
        for gen in list(active):
            if next(gen, False) is False:  # finished
                active.remove(gen)
                if pending:
                    active.append(pending.pop(0))


def _rows(value: HbmValue, slots: _Slots, r0: int, rows: int) -> Any:
    """value[b0:b0+nb, h0:h0+g, r0:r0+rows, :] as rows on partitions: [rows, nb, g, cols]."""
    s0, s1, s2, s3 = value.strides
    offset = value.offset + slots.b0 * s0 + slots.h0 * s1 + r0 * s2
    sizes = (slots.nb, slots.g, value.shape[3])
    return hbm_ap(value, offset, rows, s2, sizes, (s0, s1, s3))


def _load_rows(ctx: LoweringContext, dst: Any, value: HbmValue, slots: _Slots, r0: int) -> None:
    """dst [rows, nb, g, cols] = ``_rows(value, ...)``: one load across the heads, or one per
    head where residency holds each head's rows in SBUF and not the heads together (q, k after
    a rotary embedding, which computes [B, H, S, D] a head at a time): on-chip copies instead
    of the values stored and moved back by a DMA of one descriptor per head and row."""
    rows = dst.shape[0]
    whole = _rows(value, slots, r0, rows)
    s0, s1, s2, s3 = value.strides
    per_head = []
    for bi, hi in slots.heads():
        offset = value.offset + (slots.b0 + bi) * s0 + (slots.h0 + hi) * s1 + r0 * s2
        head = hbm_ap(value, offset, rows, s2, (value.shape[3],), (s3,))
        per_head.append((dst[:, bi, hi, :], head))
    queues = ctx.queues
    if len(per_head) == 1 or queues.serves_on_chip(dst, whole):
        queues.load(dst, whole)
    elif all(queues.serves_on_chip(d, head) for d, head in per_head):
        for d, head in per_head:
            queues.load(d, head)
    else:
        queues.load(dst, whole)


@dataclass(frozen=True)
class _Slots:
    """A group of heads on chip together: batches b0..b0+nb, heads h0..h0+g of each."""

    b0: int
    nb: int
    h0: int
    g: int

    def heads(self) -> list[tuple[int, int]]:
        return [(bi, hi) for bi in range(self.nb) for hi in range(self.g)]


def _groups(s: _Shapes, per_group: int) -> list[_Slots]:
    """Whole batches together when all their heads fit, else heads of one batch."""
    if per_group >= s.heads:
        nb = min(s.batch, per_group // s.heads)
        return [_Slots(b0, n, 0, s.heads) for b0, n in chunks(s.batch, nb)]
    return [_Slots(b, 1, h0, g) for b in range(s.batch) for h0, g in chunks(s.heads, per_group)]


class _Flash:
    """The kernel's loops (module docstring)."""

    def __init__(self, ctx: LoweringContext, plan: AttentionPlan, s: _Shapes, group: int) -> None:
        self.ctx, self.plan, self.s, self.group = ctx, plan, s, group
        self.lim = ctx.limits
        self.pm = ctx.pmax
        self.block = min(s.keys, self.lim.tile_n)
        bank = ctx.config.psum.bytes_per_partition // self.lim.psum_banks
        self.bank_bytes = bank
        self.copy = Evacuator()
        self.kts = BufferRing(2)
        self.vs = BufferRing(2 * cdiv(s.keys, self.pm))  # one tile per 128 keys
        self.staging = BufferRing(4)
        self.q_rings = [BufferRing(2) for _ in range(2)]  # q rows, qᵀ
        # Mask tiles: up to MASKS_SHARED loaded per query tile (double-buffered across tiles),
        # within an eighth of SBUF, plus one per head in flight.
        fits = ctx.limits.sbuf_bytes // 8 // (s.keys * 4) // 2 - INTERLEAVE - 1
        self.cached_masks = max(0, min(MASKS_SHARED, fits))
        self.masks = BufferRing(2 * self.cached_masks + INTERLEAVE + 1)
        self.flags = BufferRing(2 * self.cached_masks + INTERLEAVE + 1)
        self.outs = BufferRing(2)
        # Every PSUM tile here fits one bank; three rings share the banks.
        depth = max(1, self.lim.psum_banks // 3)
        self.t_psum, self.s_psum, self.o_psum = (BufferRing(depth) for _ in range(3))
        self.scores, self.probs, self.pts = (BufferRing(BUFFERS) for _ in range(3))
        self.stats = BufferRing(2 * BUFFERS)
        self.accs, self.runs = BufferRing(BUFFERS), BufferRing(BUFFERS)

    # ---- on-chip operands ----------------------------------------------------------------------
    def _transposed(
        self, dst: Any, rows: Any, slots: _Slots, width: int, c0: int, dtype: DType
    ) -> None:
        """dst[:d, bi, hi, c0:c0+width] = rows[:width, bi, hi, :d]ᵀ for each head, by TensorE
        transposes (as many heads per PSUM bank as fit), one copy back per bank."""
        d = rows.shape[3]
        per_bank = max(1, self.bank_bytes // (self.pm * dtype.itemsize))
        for bi in range(slots.nb):
            for h0, n in chunks(slots.g, per_bank):
                ps = self.t_psum(
                    (d, n, width), dtype, lang.psum, max_shape=(self.pm, per_bank, self.pm)
                )
                for i in range(n):
                    nisa.nc_transpose(ps[:, i, :], rows[:width, bi, h0 + i, :])
                self.copy(dst[:d, bi, h0 : h0 + n, c0 : c0 + width], ps)

    def emit(
        self, q: HbmValue, k: HbmValue, v: HbmValue, mask: HbmValue | None, out: HbmValue
    ) -> None:
        s = self.s
        mm, pv = self.ctx.matmul_dtype(q.dtype), self.ctx.matmul_dtype(v.dtype)
        key_tiles = chunks(s.keys, self.pm)
        groups, query_tiles = _groups(s, self.group), chunks(s.queries, self.pm)
        split = self.ctx.split  # at LNC > 1: this core's head groups, or its query tiles
        by_groups = len(groups) >= split.cores
        for slots in split.mine(groups) if by_groups else groups:
            nb, g = slots.nb, slots.g
            kt = self.kts((s.dim, nb, g, s.keys), mm, lang.sbuf)
            vs = []
            for r0, rt in key_tiles:
                rows = self.staging(
                    (rt, nb, g, s.dim), mm, lang.sbuf, max_shape=(self.pm, nb, g, s.dim)
                )
                _load_rows(self.ctx, rows, k, slots, r0)
                self._transposed(kt, rows, slots, rt, r0, mm)
                vt = self.vs((self.pm, nb, g, s.dim_v), pv, lang.sbuf)
                _load_rows(self.ctx, vt[:rt], v, slots, r0)
                vs.append(vt)
            for q0, qw in query_tiles if by_groups else split.mine(query_tiles):
                self._query_tile(q, mask, out, slots, q0, qw, kt, vs, mm, pv)

    @staticmethod
    def _mask_rows(mask: HbmValue, slots: _Slots) -> dict[int, tuple[int, int]]:
        """The distinct mask rows the group's heads read: offset -> (batch, head) of one."""
        rows: dict[int, tuple[int, int]] = {}
        for bi, hi in slots.heads():
            b, h = slots.b0 + bi, slots.h0 + hi
            rows.setdefault(b * mask.strides[0] + h * mask.strides[1], (b, h))
        return rows

    def _mask_tile(self, mask: HbmValue, b: int, h: int, q0: int, qw: int) -> tuple[Any, Any]:
        """The [qw, keys] fp32 mask rows (masked positions MASKED) and the [qw, 1] flag
        'some key is kept' of each row."""
        s = self.s
        s0, s1, s2, s3 = mask.strides
        offset = mask.offset + b * s0 + h * s1 + q0 * s2
        m = self.masks((qw, s.keys), HW_FP32, lang.sbuf, max_shape=(self.pm, s.keys))
        self.ctx.queues.load(m, hbm_ap(mask, offset, qw, s2, (s.keys,), (s3,)))
        flag = self.flags((qw, 2), HW_FP32, lang.sbuf, max_shape=(self.pm, 2))
        kind = self.plan.mask_kind
        if kind == "add":
            nisa.tensor_reduce(flag[:, 1:2], ReduceOp.max, m)
            nisa.tensor_scalar(flag[:, 0:1], flag[:, 1:2], AluOp.is_gt, float("-inf"))
            nisa.tensor_scalar(m, m, AluOp.max, MASKED)
        else:  # a boolean mask: keep where true ('keep') or where false ('drop')
            if kind == "keep":
                nisa.tensor_scalar(m, m, AluOp.subtract, 1.0, op1=AluOp.multiply, operand1=-MASKED)
            else:
                nisa.tensor_scalar(m, m, AluOp.multiply, MASKED)
            nisa.tensor_reduce(flag[:, 1:2], ReduceOp.max, m)
            nisa.tensor_scalar(flag[:, 0:1], flag[:, 1:2], AluOp.is_gt, MASKED / 2)
        return m, flag[:, 0:1]

    def _query_tile(
        self,
        q: HbmValue,
        mask: HbmValue | None,
        out: HbmValue,
        slots: _Slots,
        q0: int,
        qw: int,
        kt: Any,
        vs: list[Any],
        mm: DType,
        pv: DType,
    ) -> None:
        s, pm = self.s, self.pm
        nb, g = slots.nb, slots.g
        rows = self.q_rings[0]((qw, nb, g, s.dim), mm, lang.sbuf, max_shape=(pm, nb, g, s.dim))
        _load_rows(self.ctx, rows, q, slots, q0)
        qt = self.q_rings[1]((s.dim, nb, g, qw), mm, lang.sbuf, max_shape=(s.dim, nb, g, pm))
        self._transposed(qt, rows, slots, qw, 0, mm)
        o = self.outs((qw, nb, g, s.dim_v), out.dtype, lang.sbuf, max_shape=(pm, nb, g, s.dim_v))
        # Mask rows shared by heads (a mask broadcast over heads, or over batch and heads) are
        # loaded once per query tile, up front when few; otherwise each head loads its own.
        shared: dict[int, tuple[Any, Any]] = {}
        if mask is not None and len(self._mask_rows(mask, slots)) <= self.cached_masks:
            for w, (b, h) in self._mask_rows(mask, slots).items():
                shared[w] = self._mask_tile(mask, b, h, q0, qw)

        def head(bi: int, hi: int) -> Iterator[None]:
            m = flag = None
            if mask is not None:
                b, h = slots.b0 + bi, slots.h0 + hi
                where = b * mask.strides[0] + h * mask.strides[1]
                m, flag = shared.get(where) or self._mask_tile(mask, b, h, q0, qw)
            values = [t[:, bi, hi, :] for t in vs]
            yield from self._head(
                qt[:, bi, hi, :], kt[:, bi, hi, :], values, m, flag, o[:, bi, hi, :], qw, pv
            )

        _interleave([head(bi, hi) for bi, hi in slots.heads()], INTERLEAVE)
        self.ctx.queues.store(_rows(out, slots, q0, qw), o)

    # ---- one head of one query tile -------------------------------------------------------------
    def _head(
        self, qt: Any, kt: Any, vs: Any, m: Any, flag: Any, o: Any, qw: int, pv: DType
    ) -> Iterator[None]:
        """Emit one head, yielding between its dependent stages (``_query_tile`` interleaves
        heads, so one head's softmax runs while TensorE computes the next one's scores)."""
        s, pm = self.s, self.pm
        blocks = chunks(s.keys, self.block)
        prev: Any = None
        acc = run = None
        if len(blocks) > 1:
            acc = self.accs((qw, s.dim_v), HW_FP32, lang.sbuf, max_shape=(pm, s.dim_v))
            run = self.runs((qw, 1), HW_FP32, lang.sbuf, max_shape=(pm, 1))
        for k0, kb in blocks:
            s_ps = self.s_psum((qw, kb), HW_FP32, lang.psum, max_shape=(pm, self.block))
            nisa.nc_matmul(s_ps, qt[:, :qw], kt[:, k0 : k0 + kb])
            x, scale = s_ps, self.plan.scale
            if m is not None:  # scale and mask on the PSUM evacuation
                x = self.scores((qw, kb), HW_FP32, lang.sbuf, max_shape=(pm, self.block))
                nisa.scalar_tensor_tensor(
                    x, s_ps, AluOp.multiply, scale, AluOp.add, m[:, k0 : k0 + kb]
                )
                scale = 1.0
            yield
            st = self.stats((qw, 4), HW_FP32, lang.sbuf, max_shape=(pm, 4))
            neg, alpha, sums = st[:, 0:1], st[:, 1:2], st[:, 2:3]
            if prev is None and scale == 1.0:
                nisa.tensor_reduce(neg, ReduceOp.max, x, negate=True)
            else:
                nisa.tensor_reduce(st[:, 3:4], ReduceOp.max, x, negate=True)
            if prev is None and scale != 1.0:
                nisa.tensor_scalar(neg, st[:, 3:4], AluOp.multiply, scale)
            elif prev is not None:  # -scale * max(m_old, m_block) = min(-scale * m_old, ...)
                nisa.scalar_tensor_tensor(
                    neg, st[:, 3:4], AluOp.multiply, scale, AluOp.min, prev[:, 0:1]
                )
                nisa.activation(alpha, Act.exp, prev[:, 0:1], bias=neg, scale=-1.0)
            p = self.probs((qw, kb), pv, lang.sbuf, max_shape=(pm, self.block))
            nisa.activation_reduce(p, Act.exp, x, bias=neg, scale=scale, reduce_res=sums)
            yield
            pv_ps = yield from self._p_times_v(p, vs, qw, k0, kb, pv)
            if acc is None:  # one block: the output straight from PSUM
                self._finish(o, pv_ps, sums, flag)
                return
            if prev is None:
                nisa.tensor_copy(run, sums)
                self.copy(acc, pv_ps)
            else:
                nisa.scalar_tensor_tensor(run, run, AluOp.multiply, alpha, AluOp.add, sums)
                nisa.scalar_tensor_tensor(acc, acc, AluOp.multiply, alpha, AluOp.add, pv_ps)
            prev = st
            yield
        assert acc is not None and run is not None
        self._finish(o, acc, run, flag)

    @staticmethod
    def _finish(o: Any, acc: Any, total: Any, flag: Any) -> None:
        """o = acc / total (times the row's 'some key kept' flag)."""
        if flag is None:
            nisa.tensor_scalar(o, acc, AluOp.divide, total)
        else:
            nisa.tensor_scalar(o, acc, AluOp.divide, total, op1=AluOp.multiply, operand1=flag)

    def _p_times_v(
        self, p: Any, vs: Any, qw: int, k0: int, kb: int, pv: DType
    ) -> Generator[None, None, Any]:
        """p[qw, kb] @ v[k0:k0+kb] into PSUM through pᵀ (TensorE transposes, several per bank);
        yields between the transposes and the matmuls."""
        pm = self.pm
        subs = chunks(kb, pm)
        most = cdiv(self.block, pm)
        pt = self.pts((pm, len(subs), qw), pv, lang.sbuf, max_shape=(pm, most, pm))
        per_bank = max(1, self.bank_bytes // (pm * pv.itemsize))
        for g0 in range(0, len(subs), per_bank):
            group = subs[g0 : g0 + per_bank]
            ps = self.t_psum((pm, len(group), qw), pv, lang.psum, max_shape=(pm, per_bank, pm))
            for i, (c0, cw) in enumerate(group):
                nisa.nc_transpose(ps[:cw, i, :], p[:, c0 : c0 + cw])
            full = sum(1 for _, cw in group if cw == pm)
            if full:
                self.copy(pt[:, g0 : g0 + full, :], ps[:, 0:full, :])
            if full < len(group):
                cw = group[-1][1]
                self.copy(pt[:cw, g0 + full, :], ps[:cw, full, :])
        yield
        out = self.o_psum((qw, self.s.dim_v), HW_FP32, lang.psum, max_shape=(pm, self.s.dim_v))
        for c, (c0, cw) in enumerate(subs):
            nisa.nc_matmul(out, pt[:cw, c, :], vs[(k0 + c0) // pm][:cw, :], accumulate=c > 0)
        return out

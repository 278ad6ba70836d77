"""The MLP as one kernel: x @ W1 (+ b1) -> activation -> @ W2 (+ b2) -> epilogue, hidden on chip.

A transformer's MLP multiplies the hidden activations by an up-projection W1 [K, F], applies an
elementwise activation (GELU), and multiplies the result h [M, F] by a down-projection W2 [F, N].
Lowered as two matmuls, h goes to HBM and comes back; worse, the second matmul reads it once
per block of W2's columns when hᵀ of every row does not fit SBUF beside its weight blocks. The
Neuron compiler keeps h on chip. ``MlpTiler`` does the same, with both weights prepared at
compile time (``passes.prepare_constants``) and streamed (``tiling.weights``):

- **hᵀ computed directly**: the first product runs with W1's columns stationary and xᵀ moving,
  ``hᵀ[f, t] = W1[:, f]ᵀ · xᵀ[:, t]`` (TensorE: ``dst[M, N] = stationary[K, M]ᵀ @ moving[K,
  N]``), so each PSUM tile is [128 of F, up to 512 tokens]: F on partitions, the layout the
  second product's stationary operand needs, with no transpose. The bias b1 is then one value
  per partition (an operand of ``tensor_scalar``), the activation's steps run on the tile as it
  leaves PSUM, and the result is cast into hᵀ (the cast the second matmul's load would do);
- **the second product** reads its stationary hᵀ from that tile for every block of W2 and
  applies its own epilogue (the residual add) as ``MatmulTiler`` does;
- **SBUF decides what stays**: xᵀ and hᵀ of a group of rows take at most
  ``INTERMEDIATE_SBUF_SHARE`` of what the weight ring leaves of SBUF, and no more than the
  kernel's own working tiles leave of it (``working_bytes``); the rows go in as many
  groups as that takes, and both weights stream once per group (the DMA that the fit costs,
  real and counted). A row block of 128 tokens that does not fit alone is refused
  (``MlpDoesNotFit``): the caller lowers the two matmuls apart, h through HBM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwsim import lang
from hwsim.bridge.context import LoweringContext
from hwsim.bridge.tiling.matmul import KOperand, MatmulTiler, Operand
from hwsim.bridge.tiling.space import hbm_ap
from hwsim.bridge.values import HbmValue, PreparedMatrix
from hwsim.dtypes import DType
from hwsim.kernels.ops import AluOp
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, TransposedLoader, cdiv, chunks

#: Most of SBUF per partition (of what the weight ring and row pool leave) the on-chip xᵀ and hᵀ
#: of one group of rows may take; the rest is for the kernel's working tiles (PSUM evacuation,
#: activation steps, the second product's epilogue) and values other ops keep resident. A tiling
#: choice, not a hardware rule.
INTERMEDIATE_SBUF_SHARE = 1 / 2


class MlpDoesNotFit(ValueError):
    """One row block's xᵀ and hᵀ exceed the kernel's share of SBUF (the message says by how
    much): the MLP cannot be one kernel on this config."""


#: ``run(first, second, shape) -> tile``: the activation's steps on one evacuated [F, tokens]
#: tile (``second``: a gated MLP's second product over the same tile, else None).
Activation = Callable[[Operand, Operand | None, tuple[int, int]], Operand]


@dataclass(frozen=True)
class MlpPlan:
    """How rows go through the kernel: ``groups`` of row blocks, all of a group's xᵀ and hᵀ in
    SBUF at once (``bytes_per_row_block`` per partition each)."""

    groups: list[list[tuple[int, int]]]
    bytes_per_row_block: int
    budget_bytes: int


def working_bytes(ctx: LoweringContext, k: int, n: int, f: int, rings: int) -> int:
    """Bytes per partition of the kernel's own working tiles besides xᵀ and hᵀ: ``rings``
    double-buffered fp32 rings of one PSUM bank's columns (the evacuation, the activation's and
    the epilogue's steps and operands, their casts), the result ring, the transposing loader's
    staging rows of K (fp32), b1's columns and b2's row."""
    lim = ctx.limits
    bank = lim.tile_n * 4
    staging = TransposedLoader.STAGING_BUFFERS * k * 4
    return (2 * rings + ctx.options.buffers) * bank + staging + cdiv(f, lim.tile_k) * 4 + n * 4


def plan_rows(ctx: LoweringContext, m: int, k: int, f: int, itemsize: int, working: int) -> MlpPlan:
    """Row groups whose xᵀ [K tiles, rows] and hᵀ [F tiles, rows] fit the kernel's share of
    SBUF, less its ``working`` bytes per partition (``working_bytes``)."""
    lim = ctx.limits
    per_row_block = (cdiv(k, lim.tile_k) + cdiv(f, lim.tile_k)) * lim.tile_m * itemsize
    budget = min(int(lim.sbuf_bytes * INTERMEDIATE_SBUF_SHARE), lim.sbuf_bytes - working)
    fits = max(0, budget) // per_row_block
    if fits == 0:
        raise MlpDoesNotFit(
            f"xᵀ and hᵀ of one block of {lim.tile_m} rows take {per_row_block} bytes per "
            f"partition, past the MLP kernel's {budget} (INTERMEDIATE_SBUF_SHARE of SBUF, "
            f"less its {working} bytes of working tiles)"
        )
    rows = chunks(m, lim.tile_m)
    groups = [rows[i : i + fits] for i in range(0, len(rows), fits)]
    return MlpPlan(groups, per_row_block, budget)


class MlpTiler(MatmulTiler):
    """Emits out = epilogue(act(x @ W1 + b1) @ W2 + b2) (module docstring)."""

    def emit_mlp(
        self,
        x: HbmValue,
        w1: PreparedMatrix,
        bias1: HbmValue | None,
        activation: Activation,
        hidden_dtype: DType,
        w2: PreparedMatrix,
        bias2: HbmValue | None,
        out: HbmValue,
        plan: MlpPlan,
        wu: PreparedMatrix | None = None,
    ) -> None:
        """The whole MLP; ``hidden_dtype``: the dtype the activation's result is evacuated in
        before the cast into hᵀ; ``ctx.epilogue`` (if set) runs on the second product's tiles;
        ``wu``: a gated MLP's second up-projection (W1's shape and blocks), whose product
        ``(x @ Wu)ᵀ`` is computed per tile beside W1's and given to the activation."""
        lim = self.lim
        stream = self.ctx.weights
        assert stream is not None and w1.layout is not None and w2.layout is not None
        k, f = x.shape[1], w1.shape[1]
        if not self._psum_used:  # as _emit_streamed: what the loaders' PSUM banks leave
            self.psum = BufferRing(max(2, lim.psum_banks - 4))
        self._psum_used = True
        bias_columns = None if bias1 is None else self._bias_columns(bias1, f)
        lhs = KOperand(x.transpose(0, 1), self.dtype)
        k_tiles, f_tiles = cdiv(k, lim.tile_k), cdiv(f, lim.tile_k)
        evacuated, evacuated_second = BufferRing(2), BufferRing(2)
        most = max(sum(mt for _, mt in group) for group in plan.groups)
        # One xᵀ and one hᵀ for every group (allocated once: no group waits for the bytes of
        # the last one's tiles to be given back, and SBUF does not fragment between groups).
        # xᵀ already on chip (a norm's prologue, ``tiling.prologue``) is read in place.
        on_chip = self.transposed(lhs)
        x_t: Operand | None = None
        if on_chip is None:
            x_t = lang.ndarray((lim.tile_k, k_tiles, most), self.dtype, lang.sbuf, name="mlp_xT")
        h_t = lang.ndarray((lim.tile_k, f_tiles, most), self.dtype, lang.sbuf, name="mlp_hT")
        for group in self.ctx.split.mine(plan.groups):  # at LNC > 1: this core's row groups
            g0 = group[0][0]
            rows = sum(mt for _, mt in group)
            if on_chip is not None:
                x_t = on_chip[:, :, g0 : g0 + rows]
            for m0, mt in group if on_chip is None else ():
                self._load(lhs, None, 0, k, m0, mt, into=x_t[:, :, m0 - g0 : m0 - g0 + mt])  # type: ignore[index]
            assert x_t is not None
            for n0, width in w1.layout.blocks():
                block = stream.load(w1, n0)
                block_u = None if wu is None else stream.load(wu, n0)
                for c0, fw in chunks(width, lim.tile_k):
                    ft = (n0 + c0) // lim.tile_k
                    bias = None if bias_columns is None else bias_columns[:fw, ft : ft + 1]
                    for t0, tn in chunks(rows, lim.tile_n):
                        acc = self._up_product(block, x_t, k, width, c0, fw, t0, tn)
                        first = evacuated((fw, tn), hidden_dtype, lang.sbuf)
                        if bias is None:
                            self.evacuate(first, acc)
                        else:
                            nisa.tensor_scalar(first, acc, AluOp.add, bias)
                        second = None
                        if block_u is not None:
                            acc_u = self._up_product(block_u, x_t, k, width, c0, fw, t0, tn)
                            second = evacuated_second((fw, tn), hidden_dtype, lang.sbuf)
                            self.evacuate(second, acc_u)
                        result = activation(first, second, (fw, tn))
                        nisa.tensor_copy(h_t[:fw, ft, t0 : t0 + tn], result)
            self._down(h_t, g0, group, w2, bias2, out)

    def _up_product(
        self,
        block: Operand,
        x_t: Operand,
        k: int,
        width: int,
        c0: int,
        fw: int,
        t0: int,
        tn: int,
    ) -> Operand:
        """PSUM [fw of F, tn tokens] = block's columns c0.. (stationary)ᵀ @ xᵀ (moving)."""
        acc = self.psum((fw, tn), lang.float32, lang.psum)
        for j, (_, w) in enumerate(chunks(k, self.lim.tile_k)):
            stationary = block[:w, j * width + c0 : j * width + c0 + fw]
            nisa.nc_matmul(acc, stationary, x_t[:w, j, t0 : t0 + tn], accumulate=j > 0)
        return acc

    def _down(
        self,
        h_t: Operand,
        g0: int,
        group: list[tuple[int, int]],
        w2: PreparedMatrix,
        bias: HbmValue | None,
        out: HbmValue,
    ) -> None:
        """out[rows of ``group``] = hᵀ[:, :, rows]ᵀ @ W2 (+ bias), its epilogue, stored."""
        lim = self.lim
        stream = self.ctx.weights
        assert stream is not None and w2.layout is not None
        f, n = w2.shape
        rows = sum(mt for _, mt in group)
        bias_rows = self._bias_rows(bias, rows, n)
        pieces = chunks(f, lim.tile_k)
        for n0, width in w2.layout.blocks():
            block = stream.load(w2, n0)
            for m0, mt in group:
                stationary = h_t[:, :, m0 - g0 : m0 - g0 + mt]
                for c0, nt in chunks(width, lim.tile_n):
                    acc = self.psum((mt, nt), lang.float32, lang.psum)
                    for j, (_, w) in enumerate(pieces):
                        columns = block[:w, j * width + c0 : j * width + c0 + nt]
                        nisa.nc_matmul(acc, stationary[:w, j, :], columns, accumulate=j > 0)
                    col = n0 + c0
                    row = None if bias_rows is None else bias_rows[:mt, col : col + nt]
                    self._epilogue(acc, out, bias, 1.0, 1.0, m0, mt, col, nt, row)

    def _bias_columns(self, bias: HbmValue, f: int) -> Operand:
        """b1 [F] (a row broadcast over the rows) as SBUF [128, F tiles]: F tile j's values on
        the partitions of column j, the per-partition operand of its evacuation; one DMA of the
        whole tiles, one of the rest."""
        lim = self.lim
        assert bias.ndim == 2 and bias.strides[0] == 0  # checked by the caller
        step = bias.strides[1]
        columns = lang.ndarray((lim.tile_k, cdiv(f, lim.tile_k)), lang.float32, lang.sbuf)
        full = f // lim.tile_k
        if full:
            src = hbm_ap(bias, bias.offset, lim.tile_k, step, (full,), (lim.tile_k * step,))
            self.ctx.queues.load(columns[:, 0:full], src)
        if f % lim.tile_k:
            w = f % lim.tile_k
            src = hbm_ap(bias, bias.offset + full * lim.tile_k * step, w, step, (1,), (1,))
            self.ctx.queues.load(columns[:w, full : full + 1], src)
        return columns

"""Two-layer MLP: y[T, E] = act(x[T, D] @ w1[D, F]) @ w2[F, E], act = GELU, SiLU or ReLU.

Layout (what keeps every matmul at full tile size and needs no transpose in the middle):

- x^T [D, T] comes on chip by ``dma_transpose`` or TensorE transposes (the cheaper on the
  config); w1 [D, F] and w2 [F, E] are loaded once and stay in SBUF (D and F on partitions).
- layer 1 computes h^T = w1^T x^T per [128 features, <= 512 tokens] tile: stationary w1 tile
  [D_k, 128], moving x^T [D_k, tokens], accumulated over D in one PSUM bank; ScalarE applies the
  activation while it moves h^T from PSUM to SBUF (one instruction).
- layer 2 computes y = h w2 per [128 tokens, <= 512 outputs] tile: stationary h^T [F_k, 128
  tokens] (already the layout TensorE wants), moving w2 [F_k, outputs], accumulated over F.

Token blocks of up to 512 are double-buffered; loads are triggered by Sync, stores by GpSimdE.
"""

from __future__ import annotations

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile
from hwsim.library.common import (
    BufferRing,
    DmaQueues,
    Evacuator,
    TransposedLoader,
    cdiv,
    chunks,
    limits,
    require,
)

ACTIVATIONS = {
    "gelu": lang.ActivationFunction.gelu,
    "gelu_tanh": lang.ActivationFunction.gelu_apprx_tanh,
    "silu": lang.ActivationFunction.silu,
    "relu": lang.ActivationFunction.relu,
}
#: Share of SBUF per partition the resident weights may take.
WEIGHTS_SBUF_SHARE = 0.5
#: Share of SBUF weights plus working tiles may take (the rest: allocation granules).
WORKING_SBUF_SHARE = 0.9


@lang.kernel
def mlp(x, w1, w2, activation="gelu"):
    """y = act(x @ w1) @ w2 with x [T, D], w1 [D, F], w2 [F, E] (one float dtype), act one of
    'gelu' (erf form, torch's default), 'gelu_tanh', 'silu', 'relu'. y has x's dtype; matmuls
    accumulate in fp32, h is held in x's dtype.

    Any T, D, F, E, as long as w1 and w2 fit in half of SBUF ((ceil(D/128) * F + ceil(F/128) *
    E) * itemsize bytes per partition, e.g. D = E = 1024, F = 3072 in bf16 on trn2) and, with
    two blocks of 512 tokens of x^T and h^T, in 90% of it.
    """
    _check(x, w1, w2, activation)
    t, d = x.shape
    f, e = w2.shape
    lim = limits()
    dt = x.dtype
    y = lang.ndarray((t, e), dt, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    loader = TransposedLoader(queues)
    w1_sb = _resident(w1, queues)
    w2_sb = _resident(w2, queues)
    banks = lim.psum_banks - (0 if loader.use_dma(x) else loader.psum_buffers)
    h_psum, y_psum = BufferRing(max(1, banks // 2)), BufferRing(max(1, banks - banks // 2))
    xt_ring, ht_ring, y_ring = BufferRing(2), BufferRing(2), BufferRing(2)
    evacuate = Evacuator(("vector",))  # ScalarE is busy with the activations
    d_tiles, f_tiles = chunks(d, lim.tile_k), chunks(f, lim.tile_k)
    func = ACTIVATIONS[activation]
    for t0, tb in chunks(t, lim.tile_n):
        xt = xt_ring((lim.tile_k, len(d_tiles), tb), dt, lang.sbuf)
        loader.load(xt, x, t0, tb, 0, d)
        ht = ht_ring((lim.tile_k, len(f_tiles), tb), dt, lang.sbuf)
        for fj, (f0, fw) in enumerate(f_tiles):  # layer 1: h^T[f tile, tokens]
            ps = h_psum((fw, tb), lang.float32, lang.psum)
            for j, (_, w) in enumerate(d_tiles):
                nisa.nc_matmul(ps, w1_sb[:w, j, f0 : f0 + fw], xt[:w, j, :], accumulate=j > 0)
            nisa.activation(ht[:fw, fj, :], func, ps)
        for s0, sw in chunks(tb, lim.tile_m):  # layer 2: y[token tile, outputs]
            out_rows = y_ring((sw, e), dt, lang.sbuf)
            for e0, ew in chunks(e, lim.tile_n):
                ps = y_psum((sw, ew), lang.float32, lang.psum)
                for fj, (_, fw) in enumerate(f_tiles):
                    nisa.nc_matmul(
                        ps,
                        ht[:fw, fj, s0 : s0 + sw],
                        w2_sb[:fw, fj, e0 : e0 + ew],
                        accumulate=fj > 0,
                    )
                evacuate(out_rows[:, e0 : e0 + ew], ps)
            queues.store(y[t0 + s0 : t0 + s0 + sw, :], out_rows)
    return y


def _check(x: Tile, w1: Tile, w2: Tile, activation: str) -> None:
    require(
        activation in ACTIVATIONS,
        "mlp",
        f"activation={activation!r}; choose one of {', '.join(sorted(ACTIVATIONS))}",
    )
    require(
        x.ndim == 2 and w1.ndim == 2 and w2.ndim == 2,
        "mlp",
        f"x {x.shape}, w1 {w1.shape}, w2 {w2.shape} must all be 2-D",
    )
    require(
        x.shape[1] == w1.shape[0] and w1.shape[1] == w2.shape[0],
        "mlp",
        f"shapes do not chain: x [T, D={x.shape[1]}], w1 [D={w1.shape[0]}, F={w1.shape[1]}], "
        f"w2 [F={w2.shape[0]}, E]",
    )
    require(
        x.dtype == w1.dtype == w2.dtype and x.dtype.is_float,
        "mlp",
        f"x, w1, w2 must share one float dtype, got {x.dtype.name}, {w1.dtype.name}, "
        f"{w2.dtype.name}",
    )
    lim = limits()
    isz = x.dtype.itemsize
    (t, d), (f, e) = x.shape, w2.shape
    d_tiles, f_tiles = cdiv(d, lim.tile_k), cdiv(f, lim.tile_k)
    weights = (d_tiles * f + f_tiles * e) * isz
    require(
        weights <= lim.sbuf_bytes * WEIGHTS_SBUF_SHARE,
        "mlp",
        f"w1 and w2 need {weights} bytes per SBUF partition to stay resident, more than half of "
        f"the {lim.sbuf_bytes} there are; split F into chunks and sum the partial outputs",
    )
    # two token blocks in flight: x^T, h^T, output rows, and x row blocks being transposed
    working = 2 * (d_tiles + f_tiles) * min(t, lim.tile_n) * isz + 2 * e * isz + 4 * d * isz
    require(
        weights + working <= lim.sbuf_bytes * WORKING_SBUF_SHARE,
        "mlp",
        f"weights ({weights} B) and two token blocks of activations ({working} B) need more than "
        f"{WORKING_SBUF_SHARE:.0%} of the {lim.sbuf_bytes} bytes per SBUF partition; reduce F",
    )


def _resident(w: Tile, queues: DmaQueues) -> Tile:
    """w [R, C] in SBUF as [tile_k, R tiles, C] (rows on partitions), one DMA per row tile."""
    lim = limits()
    rows, cols = w.shape
    tiles = chunks(rows, lim.tile_k)
    sb = lang.ndarray((lim.tile_k, len(tiles), cols), w.dtype)
    for j, (r0, r) in enumerate(tiles):
        queues.load(sb[:r, j, :], w[r0 : r0 + r, :], engine=queues.store_engine)
    return sb

"""Normalisation over the last axis: ``layernorm`` and ``rmsnorm``, rows on partitions.

Both load gamma (and beta) once, replicated on every partition by one DMA with a zero
partition stride, and keep them in SBUF; per row tile of up to 128 rows:

- layernorm: VectorE ``bn_stats`` over chunks of <= 512 columns (``bn_stats_fmax`` [S16]) and
  ``bn_aggr`` give mean and variance; ScalarE ``activation(rsqrt, bias=eps)`` gives 1/std and
  ``activation(identity, scale=1/std, bias=-mean/std)`` normalises in one pass; VectorE
  multiplies by gamma and GpSimdE adds beta (VectorE on NeuronCore-v2, where the two share the
  SBUF port [S1]).
- rmsnorm: ScalarE ``activation_reduce(square)`` gives the sum of squares and
  ``activation(rsqrt, scale=1/D, bias=eps)`` 1/rms; one VectorE ``scalar_tensor_tensor``
  computes (x * 1/rms) * gamma.

Statistics are fp32; the output has x's dtype. Row tiles are multi-buffered; loads are triggered
by the Sync engine, stores by GpSimdE on their own queue.
"""

from __future__ import annotations

from hwsim import lang
from hwsim.isa.compute_base import BN_STATS_FMAX
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile
from hwsim.library.common import (
    BufferRing,
    DmaQueues,
    Operand,
    chunks,
    limits,
    partition_broadcast,
    require,
    row_buffers,
)

BN_STATS_WIDTH, BN_AGGR_WIDTH = 6, 2


def _check(kernel: str, x: Tile, params: dict[str, Tile], per_buffer: int, fixed: int) -> int:
    """Check shapes and dtypes; return the row tiles in flight (``row_buffers``)."""
    require(x.ndim == 2, kernel, f"x must be 2-D [rows, features], got shape {x.shape}")
    require(x.dtype.is_float, kernel, f"x must be a float tensor, not {x.dtype.name}")
    d = x.shape[1]
    for name, param in params.items():
        require(
            param.shape == (d,) and param.dtype.is_float,
            kernel,
            f"{name} must be a float vector of shape ({d},), got {param.shape} {param.dtype.name}",
        )
    return row_buffers(kernel, d, per_buffer, fixed)


def _replicated(vector: Tile, queues: DmaQueues) -> Tile:
    """vector [D] on every partition: an SBUF [pmax, D] tile, by one broadcasting DMA."""
    pmax = limits().pmax
    tile = lang.ndarray((pmax, vector.shape[0]), vector.dtype)
    queues.load(tile, partition_broadcast(vector, pmax))
    return tile


def _constant(value: float) -> Tile:
    """A [pmax, 1] fp32 tile holding ``value`` (activation biases are per-partition tiles)."""
    tile = lang.ndarray((limits().pmax, 1), lang.float32)
    nisa.memset(tile, value)
    return tile


@lang.kernel
def layernorm(x, gamma, beta, eps=1e-5):
    """out[R, D] = (x - mean) / sqrt(var + eps) * gamma + beta, statistics over the last axis.

    x [R, D] (fp32, bf16 or fp16), gamma and beta [D]. Any R; D up to what fits three-quarters
    of SBUF double-buffered (D * (2 * (2 * itemsize + 4) + 2 * itemsize) bytes: 5,376 fp32 or
    8,601 bf16 features on trn2).
    """
    isz = x.dtype.itemsize  # per row tile: x, normalised fp32, output; gamma and beta once
    buffers = _check("layernorm", x, {"gamma": gamma, "beta": beta}, 2 * isz + 4, 2 * isz)
    rows, d = x.shape
    lim = limits()
    out = lang.ndarray((rows, d), x.dtype, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    gamma_b, beta_b = _replicated(gamma, queues), _replicated(beta, queues)
    eps_t = _constant(eps)
    add_engine = "vector" if lang.config().sbuf.vector_gpsimd_share_access else "gpsimd"
    x_ring, xn_ring, o_ring, st_ring = (BufferRing(buffers) for _ in range(4))
    pieces = chunks(d, BN_STATS_FMAX)
    for r0, p in chunks(rows, lim.pmax):
        xt = x_ring((p, d), x.dtype, lang.sbuf)
        queues.load(xt, x[r0 : r0 + p, :])
        stats = st_ring((p, len(pieces) * BN_STATS_WIDTH + 4), lang.float32, lang.sbuf)
        _mean_rstd(stats, xt, pieces, eps_t)
        mean_var = stats[:, len(pieces) * BN_STATS_WIDTH :]  # mean, var, 1/std, -mean/std
        xn = xn_ring((p, d), lang.float32, lang.sbuf)
        nisa.activation(
            xn,
            lang.ActivationFunction.identity,
            xt,
            bias=mean_var[:, 3:4],
            scale=mean_var[:, 2:3],
        )
        nisa.tensor_tensor(xn, xn, gamma_b[:p, :], lang.AluOp.multiply)
        o = o_ring((p, d), x.dtype, lang.sbuf)
        nisa.tensor_tensor(o, xn, beta_b[:p, :], lang.AluOp.add, engine=add_engine)
        queues.store(out[r0 : r0 + p, :], o)
    return out


def _mean_rstd(stats: Operand, xt: Operand, pieces: list[tuple[int, int]], eps: Tile) -> None:
    """stats[:, -4:] = (mean, var, 1/sqrt(var + eps), -mean/sqrt(var + eps)) per row."""
    p = xt.shape[0]
    for i, (c0, w) in enumerate(pieces):
        nisa.bn_stats(stats[:, i * BN_STATS_WIDTH : (i + 1) * BN_STATS_WIDTH], xt[:, c0 : c0 + w])
    tail = len(pieces) * BN_STATS_WIDTH
    nisa.bn_aggr(stats[:, tail : tail + BN_AGGR_WIDTH], stats[:, 0:tail])
    mean, var = stats[:, tail : tail + 1], stats[:, tail + 1 : tail + 2]
    rstd, shift = stats[:, tail + 2 : tail + 3], stats[:, tail + 3 : tail + 4]
    nisa.activation(rstd, lang.ActivationFunction.rsqrt, var, bias=eps[:p, :])
    nisa.tensor_scalar(
        shift, mean, lang.AluOp.multiply, rstd, op1=lang.AluOp.multiply, operand1=-1.0
    )


@lang.kernel
def rmsnorm(x, gamma, eps=1e-6):
    """out[R, D] = x / sqrt(mean(x^2) + eps) * gamma over the last axis.

    x [R, D] (fp32, bf16 or fp16), gamma [D]. Any R; D up to what fits three-quarters of SBUF
    double-buffered (D * 5 * itemsize bytes: 8,601 fp32 or 17,203 bf16 features on trn2).
    """
    isz = x.dtype.itemsize  # per row tile: x and the output; gamma once
    buffers = _check("rmsnorm", x, {"gamma": gamma}, 2 * isz, isz)
    rows, d = x.shape
    lim = limits()
    out = lang.ndarray((rows, d), x.dtype, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    gamma_b = _replicated(gamma, queues)
    eps_t = _constant(eps)
    x_ring, o_ring, st_ring = BufferRing(buffers), BufferRing(buffers), BufferRing(buffers)
    for r0, p in chunks(rows, lim.pmax):
        xt = x_ring((p, d), x.dtype, lang.sbuf)
        queues.load(xt, x[r0 : r0 + p, :])
        o = o_ring((p, d), x.dtype, lang.sbuf)
        st = st_ring((p, 2), lang.float32, lang.sbuf)  # sum of squares, 1/rms
        # the squares themselves are not needed: o is scratch until the last instruction
        nisa.activation_reduce(o, lang.ActivationFunction.square, xt, reduce_res=st[:, 0:1])
        nisa.activation(
            st[:, 1:2],
            lang.ActivationFunction.rsqrt,
            st[:, 0:1],
            bias=eps_t[:p, :],
            scale=1.0 / d,
        )
        nisa.scalar_tensor_tensor(
            o, xt, lang.AluOp.multiply, st[:, 1:2], lang.AluOp.multiply, gamma_b[:p, :]
        )
        queues.store(out[r0 : r0 + p, :], o)
    return out

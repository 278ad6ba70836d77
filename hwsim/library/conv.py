"""3x3 convolution (stride 1, padding 1) as 9 shifted matmuls accumulating in PSUM.

Channels go on partitions. Each image is loaded once into a zero-padded SBUF tile
[C_in, H + 2, W + 2]; for output rows [h0, h0 + rows) and output channels [co0, co0 + 128):

    out[co, h, w] = sum over ci tiles, dy, dx of  w[co, ci, dy, dx] * xpad[ci, h + dy, w + dx]

is one accumulation group of 9 x (C_in tiles) ``nc_matmul``: stationary w_tap^T [C_in, C_out]
(the weights, transposed once on TensorE into [ci, tap, co] layout), moving the shifted window
xpad[ci, h0 + dy : h0 + dy + rows, dx : dx + W] (a 2-D strided free pattern, rows * W <= 512).
ScalarE evacuates PSUM with the per-channel bias fused (``activation(identity, bias=b[co])``).
"""

from __future__ import annotations

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.lang.tiles import Tile
from hwsim.library.common import (
    BufferRing,
    DmaQueues,
    Operand,
    chunks,
    column,
    limits,
    require,
)

TAPS = 9


@lang.kernel
def conv2d_3x3(x, w, bias=None):
    """out[N, C_out, H, W] = conv2d(x[N, C_in, H, W], w[C_out, C_in, 3, 3], padding=1) + bias.

    NCHW like torch; x, w (and bias [C_out]) in one float dtype; the output has x's dtype and
    accumulates in fp32. Any N, C_in, C_out (tiled by 128), H; W <= 512 (one output row must
    fit a PSUM bank); the padded image (ceil(C_in/128) * (H + 2) * (W + 2) elements per
    partition) must fit in a quarter of SBUF and the weights (9 * ceil(C_in/128) * C_out
    elements per partition, plus one natural-layout slab) in half of it (C_in = C_out = 768
    in bf16 on trn2).
    """
    n, c_in, h, wd, c_out = _check(x, w, bias)
    lim = limits()
    dt = x.dtype
    out = lang.ndarray((n, c_out, h, wd), dt, buffer=lang.hbm, name="out")
    queues = DmaQueues()
    ci_tiles, co_tiles = chunks(c_in, lim.tile_k), chunks(c_out, lim.tile_m)
    w_taps = _weights(w, ci_tiles, co_tiles, queues)  # [ci, ci tile, tap, c_out]
    bias_sb = _bias(bias, co_tiles, queues)
    rows_per_group = max(1, min(h, lim.tile_n // wd))
    xpad_ring = BufferRing(2)
    o_ring = BufferRing(2)
    acc_ring = BufferRing(max(2, lim.psum_banks // 2))
    for img in range(n):
        xpad = xpad_ring((lim.tile_k, len(ci_tiles), h + 2, wd + 2), dt, lang.sbuf)
        _load_padded(xpad, x, img, ci_tiles, queues)
        for co_i, (co0, cw) in enumerate(co_tiles):
            o = o_ring((cw, h, wd), dt, lang.sbuf)
            for h0, rows in chunks(h, rows_per_group):
                ps = acc_ring((cw, rows, wd), lang.float32, lang.psum)
                steps = [(ci_i, tap) for ci_i in range(len(ci_tiles)) for tap in range(TAPS)]
                for i, (ci_i, tap) in enumerate(steps):
                    dy, dx = divmod(tap, 3)
                    cr = ci_tiles[ci_i][1]
                    nisa.nc_matmul(
                        ps,
                        w_taps[:cr, ci_i, tap, co0 : co0 + cw],
                        xpad[:cr, ci_i, h0 + dy : h0 + dy + rows, dx : dx + wd],
                        accumulate=i > 0,
                    )
                _evacuate(o[:, h0 : h0 + rows, :], ps, bias_sb, co_i, cw)
            queues.store(out[img, co0 : co0 + cw, :, :], o)
    return out


def _check(x: Tile, w: Tile, bias: Tile | None) -> tuple[int, int, int, int, int]:
    require(x.ndim == 4, "conv2d_3x3", f"x must be [N, C_in, H, W], got shape {x.shape}")
    n, c_in, h, wd = x.shape
    require(
        w.ndim == 4 and w.shape[1:] == (c_in, 3, 3),
        "conv2d_3x3",
        f"w must be [C_out, C_in={c_in}, 3, 3], got shape {w.shape}",
    )
    c_out = w.shape[0]
    require(
        x.dtype == w.dtype and x.dtype.is_float,
        "conv2d_3x3",
        f"x and w must share one float dtype, got {x.dtype.name} and {w.dtype.name}",
    )
    if bias is not None:
        require(
            bias.shape == (c_out,) and bias.dtype.is_float,
            "conv2d_3x3",
            f"bias must be a float vector of shape ({c_out},), got {bias.shape}",
        )
    lim = limits()
    require(
        wd <= lim.tile_n,
        "conv2d_3x3",
        f"W={wd} > {lim.tile_n}: one output row must fit a PSUM bank; split the columns",
    )
    ci_tiles = -(-c_in // lim.tile_k)
    padded = ci_tiles * (h + 2) * (wd + 2) * x.dtype.itemsize
    require(
        padded <= lim.sbuf_bytes // 4,
        "conv2d_3x3",
        f"a padded image needs {padded} bytes per SBUF partition, more than a quarter of the "
        f"{lim.sbuf_bytes} there are; split H",
    )
    weights = ci_tiles * TAPS * c_out * x.dtype.itemsize + c_in * TAPS * x.dtype.itemsize
    require(
        weights <= lim.sbuf_bytes // 2,
        "conv2d_3x3",
        f"the weights need {weights} bytes per SBUF partition, more than half of the "
        f"{lim.sbuf_bytes} there are; split C_out",
    )
    return n, c_in, h, wd, c_out


def _weights(
    w: Tile, ci_tiles: list[tuple[int, int]], co_tiles: list[tuple[int, int]], queues: DmaQueues
) -> Tile:
    """w [C_out, C_in, 3, 3] as SBUF [ci, ci tile, tap, C_out] (stationary tiles per tap).

    Loaded in its natural layout (C_out on partitions: contiguous C_in * 9 per row), then each
    [co, ci] tap slice (free stride 9) is transposed on TensorE and copied out of PSUM.
    """
    lim = limits()
    c_out, c_in = w.shape[0], w.shape[1]
    dt = w.dtype
    w_taps = lang.ndarray((lim.tile_k, len(ci_tiles), TAPS, c_out), dt)
    psum = BufferRing(2)
    bank_bytes = lang.config().psum.bytes_per_partition // lim.psum_banks
    per_bank = max(1, bank_bytes // (lim.tile_m * dt.itemsize))
    for co0, cw in co_tiles:
        natural = lang.ndarray((cw, c_in, TAPS), dt)
        queues.load(natural, w[co0 : co0 + cw, :, :, :], engine=queues.store_engine)
        for ci_i, (ci0, cr) in enumerate(ci_tiles):
            for t0 in range(0, TAPS, per_bank):
                taps = range(t0, min(TAPS, t0 + per_bank))
                ps = psum((cr, len(taps), cw), dt, lang.psum)
                for i, tap in enumerate(taps):
                    nisa.nc_transpose(ps[:, i, :], natural[:, ci0 : ci0 + cr, tap])
                nisa.tensor_copy(w_taps[:cr, ci_i, t0 : t0 + len(taps), co0 : co0 + cw], ps)
    return w_taps


def _bias(bias: Tile | None, co_tiles: list[tuple[int, int]], queues: DmaQueues) -> Tile | None:
    """bias [C_out] as SBUF [128, co tiles] (one value per partition = output channel)."""
    if bias is None:
        return None
    lim = limits()
    sb = lang.ndarray((lim.tile_m, len(co_tiles)), lang.float32)
    for i, (co0, cw) in enumerate(co_tiles):
        queues.load(sb[:cw, i : i + 1], column(bias, co0, cw), engine=queues.store_engine)
    return sb


def _load_padded(
    xpad: Operand, x: Tile, img: int, ci_tiles: list[tuple[int, int]], queues: DmaQueues
) -> None:
    """Zero the 1-pixel border of xpad and DMA image ``img`` into its interior."""
    h, wd = x.shape[2], x.shape[3]
    for ci_i, (ci0, cr) in enumerate(ci_tiles):
        tile = xpad[:cr, ci_i, :, :]
        # borders only: top and bottom rows, then the left and right columns
        nisa.memset(tile[:, 0:1, :], 0.0, engine="gpsimd")
        nisa.memset(tile[:, h + 1 : h + 2, :], 0.0, engine="gpsimd")
        nisa.memset(tile[:, 1 : h + 1, 0:1], 0.0, engine="gpsimd")
        nisa.memset(tile[:, 1 : h + 1, wd + 1 : wd + 2], 0.0, engine="gpsimd")
        queues.load(tile[:, 1 : h + 1, 1 : wd + 1], x[img, ci0 : ci0 + cr, :, :])


def _evacuate(dst: Operand, ps: Operand, bias_sb: Tile | None, co_i: int, cw: int) -> None:
    if bias_sb is None:
        nisa.activation(dst, lang.ActivationFunction.identity, ps)
    else:
        nisa.activation(
            dst, lang.ActivationFunction.identity, ps, bias=bias_sb[:cw, co_i : co_i + 1]
        )

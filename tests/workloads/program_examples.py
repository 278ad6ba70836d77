"""A small kernel with one of every registered instruction, for the saved-program format tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from hwsim import lang
from hwsim.config import load_config
from hwsim.lang import isa
from hwsim.program import Program


@lang.kernel
def every_op(x, w, table, idx):  # type: ignore[no-untyped-def]
    """Every opcode once or more, with non-finite immediates and per-partition scalar tiles."""
    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
    red = lang.ndarray((1, 16), lang.float32, buffer=lang.hbm, name="red")
    xt = lang.load(x)
    wt = lang.load(w)
    acc = lang.ndarray((16, 16), lang.float32, buffer=lang.psum)
    isa.nc_matmul(acc, xt, wt)
    transposed = lang.ndarray((16, 32), lang.float32, buffer=lang.psum)
    isa.nc_transpose(transposed, xt)
    col = lang.ndarray((32, 1), lang.float32)
    isa.tensor_reduce(col, isa.ReduceOp.max, xt, negate=True)
    a = lang.ndarray((32, 16), lang.float32)
    isa.activation(a, isa.ActivationFunction.exp, xt, bias=col, scale=col)
    total = lang.ndarray((32, 1), lang.float32)
    b = lang.ndarray((32, 16), lang.float32)
    isa.activation_reduce(b, isa.ActivationFunction.tanh, xt, reduce_res=total, scale=0.5)
    c = lang.ndarray((32, 16), lang.float32)
    isa.tensor_tensor(c, a, b, isa.AluOp.add)
    isa.tensor_scalar(c, c, isa.AluOp.multiply, total, op1=isa.AluOp.add, operand1=-1.0)
    isa.scalar_tensor_tensor(c, c, isa.AluOp.max, float("-inf"), isa.AluOp.add, a)
    r = lang.ndarray((32, 16), lang.float32)
    isa.reciprocal(r, b)
    m = lang.ndarray((32, 16), lang.float32)
    isa.memset(m, float("-inf"))
    i = lang.ndarray((32, 16), lang.int32)
    isa.iota(i, steps=(1,), offset=-3, channel_multiplier=1)
    f = lang.ndarray((32, 16), lang.float32)
    isa.affine_select(f, c, float("-inf"), isa.AluOp.is_ge, steps=(-1,), channel_multiplier=1)
    chosen = lang.ndarray((32, 16), lang.float32)
    isa.select(chosen, i, f, m)
    by_column = lang.ndarray((1, 16), lang.float32)
    isa.tensor_partition_reduce(by_column, isa.ReduceOp.add, r)
    stats = lang.ndarray((32, 6), lang.float32)
    isa.bn_stats(stats, xt)
    moments = lang.ndarray((32, 2), lang.float32)
    isa.bn_aggr(moments, stats)
    narrow = lang.ndarray((32, 16), lang.bfloat16)
    isa.tensor_copy(narrow, chosen, engine="gpsimd")
    narrow_t = lang.ndarray((16, 32), lang.bfloat16)
    isa.dma_transpose(narrow_t, narrow)
    scan = lang.ndarray((32, 16), lang.float32)
    isa.tensor_tensor_scan(scan, a, b, 0.0, isa.AluOp.multiply, isa.AluOp.add)
    reduced = lang.ndarray((32, 1), lang.float32)
    isa.tensor_scalar_reduce(scan, scan, isa.AluOp.add, 1.0, isa.ReduceOp.max, reduced)
    running = lang.ndarray((32, 16), lang.float32)
    isa.tensor_scalar_cumulative(running, scan, isa.AluOp.multiply, isa.AluOp.add, 0.5)
    isa.tensor_scalar(running, running, isa.AluOp.add, reduced)
    _search_and_gather_ops(xt)
    _random_ops(xt)
    _double_row_matmul(xt)
    rows = lang.ndarray((32, 16), lang.float32)
    isa.dma_gather(rows, table, lang.load(idx))
    isa.tensor_tensor(rows, rows, chosen, isa.AluOp.add)
    isa.tensor_tensor(rows, rows, running, isa.AluOp.add)
    lang.store(out, rows)
    lang.store(red, by_column)
    return out, red


def _search_and_gather_ops(xt: lang.Tile) -> None:
    """max8 .. sequence_bounds on the [32, 16] fp32 tile xt (tiny's 32 partitions)."""
    top = lang.ndarray((32, 8), lang.float32)
    isa.max8(top, xt)
    isa.nc_find_index8(lang.ndarray((32, 8), lang.uint32), xt, top)
    isa.nc_match_replace8(
        lang.ndarray((32, 16), lang.float32),
        xt,
        top,
        -1.0,
        dst_idx=lang.ndarray((32, 8), lang.uint16),
    )
    low, high = lang.ndarray((32, 1), lang.float32), lang.ndarray((32, 1), lang.float32)
    isa.memset(low, 2.0)
    isa.memset(high, 12.0)
    isa.range_select(
        lang.ndarray((32, 16), lang.float32),
        xt,
        isa.AluOp.is_ge,
        isa.AluOp.is_lt,
        low,
        high,
        reduce_res=lang.ndarray((32, 1), lang.float32),
    )
    pred = lang.ndarray((32, 16), lang.uint8)
    isa.iota(pred, steps=(1,), channel_multiplier=1)
    isa.select_reduce(
        lang.ndarray((32, 16), lang.bfloat16),
        pred,
        xt,
        low,
        reduce_res=lang.ndarray((32, 1), lang.float32),
        reduce_cmd="reset_reduce",
    )
    kept = lang.ndarray((32, 16), lang.float32)
    isa.memset(kept, 0.0)
    isa.tensor_copy_predicated(kept, xt, pred, reverse_pred=True)
    isa.nc_stream_shuffle(lang.ndarray((32, 16), lang.float32), xt, [*range(31, 0, -1), 255])
    starts = lang.ndarray((32, 1), lang.uint16)
    isa.iota(starts, steps=(0,), offset=4)
    isa.local_gather(lang.ndarray((32, 32), lang.float32), xt, starts, num_elem_per_idx=2)
    picks = lang.ndarray((32, 4), lang.uint32)
    isa.iota(picks, steps=(3,))
    isa.nc_n_gather(lang.ndarray((32, 4), lang.float32), xt, picks)
    offset = lang.ndarray((1, 1), lang.int32)
    isa.iota(offset, steps=(0,), offset=5)
    window = lang.ndarray((32, 4), lang.float32)
    isa.tensor_copy_dynamic_src(window, xt, offset)
    isa.tensor_copy_dynamic_dst(kept, window, offset, engine="gpsimd")
    snake = lang.ndarray((32, 2), lang.bfloat16)
    isa.tensor_copy(snake, xt[:, 0:2])
    isa.topk(lang.ndarray((32, 4), lang.bfloat16), lang.ndarray((32, 4), lang.uint32), snake, 20)
    isa.nonzero_with_count(lang.ndarray((32, 17), lang.int32), xt, index_offset=3)
    ids = lang.ndarray((1, 8), lang.int32)
    isa.iota(ids, steps=(1,), offset=-2)
    isa.tensor_scalar(ids, ids, isa.AluOp.max, 0.0)
    isa.sequence_bounds(lang.ndarray((1, 2, 8), lang.int32), ids)


def _random_ops(xt: lang.Tile) -> None:
    """The PRNG family on NeuronCore-v3 (tiny): VectorE and GpSimdE generators."""
    seed = lang.ndarray((1, 1), lang.uint32)
    isa.iota(seed, steps=(0,), offset=7)
    isa.set_rng_seed(seed)
    isa.rng(lang.ndarray((32, 16), lang.uint16))
    state = lang.ndarray((32, 6), lang.uint32)
    isa.rand_get_state(state)
    isa.rand_set_state(state)
    isa.rng(lang.ndarray((32, 16), lang.int8), engine="gpsimd")
    isa.dropout(lang.ndarray((32, 16), lang.float32), xt, 0.5)


def _double_row_matmul(xt: lang.Tile) -> None:
    """nc_matmul in FP8 double-row mode: K = 64 over tiny's 32 partitions."""
    stationary = lang.ndarray((32, 2, 4), lang.float8_e4m3)
    moving = lang.ndarray((32, 2, 8), lang.float8_e5m2)
    isa.tensor_copy(stationary, xt[:, 0:8])
    isa.tensor_copy(moving, xt)
    isa.nc_matmul(
        lang.ndarray((4, 8), lang.float32, buffer=lang.psum),
        stationary,
        moving,
        perf_mode="double_row",
    )


#: tiny with NeuronCore-v4 rules, for the v4-only instructions.
TINY_V4 = load_config("tiny", {"chip.generation": "v4"})


@lang.kernel
def every_v4_op(x):  # type: ignore[no-untyped-def]
    """The NeuronCore-v4-only instructions, for ``TINY_V4``."""
    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
    xt = lang.load(x)
    col = lang.ndarray((32, 1), lang.float32)
    isa.tensor_reduce(col, isa.ReduceOp.max, xt)
    e = lang.ndarray((32, 16), lang.float32)
    total = lang.ndarray((32, 1), lang.float32)
    isa.exponential(e, xt, max_value=col, reduce_res=total, reduce_cmd="reset_reduce")
    peak = lang.ndarray((32, 1), lang.float32)
    isa.activate2(
        lang.ndarray((32, 16), lang.bfloat16),
        isa.ActivationFunction.tanh,
        xt,
        2.0,
        col,
        isa.AluOp.multiply,
        isa.AluOp.subtract,
        reduce_op=isa.AluOp.max,
        reduce_res=peak,
        reduce_cmd="reset_reduce",
    )
    isa.rand2(lang.ndarray((32, 16), lang.bfloat16), -1.0, total)
    state = lang.ndarray((32, 24), lang.uint32)
    isa.rand_get_state(state, engine="vector")
    isa.rand_set_state(state, engine="vector")
    half = lang.ndarray((32, 16), lang.bfloat16)
    isa.tensor_copy(half, xt)
    packed = lang.ndarray((32, 4), lang.float8_e4m3fn_x4)
    scales = lang.ndarray((4, 4), lang.uint8)
    isa.quantize_mx(packed, half, scales)
    product = lang.ndarray((4, 4), lang.float32, buffer=lang.psum)
    isa.nc_matmul_mx(product, packed, packed, scales, scales)
    lang.store(out, e)
    return out


def every_v4_op_program() -> Program:
    """``every_v4_op`` built for ``TINY_V4``."""
    return every_v4_op.build(every_op_inputs()[0], config=TINY_V4).program


def every_op_inputs() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    table = rng.standard_normal((40, 16)).astype(np.float32)
    idx = rng.integers(0, 40, (32, 1)).astype(np.int32)
    return x, w, table, idx


def every_op_program(**meta: Any) -> Program:
    """``every_op`` built for ``tiny``, with ``meta`` added."""
    program = every_op.build(*every_op_inputs(), config="tiny").program
    program.meta.update(meta)
    return program


#: tiny with two cores a chip, paired into one logical core (the instructions between cores).
TINY_PAIR = load_config(
    "tiny",
    overrides={
        "chip.cores_per_chip": 2,
        "chip.cores_per_logical_core": 2,
        "hbm.cores_per_stack": 2,
    },
)


@lang.kernel
def every_multicore_op(x, core):  # type: ignore[no-untyped-def]
    """The instructions between cores, on core ``core`` of a pair: a sendrecv, a core barrier
    (its signal and its wait) and a collective."""
    shared = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="shared")
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
    tile = lang.load(x)
    swapped = lang.ndarray(x.shape, x.dtype)
    isa.sendrecv(tile, swapped, send_to=1 - core, recv_from=1 - core)
    lang.store(shared, swapped)
    isa.core_barrier(shared, core=core)
    isa.collective("all_reduce", out, shared, group=(0, 1), rank=core)
    return out


def every_multicore_op_program() -> Program:
    """``every_multicore_op`` on both cores of ``TINY_PAIR``, one program."""
    from hwsim.chip import spmd

    x = every_op_inputs()[0]
    return spmd(lambda k: every_multicore_op.build(x * (k + 1), k, config=TINY_PAIR).program, 2)

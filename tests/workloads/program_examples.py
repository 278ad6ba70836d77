"""A small kernel with one of every registered instruction, for the saved-program format tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from hwsim import lang
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
    rows = lang.ndarray((32, 16), lang.float32)
    isa.dma_gather(rows, table, lang.load(idx))
    isa.tensor_tensor(rows, rows, chosen, isa.AluOp.add)
    isa.tensor_tensor(rows, rows, running, isa.AluOp.add)
    lang.store(out, rows)
    lang.store(red, by_column)
    return out, red


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

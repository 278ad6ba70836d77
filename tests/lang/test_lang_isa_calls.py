"""The kernel-language calls of the search/gather/PRNG/MX instructions: fields, errors, a kernel.

Every call is also built and simulated by ``tests/workloads/program_examples.py``; these tests
pin how the calls map their nki.isa-named arguments onto instruction fields.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.config import load_config
from hwsim.errors import IllegalInstructionError
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.tensor_ops import MatmulPerfMode
from hwsim.lang import isa as nisa

V4 = load_config("tiny", {"chip.generation": "v4"})


def build(fn, *args, config="tiny"):
    return lang.kernel(fn).build(*args, config=config)


def test_calls_name_their_fields_like_nki_isa():
    seen = {}

    def body():
        x = lang.ndarray((32, 16), lang.float32)
        nisa.memset(x, 1.0)
        bound = lang.ndarray((32, 1), lang.float32)
        nisa.memset(bound, 4.0)
        seen["range"] = nisa.range_select(
            lang.ndarray((32, 16), lang.float32),
            x,
            nisa.AluOp.is_ge,
            nisa.AluOp.is_lt,
            bound,
            bound,
            reduce_cmd="reset_reduce",
            range_start=3,
        )
        offset = lang.ndarray((1, 1), lang.int32)
        nisa.iota(offset, steps=(0,), offset=2)
        table = lang.ndarray((32, 4, 4), lang.float32)
        nisa.memset(table, 2.0)
        seen["dyn"] = nisa.tensor_copy_dynamic_src(
            lang.ndarray((32, 2, 4), lang.float32), table, offset, axis=1
        )

    build(body)
    rs, dyn = seen["range"], seen["dyn"]
    assert (rs.range_start, rs.reduce_cmd) == (3, ReduceCmd.reset_reduce)
    assert rs.on_false_value == nisa.fp32_min == -3.4028234663852886e38
    assert dyn.free_axis == 0 and dyn.src.free_sizes == (4, 4) and dyn.dst.free_sizes == (2, 4)


def test_double_row_is_a_perf_mode_of_nc_matmul():
    seen = {}

    def body():
        st = lang.ndarray((32, 2, 4), lang.float8_e4m3)
        mv = lang.ndarray((32, 2, 8), lang.float8_e4m3)
        nisa.memset(st, 0.0)
        nisa.memset(mv, 0.0)
        acc = lang.ndarray((4, 8), lang.float32, buffer=lang.psum)
        seen["mm"] = nisa.nc_matmul(acc, st, mv, perf_mode="double_row")

    build(body)
    assert seen["mm"].perf_mode is MatmulPerfMode.double_row and seen["mm"].dims() == (64, 4, 8)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda t: nisa.exponential(t, t, reduce_cmd="sum"),
            "exponential(reduce_cmd='sum'): valid values are idle, reset, reduce, reset_reduce, "
            "load_reduce",
        ),
        (
            lambda t: nisa.nc_matmul(t, t, t, perf_mode="quad"),
            "nc_matmul(perf_mode='quad'): valid values are none, double_row",
        ),
        (
            lambda t: nisa.tensor_copy_dynamic_dst(t, t, t, axis=0),
            "tensor_copy_dynamic_dst(axis=0): the dynamic axis is a free dim",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(call, message):
    def body():
        call(lang.ndarray((32, 8), lang.float32))

    with pytest.raises(IllegalInstructionError) as err:
        build(body, config=V4)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_softmax_row_with_exponential_and_the_accumulator_runs_on_v4():
    @lang.kernel
    def softmax_rows(x):
        out = lang.ndarray(x.shape, lang.float32, buffer=lang.hbm)
        tile = lang.load(x)
        peak = lang.ndarray((32, 1), lang.float32)
        nisa.tensor_reduce(peak, nisa.ReduceOp.max, tile)
        e = lang.ndarray(x.shape, lang.float32)
        total = lang.ndarray((32, 1), lang.float32)
        half = 16
        # two halves accumulate into one sum: reset_reduce, then reduce with the read-out
        nisa.exponential(e[:, :half], tile[:, :half], max_value=peak, reduce_cmd="reset_reduce")
        nisa.exponential(
            e[:, half:], tile[:, half:], max_value=peak, reduce_res=total, reduce_cmd="reduce"
        )
        inverse = lang.ndarray((32, 1), lang.float32)
        nisa.reciprocal(inverse, total)
        nisa.tensor_scalar(e, e, nisa.AluOp.multiply, inverse)
        lang.store(out, e)
        return out

    x = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    result = softmax_rows(x, config=V4, race_check=True)
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(result.output, expected, rtol=1e-5, atol=1e-7)

"""VectorE search and select instructions: max8, nc_find_index8, nc_match_replace8, range_select,
select_reduce, tensor_copy_predicated. Numerics against plain numpy, exact ticks, legality.

Hand-computed ticks on tiny: VectorE 2 ticks/cycle, MIN_II 16 cycles, one SBUF input stream
(two SBUF inputs cost 2N), results visible 10 cycles (20 ticks) after the issue interval.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32, INT8, INT32, UINT8, UINT16, UINT32
from hwsim.errors import IllegalInstructionError
from hwsim.isa.copy_ops import TensorCopyPredicated
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.search_ops import (
    FP32_MIN,
    Max8,
    NcFindIndex8,
    NcMatchReplace8,
    RangeSelect,
    SelectReduce,
)
from hwsim.kernels import AluOp

from .helpers import (
    PSUM,
    V3_VECTOR_FIXED,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
)
from .helpers import tile_ap as ap

RNG = np.random.default_rng(11)
LATENCY = 20  # tiny VectorE: 10 cycles x 2 ticks


def distinct(shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values (a shuffled ramp), so first occurrences are unambiguous."""
    return RNG.permutation(np.prod(shape)).reshape(shape).astype(np.float64) * 0.5 - 7.0


# ---- max8 / find_index8 / match_replace8 ------------------------------------------------------


@pytest.mark.parametrize(("shape", "dtype"), [((8, 40), FP32), ((32, 4, 5), BF16), ((3, 8), FP32)])
def test_max8_numerics(shape, dtype):
    x = RNG.uniform(-5, 5, shape)
    run = run_single(
        lambda aps: Max8(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(x, dtype)},
        {"dst": out((shape[0], 8), FP32)},
    )
    values = rounded(x, dtype).reshape(shape[0], -1)
    expected = -np.sort(-values, axis=1)[:, :8]
    assert_ulps(run.outputs["dst"], expected, FP32)


@pytest.mark.parametrize(("n", "issue"), [(40, 2 * 40), (8, 2 * 16)])  # N; MIN_II floor
@pytest.mark.parametrize("opcode", ["max8", "nc_find_index8", "nc_match_replace8"])
def test_search_cost_is_one_pass_over_data(opcode, n, issue):
    x = distinct((4, n))
    vals = -np.sort(-x, axis=1)[:, :8]
    if opcode == "max8":
        make, outs = (lambda aps: Max8(engine="vector", dst=aps["dst"], src=aps["x"])), (4, 8)
    elif opcode == "nc_find_index8":

        def make(aps):
            return NcFindIndex8(engine="vector", dst=aps["dst"], data=aps["x"], vals=aps["v"])

        outs = (4, 8)
    else:

        def make(aps):
            return NcMatchReplace8(
                engine="vector", dst=aps["dst"], data=aps["x"], vals=aps["v"], imm=0.0
            )

        outs = (4, n)
    run = run_single(
        make,
        {"x": inp(x, FP32), "v": inp(vals, FP32)},
        {"dst": out(outs, UINT32 if opcode == "nc_find_index8" else FP32)},
        numerics=False,
    )
    assert_timing(run, issue, issue + LATENCY)


def test_trn2_max8_cost_in_ticks():
    # trn2 VectorE 960 MHz = 5 ticks/cycle (base 4800 MHz), MIN_II 64, latency 100 cycles, a
    # fixed cycles per instruction (calibrated on K2-v5, docs/fidelity.md)
    run = run_single(
        lambda aps: Max8(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(np.ones((128, 1000)), FP32)},
        {"dst": out((128, 8), FP32)},
        config="trn2",
        numerics=False,
    )
    assert_timing(run, 5 * (1000 + V3_VECTOR_FIXED), 5 * (1000 + V3_VECTOR_FIXED) + 5 * 100)


@pytest.mark.parametrize("dst_dtype", [UINT32, UINT16])
def test_find_index8_finds_first_occurrences(dst_dtype):
    x = distinct((6, 30))
    x[:, 20] = x[:, 3]  # a repeated value: the first occurrence (3) is found
    cols = np.array([3, 0, 29, 7, 8, 12, 5, 1])
    vals = x[:, cols]
    run = run_single(
        lambda aps: NcFindIndex8(engine="vector", dst=aps["dst"], data=aps["x"], vals=aps["v"]),
        {"x": inp(x, FP32), "v": inp(vals, FP32)},
        {"dst": out((6, 8), dst_dtype)},
    )
    np.testing.assert_array_equal(run.outputs["dst"], np.broadcast_to(cols, (6, 8)))


def test_find_index8_missing_value_is_an_error():
    x = distinct((2, 16))
    vals = x[:, :8].copy()
    vals[1, 4] = 1000.0
    with pytest.raises(IllegalInstructionError, match=r"value 1000\.0 \(vals\[1, 4\]\) does not"):
        run_single(
            lambda aps: NcFindIndex8(engine="vector", dst=aps["d"], data=aps["x"], vals=aps["v"]),
            {"x": inp(x, FP32), "v": inp(vals, FP32)},
            {"d": out((2, 8), UINT32)},
        )


def test_match_replace8_replaces_in_order_and_finds_repeats():
    x = np.array([[5.0, 1.0, 5.0, 2.0, 5.0, 3.0, 4.0, 6.0, 7.0, 8.0]])
    vals = np.array([[5.0, 5.0, 8.0, 1.0, 2.0, 3.0, 4.0, 6.0]])  # 5 twice: indices 0 then 2
    run = run_single(
        lambda aps: NcMatchReplace8(
            engine="vector", dst=aps["d"], data=aps["x"], vals=aps["v"], imm=-1.0, dst_idx=aps["i"]
        ),
        {"x": inp(x, FP32), "v": inp(vals, FP32)},
        {"d": out((1, 10), BF16), "i": out((1, 8), UINT32)},
    )
    np.testing.assert_array_equal(run.outputs["i"], [[0, 2, 9, 1, 3, 5, 6, 7]])
    expected = np.array([[-1, -1, -1, -1, 5, -1, -1, -1, 7, -1]], np.float32)
    assert_ulps(run.outputs["d"], expected, BF16)


# ---- range_select ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "start", "dtype"),
    [((AluOp.is_ge, AluOp.is_lt), 32, FP32), ((AluOp.is_gt, AluOp.is_le), -3, BF16)],
)
def test_range_select_numerics_and_reduction(ops, start, dtype):
    x = RNG.uniform(-1, 1, (16, 24))
    b0 = RNG.integers(start, start + 10, (16, 1)).astype(np.float64)
    b1 = b0 + RNG.integers(0, 12, (16, 1))
    run = run_single(
        lambda aps: RangeSelect(
            engine="vector",
            dst=aps["d"],
            on_true=aps["x"],
            comp_op0=ops[0],
            comp_op1=ops[1],
            bound0=aps["b0"],
            bound1=aps["b1"],
            reduce_res=aps["r"],
            range_start=start,
        ),
        {"x": inp(x, FP32), "b0": inp(b0, FP32), "b1": inp(b1, FP32)},
        {"d": out((16, 24), dtype), "r": out((16, 1), FP32)},
    )
    np_ops = {AluOp.is_ge: np.greater_equal, AluOp.is_lt: np.less, AluOp.is_gt: np.greater}
    np_ops[AluOp.is_le] = np.less_equal
    index = start + np.arange(24, dtype=np.float32)
    mask = np_ops[ops[0]](index, b0) & np_ops[ops[1]](index, b1)
    selected = np.where(mask, x.astype(np.float32), np.float32(FP32_MIN))
    assert_ulps(run.outputs["d"], selected, dtype)  # FP32_MIN -> -inf in bf16 [S15]
    assert_ulps(run.outputs["r"], selected.max(axis=1, keepdims=True), FP32)
    if dtype is BF16:
        assert np.isneginf(run.outputs["d"].astype(np.float32)[~mask]).all()


def _range_select(aps, cmd, res=None, start=0):
    return RangeSelect(
        engine="vector",
        dst=aps["d"],
        on_true=aps["x"],
        comp_op0=AluOp.is_ge,
        comp_op1=AluOp.is_lt,
        bound0=aps["b0"],
        bound1=aps["b1"],
        reduce_cmd=cmd,
        reduce_res=res,
        range_start=start,
    )


def test_range_select_chains_through_the_accumulator():
    """nki.isa's chaining example [S16]: reset_reduce, then reduce twice, reading out last."""
    from hwsim.builder import ProgramBuilder
    from hwsim.dtypes import FP32 as F
    from hwsim.isa import contiguous
    from hwsim.isa.ap import MemorySpace
    from hwsim.isa.dma_ops import DmaCopy
    from hwsim.machine.simulator import run

    x = RNG.uniform(0, 1, (8, 16)).astype(np.float32)
    b = ProgramBuilder()
    sb = MemorySpace.SBUF
    tiles = {
        "x": contiguous(sb, F, 8, 16),
        "b0": contiguous(sb, F, 8, 1, offset_bytes=64),
        "b1": contiguous(sb, F, 8, 1, offset_bytes=128),
        "d": contiguous(sb, F, 8, 16, offset_bytes=192),
        "r": contiguous(sb, F, 8, 1, offset_bytes=320),
    }
    values = {"x": x, "b0": np.zeros((8, 1)), "b1": np.full((8, 1), 40.0)}
    for q, (name, v) in enumerate(values.items()):
        b.program.add_tensor(name, v.shape, F, "input", v)
        hbm = contiguous(MemorySpace.HBM, F, *v.shape, tensor=name)
        b.emit(DmaCopy(engine="sync", dst=tiles[name], src=hbm, queue=q))
    b.emit(_range_select(tiles, ReduceCmd.reset_reduce, start=0))
    b.emit(_range_select(tiles, ReduceCmd.reduce, start=16))
    b.emit(_range_select(tiles, ReduceCmd.reduce, res=tiles["r"], start=32))
    b.program.add_tensor("out", (8, 1), F, "output")
    b.emit(
        DmaCopy(
            engine="sync",
            dst=contiguous(MemorySpace.HBM, F, 8, 1, tensor="out"),
            src=tiles["r"],
            queue=3,
        )
    )
    result = run(b.build(), "tiny", race_check=True)
    # ranges [0, 16) and [16, 32) select everything, [32, 48) up to 40: the max of x (3 passes)
    np.testing.assert_array_equal(result.outputs["out"], x.max(axis=1, keepdims=True))


def test_reduce_on_an_undefined_accumulator_is_an_error():
    with pytest.raises(IllegalInstructionError, match="accumulator of lane 0, which no instruc"):
        run_single(
            lambda aps: _range_select(aps, ReduceCmd.reduce, aps["r"]),
            {
                "x": inp(np.ones((4, 8)), FP32),
                "b0": inp(np.zeros((4, 1)), FP32),
                "b1": inp(np.ones((4, 1)), FP32),
            },
            {"d": out((4, 8), FP32), "r": out((4, 1), FP32)},
        )


def test_range_select_cost():
    run = run_single(
        lambda aps: _range_select(aps, ReduceCmd.reset_reduce, aps["r"]),
        {
            "x": inp(np.ones((4, 50)), FP32),
            "b0": inp(np.zeros((4, 1)), FP32),
            "b1": inp(np.ones((4, 1)), FP32),
        },
        {"d": out((4, 50), FP32), "r": out((4, 1), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * 50, 2 * 50 + LATENCY)


# ---- select_reduce / tensor_copy_predicated ---------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("pred_dtype", "scalar_false"), [(UINT8, True), (INT8, False)])
def test_select_reduce_numerics(reverse, pred_dtype, scalar_false):
    x = RNG.uniform(-3, 3, (8, 12))
    pred = RNG.integers(-2, 3, (8, 12)) if pred_dtype is INT8 else RNG.integers(0, 3, (8, 12))
    on_false = RNG.uniform(-1, 1, (8, 1))
    run = run_single(
        lambda aps: SelectReduce(
            engine="vector",
            dst=aps["d"],
            predicate=aps["p"],
            on_true=aps["x"],
            on_false=-0.25 if scalar_false else aps["f"],
            reduce_res=aps["r"],
            reduce_cmd=ReduceCmd.reset_reduce,
            reverse_pred=reverse,
        ),
        {"x": inp(x, FP32), "p": inp(pred, pred_dtype), "f": inp(on_false, FP32)},
        {"d": out((8, 12), FP32), "r": out((8, 1), FP32)},
    )
    take = (pred != 0) != reverse
    fallback = np.float32(-0.25) if scalar_false else on_false.astype(np.float32)
    expected = np.where(take, x.astype(np.float32), fallback)
    assert_ulps(run.outputs["d"], expected, FP32)
    assert_ulps(run.outputs["r"], expected.max(axis=1, keepdims=True), FP32)


@pytest.mark.parametrize(
    ("src_memory", "pred_memory", "cycles"),
    [("sbuf", "sbuf", 2 * 40), ("psum", "sbuf", 40), ("sbuf", "psum", 40)],  # [S16] N / 2N
)
def test_copy_predicated_cost(src_memory, pred_memory, cycles):
    mem = {"sbuf": None, "psum": PSUM}
    src_in = (
        inp(np.ones((4, 40)), FP32)
        if mem[src_memory] is None
        else inp(np.ones((4, 40)), FP32, PSUM)
    )
    pred_in = (
        inp(np.ones((4, 40)), UINT8)
        if mem[pred_memory] is None
        else inp(np.ones((4, 40)), UINT8, PSUM)
    )
    run = run_single(
        lambda aps: TensorCopyPredicated(
            engine="vector", dst=aps["d"], src=aps["s"], predicate=aps["p"]
        ),
        {"s": src_in, "p": pred_in, "d": inp(np.zeros((4, 40)), FP32)},
        {"d": out((4, 40), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * cycles, 2 * cycles + LATENCY)


@pytest.mark.parametrize("dtype", [FP32, INT32, BF16])
@pytest.mark.parametrize("reverse", [False, True])
def test_copy_predicated_keeps_unselected_bits(dtype, reverse):
    old = RNG.integers(-50, 50, (6, 10))
    src = RNG.integers(-50, 50, (6, 10))
    pred = RNG.integers(0, 2, (6, 10)) * RNG.integers(1, 60000, (6, 10))
    run = run_single(
        lambda aps: TensorCopyPredicated(
            engine="vector", dst=aps["d"], src=aps["s"], predicate=aps["p"], reverse_pred=reverse
        ),
        {"s": inp(src, dtype), "p": inp(pred, UINT16), "d": inp(old, dtype)},
        {"d": out((6, 10), dtype)},
    )
    take = (pred != 0) != reverse
    assert_ulps(run.outputs["d"], np.where(take, src, old), dtype)


def test_copy_predicated_scalar_src_and_initcheck_sees_only_copied_elements():
    pred = np.zeros((4, 8), np.int64)
    pred[:, :3] = 1
    # dst never written before: only the copied elements count as written, so reading the
    # whole dst afterwards is an initcheck finding on the 5 kept columns
    from hwsim.errors import InitCheckError

    found = "dma_copy reads 80 uninitialised bytes of sbuf partitions 0..3 bytes 12..31"
    with pytest.raises(InitCheckError, match=found):
        run_single(
            lambda aps: TensorCopyPredicated(
                engine="vector", dst=aps["d"], src=2.5, predicate=aps["p"]
            ),
            {"p": inp(pred, UINT8)},
            {"d": out((4, 8), FP32)},
            initcheck=True,
        )
    run = run_single(
        lambda aps: TensorCopyPredicated(
            engine="vector", dst=aps["d"], src=2.5, predicate=aps["p"]
        ),
        {"p": inp(pred, UINT8), "d": inp(np.full((4, 8), -1.0), FP32)},
        {"d": out((4, 8), FP32)},
    )
    np.testing.assert_array_equal(run.outputs["d"], np.where(pred != 0, 2.5, -1.0))


# ---- legality -----------------------------------------------------------------------------------

V2 = load_config("trn1")


@pytest.mark.parametrize(
    ("make", "config", "fragments"),
    [
        (lambda: Max8(engine="vector", dst=ap(4, 8), src=ap(4, 7)), "tiny", ("reads 8 to 16384",)),
        (
            lambda: Max8(engine="vector", dst=ap(4, 8), src=ap(4, 16385)),
            "trn2",
            ("16385 elements per partition",),
        ),
        (lambda: Max8(engine="vector", dst=ap(4, 9), src=ap(4, 16)), "tiny", ("must be [4, 8]",)),
        (
            lambda: NcFindIndex8(
                engine="vector", dst=ap(4, 8, dtype=INT32), data=ap(4, 16), vals=ap(4, 8)
            ),
            "tiny",
            ("operand 'dst' is int32; it must be uint16 or uint32",),
        ),
        (
            lambda: NcMatchReplace8(
                engine="vector", dst=ap(4, 16), data=ap(4, 16), vals=ap(4, 7), imm=0.0
            ),
            "tiny",
            ("operand 'vals' has shape (4, 7); it must be [4, 8]",),
        ),
        (
            lambda: RangeSelect(
                engine="vector",
                dst=ap(4, 8),
                on_true=ap(4, 8),
                comp_op0=AluOp.is_ge,
                comp_op1=AluOp.is_lt,
                bound0=ap(4, 1),
                bound1=ap(4, 1),
            ),
            V2,
            ("available on NeuronCore-v3/NeuronCore-v4 only; this config is NeuronCore-v2",),
        ),
        (
            lambda: RangeSelect(
                engine="vector",
                dst=ap(4, 8),
                on_true=ap(4, 8),
                comp_op0=AluOp.not_equal,
                comp_op1=AluOp.is_lt,
                bound0=ap(4, 1),
                bound1=ap(4, 1),
            ),
            "tiny",
            ("comp_op0=not_equal is not allowed",),
        ),
        (
            lambda: RangeSelect(
                engine="vector",
                dst=ap(4, 8),
                on_true=ap(4, 8),
                comp_op0=AluOp.is_ge,
                comp_op1=AluOp.is_lt,
                bound0=ap(4, 1),
                bound1=ap(4, 1),
                on_false_value=0.0,
            ),
            "tiny",
            ("on_false_value=0.0: the hardware takes only FP32_MIN",),
        ),
        (
            lambda: RangeSelect(
                engine="vector",
                dst=ap(4, 8),
                on_true=ap(4, 8),
                comp_op0=AluOp.is_ge,
                comp_op1=AluOp.is_lt,
                bound0=ap(4, 1),
                bound1=ap(4, 1),
                range_start=2**24,
            ),
            "tiny",
            ("leave +-2^24",),
        ),
        (
            lambda: RangeSelect(
                engine="vector",
                dst=ap(4, 8),
                on_true=ap(4, 8),
                comp_op0=AluOp.is_ge,
                comp_op1=AluOp.is_lt,
                bound0=ap(4, 1),
                bound1=ap(4, 1),
                reduce_cmd=ReduceCmd.idle,
                reduce_res=ap(4, 1),
            ),
            "tiny",
            ("reduce_res reads the accumulator registers, which reduce_cmd=idle leaves",),
        ),
        (
            lambda: SelectReduce(
                engine="vector",
                dst=ap(4, 8),
                predicate=ap(4, 8, dtype=UINT32),
                on_true=ap(4, 8),
                on_false=0.0,
            ),
            "tiny",
            ("operand 'predicate' is uint32; it must be int8 or uint8 or int16 or uint16",),
        ),
        (
            lambda: SelectReduce(
                engine="vector",
                dst=ap(4, 8),
                predicate=ap(4, 8, PSUM, UINT8),
                on_true=ap(4, 8, PSUM, offset_bytes=64),
                on_false=0.0,
            ),
            "tiny",
            ("on_true and predicate are both in PSUM",),
        ),
        (
            lambda: TensorCopyPredicated(
                engine="vector",
                dst=ap(4, 8),
                src=ap(4, 8, dtype=BF16),
                predicate=ap(4, 8, dtype=UINT8),
            ),
            "tiny",
            ("src is bf16 and dst fp32; they must share a dtype",),
        ),
        (
            lambda: TensorCopyPredicated(
                engine="vector", dst=ap(4, 8), src=1.0, predicate=ap(4, 8, dtype=INT8)
            ),
            "tiny",
            ("operand 'predicate' is int8; it must be uint8 or uint16 or uint32",),
        ),
    ],
)
def test_illegal(make, config, fragments):
    check_illegal(make(), config, *fragments)

"""NeuronCore-v4 instructions (exponential, activate2, quantize_mx, nc_matmul_mx) and nc_matmul's
FP8 double-row mode (v3+): numerics against plain numpy / ml_dtypes, exact ticks, legality.

Ticks: tiny-v4 (tiny with chip.generation v4): every compute engine 2 ticks/cycle, MIN_II 16,
VectorE latency 10 cycles, ScalarE 20; TensorE 1 tick/cycle, MM floor 16, result latency 32,
no access overhead. trn3: TensorE 1 tick/cycle (2400 MHz base), the others 2.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.dtypes import (
    BF16,
    FP4_E2M1FN_X4,
    FP8_E4M3,
    FP8_E4M3FN_X4,
    FP8_E5M2,
    FP8_E5M2_X4,
    FP16,
    FP32,
    UINT8,
    UINT16,
    UINT32,
)
from hwsim.errors import IllegalInstructionError
from hwsim.isa import MachineSpec
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.fused_ops import Activate2, Exponential
from hwsim.isa.mx_ops import NcMatmulMx, QuantizeMx
from hwsim.isa.tensor_ops import MatmulPerfMode, NcMatmul
from hwsim.kernels import ActivationFunction, AluOp

from .helpers import (
    PSUM,
    V3_VECTOR_FIXED,
    SmallProgram,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
)
from .helpers import tile_ap as ap

V4 = load_config("tiny", {"chip.generation": "v4"})
RNG = np.random.default_rng(13)
ML = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


# ---- exponential ---------------------------------------------------------------------------


@pytest.mark.parametrize("tile_max", [False, True])
def test_exponential_numerics_and_running_sum(tile_max):
    x = RNG.uniform(-4, 4, (16, 20))
    peak = x.max(axis=1, keepdims=True)
    run = run_single(
        lambda aps: Exponential(
            engine="vector",
            dst=aps["d"],
            src=aps["x"],
            max_value=aps["m"] if tile_max else 1.5,
            reduce_res=aps["s"],
            reduce_cmd=ReduceCmd.reset_reduce,
        ),
        {"x": inp(x, FP32), "m": inp(peak, FP32)},
        {"d": out((16, 20), BF16), "s": out((16, 1), FP32)},
        config=V4,
    )
    shift = peak if tile_max else 1.5
    values = np.exp(x.astype(np.float32) - np.float32(shift).astype(np.float32))
    assert_ulps(run.outputs["d"], values, BF16)
    np.testing.assert_allclose(run.outputs["s"], values.sum(axis=1, keepdims=True), rtol=1e-5)


def test_exponential_load_reduce_starts_from_reduce_init():
    x = np.zeros((4, 8))
    run = run_single(
        lambda aps: Exponential(
            engine="vector",
            dst=aps["d"],
            src=aps["x"],
            reduce_res=aps["s"],
            reduce_cmd=ReduceCmd.load_reduce,
            reduce_init=10.0,
        ),
        {"x": inp(x, FP32)},
        {"d": out((4, 8), FP32), "s": out((4, 1), FP32)},
        config=V4,
    )
    np.testing.assert_array_equal(run.outputs["s"], np.full((4, 1), 18.0))  # 10 + 8 x exp(0)


@pytest.mark.parametrize(
    ("config", "dtype", "n", "reduce", "cycles", "latency"),
    [
        # trn3 VectorE: + the fixed cycles per instruction (trn2's calibrated value, carried)
        (
            "trn3",
            FP32,
            1024,
            False,
            1024 // 4 + V3_VECTOR_FIXED,
            100,
        ),  # ScalarE fp32: N cycles; 4x faster [S3]
        (
            "trn3",
            BF16,
            1024,
            False,
            1024 // 8 + V3_VECTOR_FIXED,
            100,
        ),  # ScalarE bf16 runs at 2 per cycle [S3]
        (
            "trn3",
            FP32,
            1024,
            True,
            1024 // 4 + 64 + V3_VECTOR_FIXED,
            100,
        ),  # + the accumulator read-out
        ("trn3", FP32, 100, False, 64 + V3_VECTOR_FIXED, 100),  # MIN_II floor
        (V4, FP32, 40, False, 16, 10),  # ceil(80 ticks / 4 / 2 ticks per cycle) = 10 < 16
    ],
)
def test_exponential_cost_is_a_quarter_of_scalar_exp(config, dtype, n, reduce, cycles, latency):
    outputs = {"d": out((128 if config == "trn3" else 32, n), dtype)}
    if reduce:
        outputs["s"] = out((128, 1), FP32)
    run = run_single(
        lambda aps: Exponential(
            engine="vector",
            dst=aps["d"],
            src=aps["x"],
            reduce_res=aps.get("s"),
            reduce_cmd=ReduceCmd.reset_reduce if reduce else ReduceCmd.idle,
        ),
        {"x": inp(np.zeros((outputs["d"].shape[0], n)), dtype)},
        outputs,
        config=config,
        numerics=False,
    )
    assert_timing(run, 2 * cycles, 2 * cycles + 2 * latency)


# ---- activate2 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op0", "op1", "reverse0", "reduce_op", "numpy"),
    [
        (AluOp.multiply, AluOp.add, False, AluOp.add, lambda x, a, b: x * a + b),
        (AluOp.multiply, AluOp.subtract, False, AluOp.max, lambda x, a, b: x * a - b),
        (AluOp.subtract, AluOp.bypass, True, AluOp.abs_min, lambda x, a, b: a - x),
        (AluOp.bypass, AluOp.bypass, False, AluOp.min, lambda x, a, b: x),
    ],
)
def test_activate2_numerics(op0, op1, reverse0, reduce_op, numpy):
    x = RNG.uniform(-2, 2, (8, 16))
    imm1 = RNG.uniform(-1, 1, (8, 1))
    run = run_single(
        lambda aps: Activate2(
            engine="scalar",
            dst=aps["d"],
            src=aps["x"],
            func=ActivationFunction.tanh,
            imm0=0.75,
            imm1=aps["b"],
            op0=op0,
            op1=op1,
            reverse0=reverse0,
            reduce_op=reduce_op,
            reduce_res=aps["r"],
            reduce_cmd=ReduceCmd.reset_reduce,
        ),
        {"x": inp(x, FP32), "b": inp(imm1, FP32)},
        {"d": out((8, 16), FP32), "r": out((8, 1), FP32)},
        config=V4,
    )
    staged = numpy(x.astype(np.float32), np.float32(0.75), imm1.astype(np.float32))
    values = np.tanh(staged.astype(np.float64)).astype(np.float32)
    assert_ulps(run.outputs["d"], values, FP32, max_ulps=2)
    reducer = {
        AluOp.add: lambda v: v.sum(axis=1),
        AluOp.max: lambda v: v.max(axis=1),
        AluOp.min: lambda v: v.min(axis=1),
        AluOp.abs_min: lambda v: np.abs(v).min(axis=1),
    }[reduce_op]
    np.testing.assert_allclose(run.outputs["r"][:, 0], reducer(run.outputs["d"]), rtol=1e-6)


@pytest.mark.parametrize(("reduce", "cycles"), [(False, 40), (True, 40 + 16)])
def test_activate2_cost(reduce, cycles):
    outputs = {"d": out((4, 40), FP32)}
    if reduce:
        outputs["r"] = out((4, 1), FP32)
    run = run_single(
        lambda aps: Activate2(
            engine="scalar",
            dst=aps["d"],
            src=aps["x"],
            func=ActivationFunction.exp,
            imm0=2.0,
            op0=AluOp.multiply,
            reduce_res=aps.get("r"),
            reduce_cmd=ReduceCmd.reset_reduce if reduce else ReduceCmd.idle,
        ),
        {"x": inp(np.zeros((4, 40)), FP32)},
        outputs,
        config=V4,
        numerics=False,
    )
    assert_timing(run, 2 * cycles, 2 * cycles + 40)


# ---- quantize_mx ---------------------------------------------------------------------------


def ocp_quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """OCP MX quantization with ml_dtypes: (codes [P, F] uint8, scale codes [P/8, F/4])."""
    emax = {"e4m3fn": 8, "e5m2": 15}[fmt]
    finite_max = float(ml_dtypes.finfo(ML[fmt]).max)
    p, f = x.shape
    blocks = x.reshape(p // 8, 8, f // 4, 4)
    amax = np.abs(blocks).max(axis=(1, 3))
    scales = np.where(
        amax > 0, np.clip(np.floor(np.log2(np.where(amax > 0, amax, 1))) - emax + 127, 0, 254), 0
    ).astype(np.int64)
    factor = np.exp2(127.0 - np.repeat(np.repeat(scales, 8, axis=0), 4, axis=1))
    scaled = np.clip(x.astype(np.float64) * factor, -finite_max, finite_max)
    codes = scaled.astype(np.float32).astype(ML[fmt]).view(np.uint8)
    return codes, scales


def unpack(words: np.ndarray, bits: int) -> np.ndarray:
    lanes = [(words.astype(np.int64) >> (bits * lane)) & ((1 << bits) - 1) for lane in range(4)]
    return np.stack(lanes, axis=-1).reshape(words.shape[0], -1)


@pytest.mark.parametrize("dtype", [FP8_E4M3FN_X4, FP8_E5M2_X4])
@pytest.mark.parametrize("src_dtype", [BF16, FP16])
def test_quantize_mx_matches_the_ocp_algorithm(dtype, src_dtype):
    x = RNG.standard_normal((32, 24)) * np.exp2(RNG.integers(-6, 6, (32, 24)))
    x[0:8, 0:4] = 0.0  # an all-zero group: scale code 0
    run = run_single(
        lambda aps: QuantizeMx(engine="vector", dst=aps["d"], src=aps["x"], dst_scale=aps["s"]),
        {"x": inp(x, src_dtype)},
        {"d": out((32, 6), dtype), "s": out((4, 6), UINT8)},
        config=V4,
    )
    codes, scales = ocp_quantize(rounded(x, src_dtype), dtype.lane_format)
    np.testing.assert_array_equal(unpack(run.outputs["d"], 8), codes)
    np.testing.assert_array_equal(run.outputs["s"], scales)
    assert run.outputs["s"][0, 0] == 0


def test_quantize_mx_scales_use_four_partitions_per_quadrant():
    """On trn3, 64 data partitions: scales on partitions s..s+3 and 32+s..32+s+3; the 28 others
    of each quadrant keep what they held."""
    x = RNG.standard_normal((64, 8))
    prog = SmallProgram()
    src = prog.load("x", x, BF16)
    dst = prog.tile(64, 2, FP8_E4M3FN_X4)
    scale = prog.load("old", np.full((36, 2), 77), UINT8, start=2)
    prog.b.emit(QuantizeMx(engine="vector", dst=dst, src=src, dst_scale=scale))
    prog.store("s", scale)
    got = prog.run("trn3").outputs["s"]
    _, scales = ocp_quantize(rounded(x, BF16), "e4m3fn")
    np.testing.assert_array_equal(got[0:4], scales[0:4])
    np.testing.assert_array_equal(got[32:36], scales[4:8])
    assert (got[4:32] == 77).all()


@pytest.mark.parametrize(("f", "cycles"), [(64, 16), (256, 64)])  # 4 per cycle; MIN_II 16
def test_quantize_mx_cost(f, cycles):
    run = run_single(
        lambda aps: QuantizeMx(engine="vector", dst=aps["d"], src=aps["x"], dst_scale=aps["s"]),
        {"x": inp(np.zeros((32, f)), BF16)},
        {"d": out((32, f // 4), FP8_E5M2_X4), "s": out((4, f // 4), UINT8)},
        config=V4,
        numerics=False,
    )
    assert_timing(run, 2 * cycles, 2 * cycles + 20)


# ---- nc_matmul_mx --------------------------------------------------------------------------


def dequantized(words: np.ndarray, scales: np.ndarray, dtype) -> np.ndarray:
    """[4P, M] float64 contraction rows (any row order works for the product)."""
    bits = 4 if dtype is FP4_E2M1FN_X4 else 8
    fmt = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
    fmt["e2m1fn"] = ml_dtypes.float4_e2m1fn
    codes = unpack(words, bits).astype(np.uint8).view(fmt[dtype.lane_format]).astype(np.float64)
    p, m = words.shape
    factor = np.exp2(np.repeat(scales, 8, axis=0) - 127.0)[:, :, None]
    return (codes.reshape(p, m, 4) * factor).transpose(2, 0, 1).reshape(4 * p, m)


def random_mx(p: int, m: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    bits = 4 if dtype is FP4_E2M1FN_X4 else 8
    nan_free = {"e4m3fn": 0x7E, "e5m2": 0x7B, "e2m1fn": 0x7}[dtype.lane_format]
    codes = RNG.integers(0, nan_free + 1, (p, m, 4)) | (RNG.integers(0, 2, (p, m, 4)) << (bits - 1))
    words = (codes << (np.arange(4) * bits)).sum(axis=2)
    return words, RNG.integers(120, 134, (p // 8, m))


@pytest.mark.parametrize(
    ("stationary_dtype", "moving_dtype", "dst_dtype"),
    [
        (FP8_E4M3FN_X4, FP8_E4M3FN_X4, FP32),
        (FP8_E5M2_X4, FP4_E2M1FN_X4, FP32),  # MXFP8 x MXFP4 is allowed [S3]
        (FP4_E2M1FN_X4, FP8_E4M3FN_X4, BF16),
    ],
)
def test_matmul_mx_numerics(stationary_dtype, moving_dtype, dst_dtype):
    st, st_scale = random_mx(32, 6, stationary_dtype)
    mv, mv_scale = random_mx(32, 10, moving_dtype)
    run = run_single(
        lambda aps: NcMatmulMx(
            engine="tensor",
            dst=aps["d"],
            stationary=aps["s"],
            moving=aps["m"],
            stationary_scale=aps["ss"],
            moving_scale=aps["ms"],
        ),
        {
            "s": inp(st, stationary_dtype),
            "m": inp(mv, moving_dtype),
            "ss": inp(st_scale, UINT8),
            "ms": inp(mv_scale, UINT8),
        },
        {"d": out((6, 10), dst_dtype, PSUM)},
        config=V4,
    )
    a, b = dequantized(st, st_scale, stationary_dtype), dequantized(mv, mv_scale, moving_dtype)
    expected = a.T @ b
    got = run.outputs["d"].astype(np.float64)
    tolerance = 1e-5 if dst_dtype is FP32 else 1e-2
    np.testing.assert_allclose(
        got, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max()
    )


def test_matmul_mx_costs_a_bf16_matmul_with_k_equal_to_its_partitions():
    """4x BF16 throughput [S3]: K = 4 x 32 = 128 values at the time of a K = 32 BF16 matmul."""
    model = CostModel.for_config(V4)
    mx = NcMatmulMx(
        engine="tensor",
        dst=ap(8, 40, PSUM),
        stationary=ap(32, 8, dtype=FP8_E4M3FN_X4),
        moving=ap(32, 40, dtype=FP8_E4M3FN_X4, offset_bytes=64),
        stationary_scale=ap(4, 8, dtype=UINT8, offset_bytes=512),
        moving_scale=ap(4, 40, dtype=UINT8, offset_bytes=576),
    )
    bf16 = NcMatmul(
        engine="tensor",
        dst=ap(8, 40, PSUM),
        stationary=ap(32, 8, dtype=BF16),
        moving=ap(32, 40, dtype=BF16, offset_bytes=64),
    )
    mx.check(model.spec)
    assert model.of(mx) == model.of(bf16)
    # closed form on tiny: MM max(min(16, 8), 40) = 40 ticks, + 32 result latency
    assert (model.of(mx).issue_ticks, model.of(mx).latency_ticks) == (40, 72)
    assert mx.flops() == 2 * 128 * 8 * 40
    systolic = CostModel.for_config(
        load_config(
            "tiny", {"chip.generation": "v4", "tensor_engine.timing_model": "systolic_cycle"}
        )
    )
    assert systolic.of(mx) == systolic.of(bf16)


# ---- nc_matmul double row ------------------------------------------------------------------


def test_double_row_numerics_contract_over_both_rows():
    st = RNG.uniform(-2, 2, (16, 2, 8))
    mv = RNG.uniform(-2, 2, (16, 2, 12))
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor",
            dst=aps["d"],
            stationary=aps["s"],
            moving=aps["m"],
            perf_mode=MatmulPerfMode.double_row,
        ),
        {"s": inp(st, FP8_E4M3), "m": inp(mv, FP8_E5M2)},
        {"d": out((8, 12), FP32, PSUM)},
    )
    a = rounded(st, FP8_E4M3).reshape(32, 8).astype(np.float64)
    b = rounded(mv, FP8_E5M2).reshape(32, 12).astype(np.float64)
    np.testing.assert_allclose(run.outputs["d"], a.T @ b, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("model", ["closed_form", "systolic_cycle"])
@pytest.mark.parametrize("config_name", ["tiny", "trn2"])
def test_double_row_costs_a_bf16_matmul_of_half_the_contraction(config_name, model):
    """K = 256 (trn2) in FP8 double row at the time of BF16 K = 128 [S2], in every model."""
    config = load_config(config_name, {"tensor_engine.timing_model": model})
    rows = config.tensor_engine.rows
    model = CostModel.for_config(config)
    fp8 = NcMatmul(
        engine="tensor",
        dst=ap(32, 128, PSUM),
        stationary=ap(rows, (2, 32), dtype=FP8_E4M3),
        moving=ap(rows, (2, 128), dtype=FP8_E4M3, offset_bytes=128),
        perf_mode=MatmulPerfMode.double_row,
    )
    bf16 = NcMatmul(
        engine="tensor",
        dst=ap(32, 128, PSUM),
        stationary=ap(rows, 32, dtype=BF16),
        moving=ap(rows, 128, dtype=BF16, offset_bytes=128),
    )
    fp8.check(model.spec)
    assert model.of(fp8) == model.of(bf16)
    assert fp8.flops() == 2 * bf16.flops()


def test_double_row_timing_in_the_simulator():
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor",
            dst=aps["d"],
            stationary=aps["s"],
            moving=aps["m"],
            perf_mode=MatmulPerfMode.double_row,
        ),
        {"s": inp(np.zeros((32, 2, 8)), FP8_E4M3), "m": inp(np.zeros((32, 2, 100)), FP8_E4M3)},
        {"d": out((8, 100), FP32, PSUM)},
        numerics=False,
    )
    # tiny closed form: max(min(16, M=8), N=100) = 100 TensorE cycles (1 tick each) + 32
    assert run.issue_ticks == 100 and run.done_ticks == 132


# ---- legality ------------------------------------------------------------------------------

V3 = load_config("trn2")
V2 = load_config("trn1")


def _mx(**kw):
    fields = dict(
        engine="tensor",
        dst=ap(8, 40, PSUM),
        stationary=ap(32, 8, dtype=FP8_E4M3FN_X4),
        moving=ap(32, 40, dtype=FP8_E4M3FN_X4, offset_bytes=64),
        stationary_scale=ap(4, 8, dtype=UINT8, offset_bytes=512),
        moving_scale=ap(4, 40, dtype=UINT8, offset_bytes=576),
    )
    fields.update(kw)
    return NcMatmulMx(**fields)


def _double_row(**kw):
    fields = dict(
        engine="tensor",
        dst=ap(8, 16, PSUM),
        stationary=ap(16, (2, 8), dtype=FP8_E4M3),
        moving=ap(16, (2, 16), dtype=FP8_E4M3, offset_bytes=64),
        perf_mode=MatmulPerfMode.double_row,
    )
    fields.update(kw)
    return NcMatmul(**fields)


@pytest.mark.parametrize(
    ("make", "config", "fragments"),
    [
        (
            lambda: Exponential(engine="vector", dst=ap(4, 8), src=ap(4, 8)),
            V3,
            (
                "exponential on vector: available on NeuronCore-v4 only; this config is "
                "NeuronCore-v3",
            ),
        ),
        (
            lambda: Exponential(engine="vector", dst=ap(4, 8), src=ap(4, 8), reduce_init=1.0),
            V4,
            ("reduce_init is read only with reduce_cmd=load_reduce",),
        ),
        (
            lambda: Exponential(engine="vector", dst=ap(4, 8, dtype=UINT32), src=ap(4, 8)),
            V4,
            ("operand 'dst' is uint32, which exponential cannot write",),
        ),
        (
            lambda: Activate2(
                engine="scalar",
                dst=ap(4, 8),
                src=ap(4, 8),
                func=ActivationFunction.exp,
                op0=AluOp.add,
                op1=AluOp.add,
            ),
            V4,
            ("(op0, op1) = (add, add) is not allowed",),
        ),
        (
            lambda: Activate2(
                engine="scalar",
                dst=ap(4, 8),
                src=ap(4, 8),
                func=ActivationFunction.exp,
                reverse1=True,
            ),
            V4,
            ("reverse1 needs op1 set",),
        ),
        (
            lambda: Activate2(
                engine="scalar",
                dst=ap(4, 8),
                src=ap(4, 8),
                func=ActivationFunction.relu,
                relu_param=0.1,
            ),
            V4,
            ("relu_param=0.1: parameterised activation functions are not modelled",),
        ),
        (
            lambda: Activate2(
                engine="scalar",
                dst=ap(4, 8),
                src=ap(4, 8),
                func=ActivationFunction.exp,
                reduce_op=AluOp.multiply,
                reduce_cmd=ReduceCmd.reset_reduce,
            ),
            V4,
            ("reduce_op=multiply; valid:",),
        ),
        (
            lambda: QuantizeMx(
                engine="vector",
                dst=ap(32, 4, dtype=FP8_E4M3FN_X4),
                src=ap(32, 16, dtype=FP32),
                dst_scale=ap(4, 4, dtype=UINT8),
            ),
            V4,
            ("operand 'src' is fp32; it must be fp16 or bf16",),
        ),
        (
            lambda: QuantizeMx(
                engine="vector",
                dst=ap(16, 4, dtype=FP8_E4M3FN_X4),
                src=ap(16, 16, dtype=BF16),
                dst_scale=ap(4, 4, dtype=UINT8),
            ),
            V4,
            ("MX data take a multiple of 32 partitions",),
        ),
        (
            lambda: QuantizeMx(
                engine="vector",
                dst=ap(32, 4, dtype=FP8_E4M3FN_X4),
                src=ap(32, 16, dtype=BF16),
                dst_scale=ap(8, 4, dtype=UINT8),
            ),
            V4,
            ("take 4 partitions in each of 1 quadrant(s), i.e. 4 partitions",),
        ),
        (
            lambda: QuantizeMx(
                engine="vector",
                dst=ap(32, 4, dtype=FP4_E2M1FN_X4),
                src=ap(32, 16, dtype=BF16),
                dst_scale=ap(4, 4, dtype=UINT8),
            ),
            V4,
            ("operand 'dst' is fp4_e2m1fn_x4; it must be fp8_e5m2_x4 or fp8_e4m3fn_x4",),
        ),
        (lambda: _mx(), V3, ("nc_matmul_mx on tensor: available on NeuronCore-v4 only",)),
        (
            lambda: _mx(stationary=ap(32, 8, dtype=FP8_E4M3)),
            V4,
            ("operand 'stationary' is fp8_e4m3",),
        ),
        (
            lambda: _mx(
                stationary=ap(32, 7, dtype=FP8_E4M3FN_X4),
                dst=ap(7, 40, PSUM),
                stationary_scale=ap(4, 7, dtype=UINT8, offset_bytes=512),
            ),
            V4,
            ("stationary free size 7 must be even",),
        ),
        (
            lambda: _mx(
                moving=ap(32, 600, dtype=FP8_E4M3FN_X4, offset_bytes=64),
                dst=ap(8, 600, PSUM),
                moving_scale=ap(4, 600, dtype=UINT8, offset_bytes=4096),
            ),
            load_config("trn3"),
            ("moving free size 600 exceeds one PSUM bank of fp32 (512 elements)",),
        ),
        (
            lambda: _mx(moving_scale=ap(4, 40, dtype=UINT16, offset_bytes=576)),
            V4,
            ("operand 'moving_scale' must be a uint8 SBUF tile",),
        ),
        (lambda: _double_row(), V2, ("available on NeuronCore-v3/NeuronCore-v4 only",)),
        (
            lambda: _double_row(stationary=ap(16, (2, 8), dtype=BF16)),
            "tiny",
            ("perf_mode=double_row takes fp8_e4m3/fp8_e5m2 inputs",),
        ),
        (
            lambda: _double_row(moving=ap(16, (4, 8), dtype=FP8_E4M3, offset_bytes=64)),
            "tiny",
            ("the first free dim, which must be 2",),
        ),
        (
            lambda: _double_row(),
            load_config(
                "tiny",
                {
                    "tensor_engine.contraction_packing_by_dtype": {
                        "fp32": 1,
                        "bf16": 1,
                        "fp16": 1,
                        "fp8_e4m3": 1,
                        "fp8_e5m2": 1,
                    }
                },
            ),
            ("contraction_packing_by_dtype[fp8_e4m3] is 1: the array has no double row",),
        ),
    ],
)
def test_illegal(make, config, fragments):
    check_illegal(make(), config, *fragments)


V4_ONLY = [
    lambda: QuantizeMx(
        engine="vector",
        dst=ap(32, 4, dtype=FP8_E4M3FN_X4),
        src=ap(32, 16, dtype=BF16),
        dst_scale=ap(4, 4, dtype=UINT8),
    ),
    lambda: _mx(),
    lambda: Exponential(engine="vector", dst=ap(4, 8), src=ap(4, 8)),
    lambda: Activate2(engine="scalar", dst=ap(4, 8), src=ap(4, 8), func=ActivationFunction.exp),
]


@pytest.mark.parametrize("make", V4_ONLY, ids=["quantize_mx", "nc_matmul_mx", "exp", "activate2"])
@pytest.mark.parametrize("config", [V2, V3], ids=["trn1", "trn2"])
def test_v4_instructions_refuse_v2_and_v3_in_one_line(make, config):
    instruction = make()
    instruction.check(MachineSpec(V4))  # legal on v4
    with pytest.raises(IllegalInstructionError) as err:
        instruction.check(MachineSpec(config))
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        f"{instruction.OPCODE} on {instruction.engine}: available on NeuronCore-v4 only; this "
        f"config is NeuronCore-{config.chip.generation} (chip.generation)"
    )


def test_quantize_then_matmul_mx_on_four_quadrants_of_trn3():
    """quantize_mx's scale layout is the one nc_matmul_mx reads: 128 partitions (4 quadrants),
    K = 512, against ml_dtypes; and the exact closed-form ticks of trn3 (1 tick per TensorE
    cycle): max(min(64, M), N) + 60 access overhead = a BF16 K = 128 matmul."""
    a = RNG.standard_normal((128, 16))  # stationary: K/4 = 128 partitions x (M = 4) x4 values
    b = RNG.standard_normal((128, 40))  # moving: N = 10
    prog = SmallProgram()
    src_a, src_b = prog.load("a", a, BF16), prog.load("b", b, BF16)
    qa, qb = prog.tile(128, 4, FP8_E4M3FN_X4), prog.tile(128, 10, FP8_E4M3FN_X4)
    sa, sb = prog.tile(100, 4, UINT8), prog.tile(100, 10, UINT8)
    prog.b.emit(QuantizeMx(engine="vector", dst=qa, src=src_a, dst_scale=sa))
    prog.b.emit(QuantizeMx(engine="vector", dst=qb, src=src_b, dst_scale=sb))
    dst = prog.tile(4, 10, FP32, memory=PSUM)
    matmul = prog.b.emit(
        NcMatmulMx(
            engine="tensor",
            dst=dst,
            stationary=qa,
            moving=qb,
            stationary_scale=sa,
            moving_scale=sb,
        )
    )
    prog.store("out", dst)
    result = prog.run("trn3")
    record = next(r for r in result.trace.instructions if r.instruction is matmul)
    # the moving stream, over the floor, + trn3's tensor access overhead (trn2's calibrated 15)
    assert record.end_tick - record.start_tick == max(min(64, 4), 10) + 15
    ca, scale_a = ocp_quantize(rounded(a, BF16), "e4m3fn")
    cb, scale_b = ocp_quantize(rounded(b, BF16), "e4m3fn")
    va = ca.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    vb = cb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    va *= np.exp2(np.repeat(np.repeat(scale_a, 8, 0), 4, 1) - 127.0)
    vb *= np.exp2(np.repeat(np.repeat(scale_b, 8, 0), 4, 1) - 127.0)
    # contraction over (partition, packed value): [128, M, 4] x [128, N, 4]
    expected = np.einsum("pmj,pnj->mn", va.reshape(128, 4, 4), vb.reshape(128, 10, 4))
    np.testing.assert_allclose(result.outputs["out"], expected, rtol=1e-5, atol=1e-5)
    # and close to the unquantized product (MXFP8 keeps ~2 significant bits of 8 values)
    exact = np.einsum("pmj,pnj->mn", a.reshape(128, 4, 4), b.reshape(128, 10, 4))
    assert np.abs(result.outputs["out"] - exact).max() < 0.15 * np.abs(exact).max()

"""nc_matmul, nc_transpose, tensor_copy, dma_copy, dma_transpose: numerics, exact costs, legality.

tiny preset: TensorE 1 tick/cycle, VectorE/ScalarE/GpSimdE 2 ticks/cycle, MM floor 16 cycles,
TensorE result latency 32 cycles, VectorE pipeline latency 10 cycles, DMA 4 engines x 4 B/ns.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.dtypes import BF16, FP8_E4M3, FP16, FP32, INT32
from hwsim.errors import IllegalInstructionError
from hwsim.isa import AccessPattern, MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy, DmaTranspose
from hwsim.isa.tensor_ops import NcMatmul, NcTranspose
from hwsim.machine.simulator import run

from .helpers import (
    PSUM,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
    tile_ap,
)

RNG = np.random.default_rng(7)
HBM = MemorySpace.HBM


@pytest.mark.parametrize("dtype", [BF16, FP16, FP32, FP8_E4M3])
@pytest.mark.parametrize(("k", "m", "n"), [(32, 32, 128), (7, 5, 3), (32, 16, 512)])
def test_nc_matmul_numerics_fp32_accumulation(dtype, k, m, n):
    a = RNG.standard_normal((k, m)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    run = run_single(
        lambda aps: NcMatmul(engine="tensor", dst=aps["c"], stationary=aps["a"], moving=aps["b"]),
        {"a": inp(a, dtype), "b": inp(b, dtype)},
        {"c": out((m, n), FP32, PSUM)},
    )
    expected = rounded(a, dtype).astype(np.float64).T @ rounded(b, dtype).astype(np.float64)
    bound = np.abs(rounded(a, dtype)).T @ np.abs(rounded(b, dtype)) * np.finfo(np.float32).eps * k
    assert np.all(np.abs(run.outputs["c"] - expected) <= bound + 1e-30)


def test_nc_matmul_accumulate_adds_to_psum():
    """The arithmetic of accumulate=True: it adds to what PSUM holds. The values are put there by
    a VectorE copy, which starts no accumulation group: initcheck would (rightly) report it."""
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((16, 24)).astype(np.float32)
    c0 = RNG.standard_normal((8, 24)).astype(np.float32)
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor", dst=aps["c"], stationary=aps["a"], moving=aps["b"], accumulate=True
        ),
        {"a": inp(a, FP32), "b": inp(b, FP32), "c": inp(c0, FP32, PSUM)},
        {"c": out((8, 24), FP32, PSUM)},
        initcheck=False,
    )
    np.testing.assert_allclose(run.outputs["c"], c0 + a.T @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("dtype", "m", "n", "issue_cycles"),
    [
        (BF16, 32, 128, 128),  # max(min(16, 32), 128)
        (BF16, 32, 8, 16),  # the MM_INIT_LATENCY floor
        (BF16, 4, 8, 8),  # max(min(16, 4), 8) [S16]
        (FP32, 32, 128, 512),  # fp32 passes 4x
    ],
)
def test_nc_matmul_cost_is_the_closed_form(dtype, m, n, issue_cycles):
    run = run_single(
        lambda aps: NcMatmul(engine="tensor", dst=aps["c"], stationary=aps["a"], moving=aps["b"]),
        {"a": inp(np.ones((32, m)), dtype), "b": inp(np.ones((32, n)), dtype)},
        {"c": out((m, n), FP32, PSUM)},
        numerics=False,
    )
    assert_timing(run, issue_cycles, issue_cycles + 32)


@pytest.mark.parametrize(
    ("dtype", "stationary_flag", "moving_flag", "issue_cycles"),
    [
        (FP32, False, False, 4 * 128),  # fp32: 4 passes [S1][S16]
        (FP32, True, False, 2 * 128),  # a 0/1 stationary: 2x the fp32 speed [S15][S16]
        (FP32, False, True, 2 * 128),  # a 0/1 moving: the same
        (FP32, True, True, 2 * 128),  # both flagged: still 2x (no more is documented)
        (BF16, True, True, 128),  # "no impact for non-float32" [S16]
    ],
)
def test_nc_matmul_onezero_fast_path_ticks(dtype, stationary_flag, moving_flag, issue_cycles):
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor",
            dst=aps["c"],
            stationary=aps["a"],
            moving=aps["b"],
            is_stationary_onezero=stationary_flag,
            is_moving_onezero=moving_flag,
        ),
        {"a": inp(np.ones((32, 32)), dtype), "b": inp(np.ones((32, 128)), dtype)},
        {"c": out((32, 128), FP32, PSUM)},
        numerics=False,
    )
    assert_timing(run, issue_cycles, issue_cycles + 32)  # tiny: 1 tick/cycle, latency 32


@pytest.mark.parametrize(("flag", "issue_cycles"), [(False, 4 * 512 + 60), (True, 2 * 512 + 60)])
def test_nc_matmul_onezero_on_trn1(flag, issue_cycles):
    """A full fp32 128x128x512 matmul on trn1: mult * N + the 60-cycle access overhead."""
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor",
            dst=aps["c"],
            stationary=aps["a"],
            moving=aps["b"],
            is_stationary_onezero=flag,
        ),
        {"a": inp(np.eye(128), FP32), "b": inp(np.ones((128, 512)), FP32)},
        {"c": out((128, 512), FP32, PSUM)},
        config="trn1",
        numerics=False,
    )
    assert run.issue_ticks == 2 * issue_cycles  # TensorE 2 ticks/cycle on trn1 (5600 MHz base)


def test_nc_matmul_onezero_operands_compute_exactly():
    a = RNG.integers(0, 2, (16, 8)).astype(np.float64)
    b = RNG.standard_normal((16, 24))
    run = run_single(
        lambda aps: NcMatmul(
            engine="tensor",
            dst=aps["c"],
            stationary=aps["a"],
            moving=aps["b"],
            is_stationary_onezero=True,
        ),
        {"a": inp(a, FP32), "b": inp(b, FP32)},
        {"c": out((8, 24), FP32, PSUM)},
    )
    np.testing.assert_allclose(run.outputs["c"], a.T @ rounded(b, FP32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("operand", ["stationary", "moving"])
def test_nc_matmul_false_onezero_flag_is_an_error_naming_the_value(operand):
    a, b = np.ones((16, 8)), np.zeros((16, 24))
    bad = a if operand == "stationary" else b
    bad[3, 5] = 0.5
    bad[7, 1] = 2.0  # a later offender: the first one is named
    flags = {f"is_{operand}_onezero": True}
    with pytest.raises(IllegalInstructionError) as err:
        run_single(
            lambda aps: NcMatmul(
                engine="tensor", dst=aps["c"], stationary=aps["a"], moving=aps["b"], **flags
            ),
            {"a": inp(a, FP32), "b": inp(b, FP32)},
            {"c": out((8, 24), FP32, PSUM)},
        )
    message = str(err.value)
    assert message.startswith("nc_matmul on tensor"), message
    assert f"is_{operand}_onezero=True, but operand '{operand}' holds 0.5" in message
    assert "partition 3, element 5" in message


def test_nc_matmul_legality():
    a, b = tile_ap(32, 32, dtype=BF16), tile_ap(32, 128, dtype=BF16, offset_bytes=1024)
    dst = tile_ap(32, 128, PSUM)
    check_illegal(
        NcMatmul(engine="tensor", dst=dst, stationary=a, moving=tile_ap(16, 128, dtype=BF16)),
        "tiny",
        "contraction mismatch",
    )
    check_illegal(
        NcMatmul(engine="tensor", dst=tile_ap(32, 128), stationary=a, moving=b),
        "tiny",
        "tensor engine cannot write sbuf",
    )
    check_illegal(
        NcMatmul(
            engine="tensor",
            dst=tile_ap(32, 1024, PSUM),
            stationary=a,
            moving=tile_ap(32, 1024, dtype=BF16),
        ),
        "tiny",
        "moving free size 1024 exceeds 512",
    )
    check_illegal(
        NcMatmul(
            engine="tensor", dst=tile_ap(32, 128, PSUM, offset_bytes=1792), stationary=a, moving=b
        ),
        "tiny",
        "cross a PSUM bank boundary",
    )
    check_illegal(
        NcMatmul(engine="tensor", dst=tile_ap(32, 128, PSUM, dtype=BF16), stationary=a, moving=b),
        "tiny",
        "dst dtype must be fp32",
    )
    check_illegal(
        NcMatmul(engine="tensor", dst=dst, stationary=tile_ap(32, 32), moving=b),
        "tiny",
        "fp32 inputs must be paired with fp32",
    )
    check_illegal(
        NcMatmul(engine="vector", dst=dst, stationary=a, moving=b),
        "tiny",
        "cannot run on engine 'vector'",
    )
    big = load_config("tiny", {"tensor_engine.stationary_free_max": 16})
    check_illegal(
        NcMatmul(engine="tensor", dst=dst, stationary=a, moving=b),
        big,
        "stationary free size 32 exceeds 16",
    )


@pytest.mark.parametrize("engine", ["tensor", "vector"])
def test_nc_transpose_numerics_and_cost(engine):
    x = RNG.standard_normal((8, 20 if engine == "tensor" else 32)).astype(np.float32)
    p, f = x.shape
    memory = PSUM if engine == "tensor" else MemorySpace.SBUF
    run = run_single(
        lambda aps: NcTranspose(engine=engine, dst=aps["y"], src=aps["x"]),
        {"x": inp(x, FP32)},
        {"y": out((f, p), FP32, memory)},
    )
    np.testing.assert_array_equal(run.outputs["y"], x.T)
    if engine == "tensor":  # max(P, min(16, F)) = max(8, 16) cycles [S16], + result latency 32
        assert_timing(run, 16, 16 + 32)
    else:  # VectorE max(MIN_II, N) = max(16, 32) = 32 cycles x 2 ticks, + 10 cycles latency
        assert_timing(run, 64, 64 + 20)


def test_nc_transpose_legality():
    check_illegal(
        NcTranspose(engine="vector", dst=tile_ap(32, 8), src=tile_ap(8, 33, offset_bytes=1024)),
        "tiny",
        "exceeds the 32x32 transpose limit of vector",
    )
    check_illegal(
        NcTranspose(engine="tensor", dst=tile_ap(20, 8, PSUM), src=tile_ap(8, 16)),
        "tiny",
        "dst shape (20, 8) must be [16, 8]",
    )


@pytest.mark.parametrize(
    ("src", "dst"), [(FP32, BF16), (FP32, FP8_E4M3), (BF16, FP32), (FP32, INT32)]
)
@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_tensor_copy_casts_with_hardware_rounding(src, dst, engine):
    x = (RNG.standard_normal((6, 10)) * 50).astype(np.float32)
    run = run_single(
        lambda aps: TensorCopy(engine=engine, dst=aps["y"], src=aps["x"]),
        {"x": inp(x, src)},
        {"y": out((6, 10), dst)},
    )
    assert_ulps(run.outputs["y"], rounded(x, src), dst)


def test_tensor_copy_cost_and_v3_performance_mode():
    def cost(config, dtype):
        run = run_single(
            lambda aps: TensorCopy(engine="vector", dst=aps["y"], src=aps["x"]),
            {"x": inp(np.ones((32, 256)), dtype)},
            {"y": out((32, 256), dtype)},
            config=config,
            numerics=False,
        )
        return run.issue_ticks

    assert cost("tiny", FP32) == 256 * 2  # max(16, 256) cycles
    fast = load_config("tiny", {"vector_engine.performance_mode": True})
    assert cost(fast, BF16) == 64 * 2  # 4x: both SBUF, 16-bit, contiguous [S2]
    assert cost(fast, FP32) == 256 * 2


def test_tensor_copy_legality():
    check_illegal(
        TensorCopy(engine="gpsimd", dst=tile_ap(4, 4), src=tile_ap(4, 4, PSUM)),
        "tiny",
        "gpsimd engine cannot read psum",
    )
    check_illegal(
        TensorCopy(engine="vector", dst=tile_ap(4, 5), src=tile_ap(4, 4, offset_bytes=64)),
        "tiny",
        "shapes (4, 4) and (4, 5) differ",
    )
    check_illegal(
        TensorCopy(engine="scalar", dst=tile_ap(4, 4), src=tile_ap(4, 4, offset_bytes=64)),
        "trn1",
        "no tensor_copy on NeuronCore-v2",
    )
    check_illegal(
        TensorCopy(engine="vector", dst=tile_ap(4, 4, offset_bytes=2), src=tile_ap(4, 4)),
        "tiny",
        "offset 2 B is not aligned",
    )
    check_illegal(
        TensorCopy(engine="vector", dst=tile_ap(4, 4, offset_bytes=16380), src=tile_ap(4, 4)),
        "tiny",
        "outside sbuf's 16384 bytes per partition",
    )


def _dma_run(src_values, src_dtype, dst_dtype, transpose=False, config="tiny"):
    b = ProgramBuilder()
    p, f = src_values.shape
    b.program.add_tensor("x", (p, f), src_dtype, "input", src_values)
    out_shape = (f, p) if transpose else (p, f)
    b.program.add_tensor("y", out_shape, dst_dtype, "output")
    tile = contiguous(MemorySpace.SBUF, dst_dtype, out_shape[0], out_shape[1])
    cls = DmaTranspose if transpose else DmaCopy
    b.emit(cls(engine="sync", dst=tile, src=contiguous(HBM, src_dtype, p, f, tensor="x"), queue=0))
    b.emit(
        DmaCopy(
            engine="sync", dst=contiguous(HBM, dst_dtype, *out_shape, tensor="y"), src=tile, queue=1
        )
    )
    return run(b.build(), config, race_check=True)


def test_dma_copy_casts_via_fp32():
    x = RNG.standard_normal((32, 16)).astype(np.float32)
    result = _dma_run(x, FP32, BF16)
    assert np.array_equal(result.outputs["y"], x.astype(ml_dtypes.bfloat16))


def test_dma_transpose_numerics_and_bandwidth_fraction():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    fast = load_config("tiny", {"hbm.bandwidth_bytes_per_ns_per_stack": 10_000})
    result = _dma_run(x, BF16, BF16, transpose=True, config=fast)
    assert np.array_equal(result.outputs["y"], x.astype(ml_dtypes.bfloat16).T)
    # dst has 32 partitions -> 8 per engine = 8 descriptors of 16 x 2 B = 256 B per piece at
    # 4 B/ns x 0.5 = 128 ns, then the semaphore write (4 B at full speed, 1 ns)
    first = [d for d in result.trace.dma if d.trigger_pc == 0]
    assert all(d.end_tick - d.start_tick == 129 for d in first)


def test_dma_legality_errors():
    hbm = contiguous(HBM, FP32, 4, 4, tensor="x")
    check_illegal(
        DmaCopy(engine="sync", dst=tile_ap(4, 4, PSUM), src=hbm),
        "tiny",
        "DMA moves between HBM and SBUF, not psum",
    )
    check_illegal(
        DmaCopy(engine="sync", dst=tile_ap(4, 4), src=hbm, queue=9),
        "tiny",
        "queue 9 does not exist (DMA engines have queues 0..3)",
    )
    check_illegal(
        DmaCopy(engine="sync", dst=tile_ap(4, 5), src=hbm),
        "tiny",
        "src shape (4, 4) and dst shape (4, 5)",
    )
    check_illegal(
        DmaTranspose(engine="sync", dst=tile_ap(4, 4), src=hbm), "tiny", "2-byte dtypes only"
    )


def test_hbm_out_of_bounds_and_unknown_tensor_are_errors():
    from hwsim.errors import MemoryAccessError

    b = ProgramBuilder()
    b.program.add_tensor("x", (4, 4), FP32, "input", np.zeros((4, 4), np.float32))
    b.emit(
        DmaCopy(
            engine="sync",
            dst=tile_ap(4, 8),
            src=AccessPattern(HBM, FP32, 0, 4, 0, (8,), (1,), 8, "x"),
        )
    )
    with pytest.raises(
        MemoryAccessError, match=r"bytes \[0, 128\) fall outside HBM tensor 'x' \(64 bytes"
    ):
        run(b.build(), "tiny")
    b = ProgramBuilder()
    b.emit(
        DmaCopy(engine="sync", dst=tile_ap(4, 4), src=contiguous(HBM, FP32, 4, 4, tensor="nope"))
    )
    with pytest.raises(MemoryAccessError, match="HBM tensor 'nope', not declared"):
        run(b.build(), "tiny")

"""The kernel language: indexing to access patterns, allocation and reuse, auto-sync, errors."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from hwsim import lang
from hwsim.errors import HwsimError, IllegalInstructionError
from hwsim.isa import MemorySpace
from hwsim.lang import isa as nisa


def build(fn, *args, config="tiny"):
    return lang.kernel(fn).build(*args, config=config)


def test_views_become_hardware_access_patterns():
    seen = {}

    def body(x):
        tile = lang.ndarray((32, 8, 16), lang.float32)
        seen["full"] = tile.ap()
        seen["slice"] = tile[4:12, 2, ::2].ap()
        seen["hbm"] = x[10:20, 4:8].ap()
        seen["row"] = x[3].ap()

    build(body, lang.TensorSpec((64, 40), "bf16"))
    full, part, hbm, row = seen["full"], seen["slice"], seen["hbm"], seen["row"]
    assert (full.memory, full.partitions, full.free_sizes, full.free_strides) == (
        MemorySpace.SBUF,
        32,
        (8, 16),
        (16, 1),
    )
    assert (part.start_partition, part.partitions, part.free_sizes, part.free_strides) == (
        4,
        8,
        (8,),
        (2,),
    )
    assert part.offset_bytes == full.offset_bytes + 2 * 16 * 4
    assert (hbm.tensor, hbm.partitions, hbm.partition_stride, hbm.free_sizes) == ("x", 10, 40, (4,))
    assert hbm.offset_bytes == (10 * 40 + 4) * 2
    assert (row.partitions, row.free_sizes, row.offset_bytes) == (1, (40,), 3 * 40 * 2)


def test_bad_indexing_is_a_clear_error():
    def body():
        tile = lang.ndarray((32, 8), lang.float32)
        tile[0:32:2].ap()

    with pytest.raises(IllegalInstructionError, match="partition dimension cannot be strided"):
        build(body)

    def out_of_range():
        lang.ndarray((32, 8), lang.float32)[0, 9]

    with pytest.raises(IllegalInstructionError, match="index 9 out of range for size 8"):
        build(out_of_range)


def test_pool_reuses_memory_of_dead_tiles_and_reports_live_tiles_when_full():
    offsets = []

    def body():
        for _ in range(3):
            tile = lang.ndarray((32, 1024), lang.float32)  # 4 KiB per partition
            offsets.append(tile.offset_bytes)
            del tile

    build(body)
    assert offsets == [0, 0, 0]

    def too_much():
        # Tiles are freed after their last use and spilled when live ones do not fit
        # (test_memory_plan.py); what cannot fit is one instruction's operands together.
        big = [lang.ndarray((32, 1536), lang.float32, name=f"big{i}") for i in range(3)]
        for tile in big[:2]:
            nisa.memset(tile, 1.0)
        nisa.tensor_tensor(big[2], big[0], big[1], nisa.AluOp.add)

    with pytest.raises(lang.OutOfMemoryError) as error:
        build(too_much)  # tiny has 16 KiB per partition: three 6 KiB operands do not fit
    message = str(error.value)
    assert "out of SBUF" in message and "needs 6144 bytes" in message
    assert "Live tiles: big" in message and "tensor_tensor at test_lang.py:" in message


def test_explicit_placement_and_overlap_error():
    def body():
        a = lang.ndarray((32, 16), lang.float32, offset=1024)
        assert a.offset_bytes == 1024
        lang.ndarray((32, 16), lang.float32, offset=1056)

    with pytest.raises(lang.OutOfMemoryError, match="overlaps live tile"):
        build(body)


def test_psum_tiles_take_whole_banks():
    offsets = []

    def body():
        a = lang.ndarray((32, 16), lang.float32, buffer=lang.psum)
        b = lang.ndarray((32, 16), lang.float32, buffer=lang.psum)
        offsets.extend([a.offset_bytes, b.offset_bytes])

    build(body)
    assert offsets == [0, 2048]  # tiny: 4 banks of 2 KiB


def test_builder_inserts_raw_war_waw_semaphores():
    def body(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        tile = lang.ndarray((32, 16), lang.float32)
        nisa.dma_copy(tile, x, queue=0)  # writes tile (DMA queue 0)
        nisa.tensor_copy(tile, tile, engine="vector")  # RAW on the DMA; WAW
        nisa.tensor_scalar(tile, tile, nisa.AluOp.add, 1.0, engine="gpsimd")  # RAW on vector
        nisa.dma_copy(out, tile, queue=1)  # RAW on gpsimd
        nisa.dma_copy(x, tile, queue=2)  # also WAR on the input x, which queue 0 read

    program = build(body, lang.TensorSpec((32, 16))).program
    streams = program.cores[0].streams
    assert streams["vector"][0].waits == (("S.dma.q0", 1),)
    assert streams["gpsimd"][0].waits == (("S.vector", 1),)
    assert streams["sync"][1].waits == (("S.gpsimd", 1),)
    # the sync stream already waited for gpsimd; the WAR on x adds only the reader's queue
    assert streams["sync"][2].waits == (("S.dma.q0", 1),)
    assert streams["sync"][0].signals == (("S.dma.q0", 1),)


def test_kernel_runs_with_numerics_and_race_checker():
    @lang.kernel
    def scale_rows(x, factor):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        for p0 in range(0, x.shape[0], 32):
            tile = lang.load(x[p0 : p0 + 32])
            nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, factor)
            lang.store(out[p0 : p0 + 32], tile)
        return out

    x = np.arange(64 * 24, dtype=np.float32).reshape(64, 24).astype(ml_dtypes.bfloat16)
    result = scale_rows(x, 0.5, config="tiny", race_check=True)
    expected = (x.astype(np.float32) * 0.5).astype(ml_dtypes.bfloat16)
    assert result.output.dtype == ml_dtypes.bfloat16
    assert np.array_equal(result.output, expected)
    assert result.summary.total_ns > 0
    tags = {r.instruction.tag for r in result.trace.instructions}
    assert any(tag.startswith("scale_rows:test_lang.py:") for tag in tags)


def test_timing_only_build_from_specs_needs_no_data():
    @lang.kernel
    def copy(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        lang.store(out, lang.load(x))
        return out

    result = copy(lang.TensorSpec((32, 64), "bf16"), config="tiny", numerics=False)
    assert result.outputs == ()
    assert result.summary.total_ns > 0


def test_calls_outside_a_kernel_and_bad_returns_are_clear_errors():
    with pytest.raises(HwsimError, match="inside a function decorated"):
        lang.ndarray((4, 4), lang.float32)

    def returns_sbuf():
        return lang.ndarray((4, 4), lang.float32)

    with pytest.raises(HwsimError, match="must return HBM tiles"):
        build(returns_sbuf)

    def too_many_partitions():
        lang.ndarray((33, 4), lang.float32)

    with pytest.raises(IllegalInstructionError, match="must be <= 32"):
        build(too_many_partitions)
    gc.collect()


def test_scan_calls_and_onezero_flags_take_nki_argument_names():
    @lang.kernel
    def calls(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        t = lang.load(x)
        s = lang.ndarray(x.shape, lang.float32)
        nisa.tensor_tensor_scan(s, t, t, 0.0, nisa.AluOp.multiply, nisa.AluOp.add, reverse1=True)
        red = lang.ndarray((x.shape[0], 1), lang.float32)
        nisa.tensor_scalar_reduce(s, s, nisa.AluOp.add, 1.0, nisa.ReduceOp.max, red)
        nisa.tensor_scalar_cumulative(
            s, s, nisa.AluOp.multiply, nisa.AluOp.add, 2.0, imm1=red,
            reduce_cmd=nisa.reduce_cmd.load_reduce,
        )  # fmt: skip
        ps = lang.ndarray((x.shape[1], x.shape[1]), lang.float32, buffer=lang.psum)
        nisa.nc_matmul(ps, s[:, : x.shape[1]], s[:, : x.shape[1]], True, False)
        lang.store(out, s)
        return out

    program = calls.build(lang.TensorSpec((8, 16), "fp32"), config="tiny").program
    by_opcode = {i.OPCODE: i for _, _, i in program.cores[0].instructions()}
    scan = by_opcode["tensor_tensor_scan"]
    assert (scan.op0, scan.op1, scan.initial, scan.reverse0, scan.reverse1) == (
        nisa.AluOp.multiply, nisa.AluOp.add, 0.0, False, True
    )  # fmt: skip
    assert by_opcode["tensor_scalar_reduce"].reduce_op is nisa.ReduceOp.max
    cumulative = by_opcode["tensor_scalar_cumulative"]
    assert cumulative.reduce_cmd is nisa.reduce_cmd.load_reduce
    assert cumulative.imm1 == by_opcode["tensor_scalar_reduce"].reduce_dst
    matmul = by_opcode["nc_matmul"]
    assert (matmul.is_stationary_onezero, matmul.is_moving_onezero) == (True, False)


def test_a_read_of_part_of_a_tile_orders_only_writes_to_that_part():
    """A read of a slice of a wider write is recorded on the bytes it read: a later write to
    the rest of the tile (a new tile reusing that memory) does not wait for it (no false WAR),
    while a write to the slice read still does."""

    def body(x):
        tile = lang.ndarray((32, 16), lang.float32)
        nisa.dma_copy(tile, x, queue=0)  # writes all of tile
        half = lang.ndarray((32, 8), lang.float32)
        nisa.tensor_copy(half, tile[:, 0:8], engine="vector")  # reads the left half
        nisa.dma_copy(tile[:, 8:16], x[:, 8:16], queue=1)  # right half: WAW on q0 only
        nisa.dma_copy(tile[:, 0:8], x[:, 0:8], queue=2)  # left half: WAR on the vector read

    streams = build(body, lang.TensorSpec((32, 16))).program.cores[0].streams
    assert streams["vector"][0].waits == (("S.dma.q0", 1),)
    assert streams["sync"][1].waits == (("S.dma.q0", 1),)
    # (the sync stream already waited for q0; the WAR on the vector read is what remains)
    assert streams["sync"][2].waits == (("S.vector", 1),)


def test_a_flat_read_finds_the_writes_of_a_tensor_binned_by_rows():
    """A read whose bytes form no row box of the tensor's pitch (one element for every
    partition, partition stride 0) still waits for the write of those bytes: a regression of
    the builder's bins, which compared such a read against row boxes as if it were one."""
    from hwsim.dtypes import FP32
    from hwsim.isa.ap import AccessPattern, MemorySpace

    def body(x):
        lang.ndarray((8, 16), lang.float32, buffer=lang.hbm, name="out")
        rows = lang.ndarray((8, 16), lang.float32)
        nisa.dma_copy(rows, x, queue=0)
        # rows 0-1, columns 8-11 of out: a box of the tensor's 64-byte pitch
        box = AccessPattern(MemorySpace.HBM, FP32, 0, 2, 32, (4,), (1,), 16, "out")
        nisa.dma_copy(box, rows[0:2, 0:4], queue=1)
        # row 1, column 10 (byte 104), read by 4 partitions: a flat interval, in no bin
        spread = AccessPattern(MemorySpace.HBM, FP32, 0, 4, 104, (1,), (1,), 0, "out")
        col = lang.ndarray((4, 1), lang.float32)
        nisa.dma_copy(col, spread, queue=2)

    streams = build(body, lang.TensorSpec((8, 16))).program.cores[0].streams
    assert ("S.dma.q1", 1) in streams["sync"][2].waits

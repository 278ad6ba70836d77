"""Exact-tick tests of the engine model, DMA, semaphores, deadlock and race detection.

All on the ``tiny`` preset: base clock 1000 MHz (1 tick = 1 ns), TensorE 1 tick/cycle, the other
engines 2 ticks/cycle, 4 DMA engines at 4 B/ns with no efficiency loss (a descriptor of b bytes
takes b / 4 ns, at least 1 ns: every piece ends with the 4-byte completion semaphore write, 1 ns),
DMA start latency 100 ns, trigger 10 ns, HBM 8 B/ns. Every expected number below is worked out by
hand from the cost formulas.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32
from hwsim.errors import DeadlockError, RaceError
from hwsim.isa import MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.tensor_ops import NcMatmul
from hwsim.machine.simulator import run
from hwsim.program import Program

SBUF, PSUM, HBM = MemorySpace.SBUF, MemorySpace.PSUM, MemorySpace.HBM


def records_by(result, engine):
    return [r for r in result.trace.instructions if r.engine == engine]


def matmul(offset_psum: int = 0, n: int = 128) -> NcMatmul:
    return NcMatmul(
        engine="tensor",
        dst=contiguous(PSUM, FP32, 32, n, offset_bytes=offset_psum),
        stationary=contiguous(SBUF, BF16, 32, 32, offset_bytes=0),
        moving=contiguous(SBUF, BF16, 32, n, offset_bytes=1024),
    )


def test_matmul_issue_and_latency_ticks_and_dependent_start():
    # MM: max(min(16, M=32), N=128) = 128 cycles = 128 ticks; latency + 32 cycles = 160.
    # The PSUM->SBUF copy (VectorE, N=128 fp32): max(16, 128) = 128 cycles x 2 = 256 ticks,
    # pipeline latency 10 cycles = 20 ticks; it starts exactly when the matmul completes.
    b = ProgramBuilder()
    b.emit(matmul())
    b.emit(
        TensorCopy(
            engine="vector",
            dst=contiguous(SBUF, FP32, 32, 128, offset_bytes=4096),
            src=contiguous(PSUM, FP32, 32, 128),
        )
    )
    result = run(b.build(), "tiny", numerics=False)
    (mm,) = records_by(result, "tensor")
    (copy,) = records_by(result, "vector")
    assert (mm.start_tick, mm.end_tick, mm.done_tick) == (0, 128, 160)
    assert copy.ready_tick == 0
    assert (copy.start_tick, copy.end_tick, copy.done_tick) == (160, 416, 436)


def test_back_to_back_independent_matmuls_issue_at_the_interval_not_the_latency():
    b = ProgramBuilder()
    b.emit(matmul(offset_psum=0))
    b.emit(matmul(offset_psum=2048))
    result = run(b.build(), "tiny", numerics=False)
    first, second = records_by(result, "tensor")
    assert second.start_tick == first.end_tick == 128
    assert second.done_tick == 128 + 160


def chained_copies(n: int, engine: str = "vector"):
    """copy1 writes X; copy2 reads X on the same engine (and writes Y, read by nobody)."""
    b = ProgramBuilder()
    x = contiguous(SBUF, FP32, 32, n, offset_bytes=0)
    y = contiguous(SBUF, FP32, 32, n, offset_bytes=1024)
    z = contiguous(SBUF, FP32, 32, n, offset_bytes=2048)
    b.emit(TensorCopy(engine=engine, dst=x, src=z))
    b.emit(TensorCopy(engine=engine, dst=y, src=x))
    return records_by(run(b.build(), "tiny", numerics=False), engine)


def test_a_long_dependent_instruction_streams_behind_its_producer():
    # N=128: issue 128 cycles = 256 ticks >= the pipeline fill (MIN_II 16 + latency 10 = 26
    # cycles = 52 ticks): the dependent copy starts when the first one's issue interval ends,
    # not at its completion (276) — the same engine streams it behind its producer.
    first, second = chained_copies(128)
    assert first.end_tick == 256 and first.done_tick == 276
    assert second.ready_tick == 256 and second.start_tick == 256


def test_a_tiny_dependent_instruction_waits_for_the_pipeline_fill():
    # N=4: issue max(MIN_II 16, 4) = 16 cycles = 32 ticks; the dependent one waits for the fill,
    # MIN_II + latency = 26 cycles = 52 ticks (VectorE); ScalarE's latency is 20: 36 cycles = 72.
    first, second = chained_copies(4)
    assert (first.end_tick, first.done_tick) == (32, 52)
    assert (second.ready_tick, second.start_tick) == (32, 52)
    first, second = chained_copies(4, engine="scalar")
    assert (second.ready_tick, second.start_tick) == (32, 72)


def test_another_engine_waits_for_the_completion_not_the_chain():
    # the same dependency across engines: the consumer waits for the producer's completion.
    b = ProgramBuilder()
    x = contiguous(SBUF, FP32, 32, 128, offset_bytes=0)
    b.emit(
        TensorCopy(engine="vector", dst=x, src=contiguous(SBUF, FP32, 32, 128, offset_bytes=2048))
    )
    b.emit(
        TensorCopy(engine="scalar", dst=contiguous(SBUF, FP32, 32, 128, offset_bytes=1024), src=x)
    )
    result = run(b.build(), "tiny", numerics=False)
    (scalar,) = records_by(result, "scalar")
    assert scalar.start_tick == 276


def test_independent_engines_overlap():
    b = ProgramBuilder()
    b.emit(
        TensorCopy(
            engine="vector",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=0),
            src=contiguous(SBUF, FP32, 32, 64, offset_bytes=1024),
        )
    )
    b.emit(
        TensorCopy(
            engine="gpsimd",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=2048),
            src=contiguous(SBUF, FP32, 32, 64, offset_bytes=3072),
        )
    )
    result = run(b.build(), "tiny", numerics=False)
    assert records_by(result, "vector")[0].start_tick == 0
    assert records_by(result, "gpsimd")[0].start_tick == 0


def dma_program(transfers: int, fp32_cols: int = 64) -> Program:
    b = ProgramBuilder()
    for i in range(transfers):
        name = f"x{i}"
        b.program.add_tensor(
            name, (32, fp32_cols), FP32, "input", np.zeros((32, fp32_cols), np.float32)
        )
        b.emit(
            DmaCopy(
                engine="sync",
                queue=i,
                dst=contiguous(SBUF, FP32, 32, fp32_cols, offset_bytes=i * fp32_cols * 4),
                src=contiguous(HBM, FP32, 32, fp32_cols, tensor=name),
            )
        )
    return b.build()


def dma_completions(result):
    return sorted(u.tick for u in result.trace.semaphore_updates if u.semaphore.startswith("S.dma"))


def test_dma_split_by_partitions_latency_and_engine_bandwidth():
    # 32 partitions over 4 engines = 8 each = 2048 B per piece, 8 descriptors of 256 B (one
    # partition row each): 8 x 64 ns + the 1 ns semaphore write = 513 ns; the pieces arrive
    # 100 ns (start latency) after the trigger. With abundant HBM bandwidth the transfer
    # completes at 100 + 513.
    config = load_config("tiny", {"hbm.bandwidth_bytes_per_ns_per_stack": 10_000})
    result = run(dma_program(1), config, numerics=False)
    pieces = result.trace.dma
    assert [p.dma_engine for p in pieces] == [0, 1, 2, 3]
    assert all(p.transfer_bytes == 2048 and p.descriptors == 8 for p in pieces)
    assert all(p.queued_tick == 100 for p in pieces)
    assert all((p.start_tick, p.end_tick) == (100, 613) for p in pieces)
    assert dma_completions(result) == [613]
    (trigger,) = records_by(result, "sync")
    assert (trigger.start_tick, trigger.end_tick) == (0, 10)


def test_dma_shares_hbm_bandwidth():
    # Engines could move 16 B/ns together but the stack gives 8 B/ns: the four pieces start
    # together and share it, so each ends when the stack has moved all 8 KiB: 100 + 1024.
    result = run(dma_program(1), "tiny", numerics=False)
    assert [p.end_tick for p in result.trace.dma] == [1124] * 4
    assert dma_completions(result) == [1124]


def test_two_transfers_contend_for_hbm_by_the_modelled_amount():
    # Fast engines (1000 B/ns), HBM 8 B/ns: one 8 KiB transfer = 1024 ns after arrival; two on
    # two queues share the stack and the second ends 1024 ns later still.
    config = load_config("tiny", {"dma.bandwidth_bytes_per_ns": 1000})
    one = dma_completions(run(dma_program(1), config, numerics=False))
    two = dma_completions(run(dma_program(2), config, numerics=False))
    assert one == [100 + 1024]
    # the second trigger starts 10 ns later (the sync engine's trigger cost)
    assert two == [100 + 1024, 100 + 2048]


def test_consumer_of_a_dma_starts_exactly_at_its_completion():
    config = load_config("tiny", {"hbm.bandwidth_bytes_per_ns_per_stack": 10_000})
    b = ProgramBuilder()
    b.program.add_tensor("x", (32, 64), FP32, "input", np.ones((32, 64), np.float32))
    tile = contiguous(SBUF, FP32, 32, 64)
    b.emit(DmaCopy(engine="sync", dst=tile, src=contiguous(HBM, FP32, 32, 64, tensor="x")))
    b.emit(
        TensorCopy(engine="vector", dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=4096), src=tile)
    )
    result = run(b.build(), config)
    (copy,) = records_by(result, "vector")
    assert copy.start_tick == 613


def test_deadlock_names_the_blocked_instruction_semaphore_and_values():
    program = Program()
    program.cores[0].streams["vector"].append(
        TensorCopy(
            engine="vector",
            dst=contiguous(SBUF, FP32, 1, 1),
            src=contiguous(SBUF, FP32, 1, 1, offset_bytes=4),
            waits=(("S.never", 3),),
        )
    )
    with pytest.raises(DeadlockError) as error:
        run(program, "tiny", numerics=False)
    message = str(error.value)
    assert "vector[0]" in message and "tensor_copy" in message
    assert "S.never >= 3 (value 0)" in message


def test_race_checker_flags_unordered_writes_and_accepts_builder_programs():
    tile = contiguous(SBUF, FP32, 32, 16)
    program = Program()
    program.cores[0].streams["vector"].append(
        TensorCopy(engine="vector", dst=tile, src=contiguous(SBUF, FP32, 32, 16, offset_bytes=1024))
    )
    program.cores[0].streams["scalar"].append(
        TensorCopy(engine="scalar", dst=tile, src=contiguous(SBUF, FP32, 32, 16, offset_bytes=2048))
    )
    with pytest.raises(RaceError) as error:
        run(program, "tiny", numerics=False, race_check=True)
    assert "vector[0]" in str(error.value) and "scalar[0]" in str(error.value)
    # the same two writes through the builder get a WAW semaphore and no race
    b = ProgramBuilder()
    for instruction in (
        program.cores[0].streams["vector"][0],
        program.cores[0].streams["scalar"][0],
    ):
        b.emit(instruction)
    run(b.build(), "tiny", numerics=False, race_check=True)


def test_race_checker_ignores_disjoint_interleaved_columns():
    even = contiguous(SBUF, FP32, 32, 8)
    even = type(even)(SBUF, FP32, 0, 32, 0, (8,), (2,))
    odd = type(even)(SBUF, FP32, 0, 32, 4, (8,), (2,))
    program = Program()
    program.cores[0].streams["vector"].append(
        TensorCopy(engine="vector", dst=even, src=contiguous(SBUF, FP32, 32, 8, offset_bytes=1024))
    )
    program.cores[0].streams["scalar"].append(
        TensorCopy(engine="scalar", dst=odd, src=contiguous(SBUF, FP32, 32, 8, offset_bytes=2048))
    )
    run(program, "tiny", numerics=False, race_check=True)


def test_runs_are_deterministic():
    from hwsim.workloads.gemm import GemmSpec, build_gemm

    config = load_config("tiny")
    spec = GemmSpec.parse("gemm:70x100x130:bf16")

    def timeline():
        result = run(build_gemm(spec, config), config)
        return (
            [
                (r.engine, r.pc, r.start_tick, r.end_tick, r.done_tick)
                for r in result.trace.instructions
            ],
            [(d.dma_engine, d.queue, d.start_tick, d.end_tick) for d in result.trace.dma],
            result.outputs["c"].tobytes(),
        )

    assert timeline() == timeline()


def test_v2_shared_sbuf_port_serialises_vector_and_gpsimd():
    config = load_config("tiny", {"sbuf.vector_gpsimd_share_access": True})
    b = ProgramBuilder()
    b.emit(
        TensorCopy(
            engine="vector",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=0),
            src=contiguous(SBUF, FP32, 32, 64, offset_bytes=1024),
        )
    )
    b.emit(
        TensorCopy(
            engine="gpsimd",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=2048),
            src=contiguous(SBUF, FP32, 32, 64, offset_bytes=3072),
        )
    )
    result = run(b.build(), config, numerics=False)
    vector = records_by(result, "vector")[0]
    gpsimd = records_by(result, "gpsimd")[0]
    assert vector.start_tick == 0
    assert gpsimd.start_tick == vector.end_tick  # waits for the shared port, not for data


def test_sbuf_to_sbuf_dma_does_not_touch_hbm_bandwidth():
    # 32 partitions x 256 B: 4 engines x 2048 B at 4 B/ns = 512 ns + the semaphore write, even
    # with a tiny HBM stack.
    config = load_config("tiny", {"hbm.bandwidth_bytes_per_ns_per_stack": 0.001})
    b = ProgramBuilder()
    b.emit(
        DmaCopy(
            engine="sync",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=4096),
            src=contiguous(SBUF, FP32, 32, 64),
        )
    )
    result = run(b.build(), config, numerics=False)
    assert all((p.start_tick, p.end_tick) == (100, 613) for p in result.trace.dma)


def test_v2_shared_psum_port_serialises_vector_and_scalar():
    config = load_config("tiny", {"psum.vector_scalar_share_access": True})
    b = ProgramBuilder()
    b.emit(
        TensorCopy(
            engine="vector",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=0),
            src=contiguous(PSUM, FP32, 32, 64, offset_bytes=0),
        )
    )
    b.emit(
        TensorCopy(
            engine="scalar",
            dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=1024),
            src=contiguous(PSUM, FP32, 32, 64, offset_bytes=2048),
        )
    )
    result = run(b.build(), config, numerics=False)
    vector, scalar = records_by(result, "vector")[0], records_by(result, "scalar")[0]
    assert (vector.start_tick, scalar.start_tick) == (0, vector.end_tick)


def test_two_cores_share_their_hbm_stack():
    # trn2 puts 2 cores on a stack: the same transfer on both cores contends for its bandwidth.
    fast_engines = {"dma.bandwidth_bytes_per_ns": 1000, "hbm.bandwidth_bytes_per_ns_per_stack": 8}
    config = load_config("trn2", fast_engines)

    def program(cores):
        b = ProgramBuilder(cores=cores)
        b.program.add_tensor("x", (128, 64), FP32, "input", np.zeros((128, 64), np.float32))
        for core in range(cores):
            b.emit(
                DmaCopy(
                    engine="sync",
                    dst=contiguous(SBUF, FP32, 128, 64),
                    src=contiguous(HBM, FP32, 128, 64, tensor="x"),
                ),
                core=core,
            )
        return b.build()

    one = dma_completions(run(program(1), config, numerics=False))
    two = dma_completions(run(program(2), config, numerics=False))
    hbm_ns = 128 * 64 * 4 / 8  # 4096 ns for one core's 32 KiB at 8 B/ns
    assert len(two) == 2
    assert one[0] * 1000 / 4800 >= hbm_ns
    assert (two[1] - two[0]) * 1000 / 4800 == pytest.approx(hbm_ns, rel=0.01)


def placed_program(place: bool) -> Program:
    """A long read of scratch ``a`` on queue 0 (triggered by sync) and a write of scratch ``c``
    on queue 1 (triggered by gpsimd). Nothing relates them unless ``c`` is placed over ``a``."""
    b = ProgramBuilder()
    b.program.add_tensor("a", (32, 1024), FP32, "scratch")
    b.program.add_tensor("c", (32, 1024), FP32, "scratch")
    b.emit(
        DmaCopy(
            engine="sync",
            queue=0,
            dst=contiguous(SBUF, FP32, 32, 1024),
            src=contiguous(HBM, FP32, 32, 1024, tensor="a"),
        )
    )
    if place:
        b.place_hbm("a", 0, [])
        b.place_hbm("c", 0, ["a"])
    b.emit(
        DmaCopy(
            engine="gpsimd",
            queue=1,
            dst=contiguous(HBM, FP32, 32, 1024, tensor="c"),
            src=contiguous(SBUF, FP32, 32, 1024, offset_bytes=4096),
        )
    )
    return b.build()


@pytest.mark.parametrize("place", [False, True])
def test_a_tensor_placed_over_another_waits_for_its_reads(place):
    program = placed_program(place)
    write = program.cores[0].streams["gpsimd"][0]
    assert write.waits == ((("S.dma.q0", 1),) if place else ())
    result = run(program, "tiny", numerics=False)
    read_end = max(p.end_tick for p in result.trace.dma if p.queue == 0)
    write_start = min(p.start_tick for p in result.trace.dma if p.queue == 1)
    assert (write_start >= read_end) == place
    # Capacity counts the arena once: two 128 KiB tensors in 128 KiB.
    assert program.scratch_arena_bytes == (32 * 1024 * 4 if place else 0)


def test_triggers_from_two_engines_on_one_queue_complete_in_emission_order():
    """A queue's semaphore counts completions in arrival order. ScalarE triggers a transfer
    late (it is busy first), GpSimdE triggers the next one at once: unless the second waits for
    the first, it completes first, and the reader of the first transfer (waiting for completion
    1) would read its tile before it arrives."""
    b = ProgramBuilder()
    for name in ("x", "y"):
        b.program.add_tensor(name, (32, 64), FP32, "input", np.ones((32, 64), np.float32))
    busy_src = contiguous(SBUF, FP32, 32, 1024, offset_bytes=4096)
    busy_dst = contiguous(SBUF, FP32, 32, 1024, offset_bytes=8192)
    b.emit(TensorCopy(engine="scalar", dst=busy_dst, src=busy_src))
    x_tile = contiguous(SBUF, FP32, 32, 64)
    y_tile = contiguous(SBUF, FP32, 32, 64, offset_bytes=256)
    x = contiguous(HBM, FP32, 32, 64, tensor="x")
    b.emit(DmaCopy(engine="scalar", queue=0, dst=x_tile, src=x))
    y = contiguous(HBM, FP32, 32, 64, tensor="y")
    second = b.emit(DmaCopy(engine="gpsimd", queue=0, dst=y_tile, src=y))
    out = contiguous(SBUF, FP32, 32, 64, offset_bytes=512)
    b.emit(TensorCopy(engine="vector", dst=out, src=x_tile))
    assert second.waits == (("S.dma.q0", 1),)
    # The busy copy reads SBUF nothing wrote (only its duration matters): no initcheck.
    result = run(b.build(), "tiny", race_check=True, initcheck=False)  # raised RaceError before
    first_done, second_start = (
        sorted(p.end_tick for p in result.trace.dma)[0],
        max(p.start_tick for p in result.trace.dma),
    )
    assert second_start >= first_done


def test_a_dma_trigger_before_the_producer_does_not_count_as_the_producer():
    # VectorE: a DMA trigger (it signals its queue, not S.vector), a tiny copy A -> B (issue
    # MIN_II 16 cycles = 32 ticks), then a copy reading B: it waits for the copy's pipeline fill,
    # (16 + 10) cycles = 52 ticks after its start, not for the trigger's.
    b = ProgramBuilder()
    b.program.add_tensor("x", (32, 4), FP32, "input", np.zeros((32, 4), np.float32))
    a_tile, b_tile, c_tile = (contiguous(SBUF, FP32, 32, 4, offset_bytes=o) for o in (0, 64, 128))
    dst = contiguous(SBUF, FP32, 32, 4, offset_bytes=256)
    b.emit(DmaCopy(engine="vector", dst=dst, src=contiguous(HBM, FP32, 32, 4, tensor="x")))
    b.emit(TensorCopy(engine="vector", dst=b_tile, src=a_tile))
    b.emit(TensorCopy(engine="vector", dst=c_tile, src=b_tile))
    trigger, copy1, copy2 = records_by(run(b.build(), "tiny", numerics=False), "vector")
    assert trigger.instruction.IS_DMA and copy1.end_tick == copy1.start_tick + 32
    assert copy2.start_tick == copy1.start_tick + 52


def test_accumulating_matmuls_issue_back_to_back():
    # The second matmul accumulates onto the first's PSUM tile (a RAW on the same engine): it
    # issues when the first's issue interval ends (128), not at its result latency (160).
    b = ProgramBuilder()
    first = matmul()
    b.emit(first)
    b.emit(replace(first, accumulate=True))
    one, two = records_by(run(b.build(), "tiny", numerics=False), "tensor")
    assert (one.end_tick, one.done_tick) == (128, 160) and two.start_tick == 128


def test_race_checker_sees_a_wait_for_zero_as_no_ordering():
    # A wait for S.vector >= 0 holds from the start: it orders the scalar write after nothing, so
    # the two writes of one tile still race. Waiting for 1 (vector's increment) orders them.
    tile = contiguous(SBUF, FP32, 32, 16)

    def program_waiting_for(value: int) -> Program:
        program = Program()
        program.cores[0].streams["vector"].append(
            TensorCopy(
                engine="vector",
                dst=tile,
                src=contiguous(SBUF, FP32, 32, 16, offset_bytes=1024),
                signals=(("S.vector", 1),),
            )
        )
        program.cores[0].streams["scalar"].append(
            TensorCopy(
                engine="scalar",
                dst=tile,
                src=contiguous(SBUF, FP32, 32, 16, offset_bytes=2048),
                waits=(("S.vector", value),),
            )
        )
        return program

    with pytest.raises(RaceError) as error:
        run(program_waiting_for(0), "tiny", numerics=False, race_check=True)
    assert "vector[0]" in str(error.value) and "scalar[0]" in str(error.value)
    run(program_waiting_for(1), "tiny", numerics=False, race_check=True)

"""Hand-built traces for the trace/stats/plot tests: fake instructions with fixed bytes and FLOPs,
and records whose ticks are chosen so every statistic can be computed by hand."""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32
from hwsim.engines import engine_names
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.base import Instruction
from hwsim.trace.records import DmaRecord, InstructionRecord, SemaphoreUpdate, Trace

TRN2 = load_config("trn2")
BASE_MHZ = 4800  # trn2 time base: lcm(2400, 960, 1200, 1200) MHz


@dataclass(frozen=True, kw_only=True)
class FakeOp(Instruction):
    """A compute instruction with explicit operands and FLOPs."""

    OPCODE = "fake_op"
    PROFILER_OPCODE = "FAKE_OP"
    ENGINES = engine_names()

    src: AccessPattern | None = None
    dst: AccessPattern | None = None
    n_flops: int = 0

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.src,) if self.src else ()

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.dst,) if self.dst else ()

    def flops(self) -> int:
        return self.n_flops


@dataclass(frozen=True, kw_only=True)
class FakeMatmul(FakeOp):
    OPCODE = "fake_matmul"
    PROFILER_OPCODE = "MATMUL"


@dataclass(frozen=True, kw_only=True)
class FakeDma(FakeOp):
    OPCODE = "fake_dma"
    PROFILER_OPCODE = "DMA_DIRECT2D"
    IS_DMA = True
    queue: int = 0


def sbuf(partitions: int, free: int, offset: int = 0, dtype=BF16) -> AccessPattern:
    return contiguous(MemorySpace.SBUF, dtype, partitions, free, offset_bytes=offset)


def psum(partitions: int, free: int, offset: int = 0) -> AccessPattern:
    return contiguous(MemorySpace.PSUM, FP32, partitions, free, offset_bytes=offset)


def hbm(name: str, partitions: int, free: int) -> AccessPattern:
    return contiguous(MemorySpace.HBM, BF16, partitions, free, tensor=name)


#: FLOPs of the matmul in ``small_trace``: 2 x 128 x 128 x 512, which is 10.24% MFU over its run.
MATMUL_FLOPS = 2 * 128 * 128 * 512


def small_trace() -> Trace:
    """Load A -> matmul -> vector copy -> store C, plus one independent GpSimdE op. T = 10000 ticks.

    sync[0]   load A (HBM -> SBUF a, 64 KiB)   0..1000; pieces e0,e1 q0 1000..4000; S.dma.q0=1
    tensor[0] matmul a -> p, S.dma.q0>=1       ready 0, start 4000, end 6000, done 6500; S.tensor=1
    vector[0] copy p -> b, S.tensor>=1         ready 0, start 6500, end 7500, done 8000; S.vector=1
    sync[1]   store b -> C, S.vector>=1        ready 1000, start 8000, end 8500; q1 8500..10000
    gpsimd[0] op on d                          0..500, done 600
    """
    load = FakeDma(
        engine="sync",
        src=hbm("A", 128, 256),
        dst=sbuf(128, 256),
        signals=(("S.dma.q0", 1),),
        queue=0,
        tag="load A",
    )
    matmul = FakeMatmul(
        engine="tensor",
        src=sbuf(128, 256),
        dst=psum(128, 512),
        waits=(("S.dma.q0", 1),),
        signals=(("S.tensor", 1),),
        n_flops=MATMUL_FLOPS,
        tag="matmul",
    )
    copy = FakeOp(
        engine="vector",
        src=psum(128, 512),
        dst=sbuf(128, 256, offset=512),
        waits=(("S.tensor", 1),),
        signals=(("S.vector", 1),),
        tag="epilogue",
    )
    store = FakeDma(
        engine="sync",
        src=sbuf(128, 256, offset=512),
        dst=hbm("C", 128, 256),
        waits=(("S.vector", 1),),
        signals=(("S.dma.q1", 1),),
        queue=1,
        tag="store C",
    )
    side = FakeOp(engine="gpsimd", src=sbuf(128, 32, offset=4096), dst=sbuf(128, 32, offset=4096))
    instructions = [
        InstructionRecord(0, "tensor", 0, matmul, 0, 4000, 6000, 6500),
        InstructionRecord(0, "vector", 0, copy, 0, 6500, 7500, 8000),
        InstructionRecord(0, "gpsimd", 0, side, 0, 0, 500, 600),
        InstructionRecord(0, "sync", 0, load, 0, 0, 1000, 1000),
        InstructionRecord(0, "sync", 1, store, 1000, 8000, 8500, 8500),
    ]
    dma = [
        DmaRecord(0, 0, 0, "sync", 0, 0, 32768, 128, 1000, 1000, 4000),
        DmaRecord(0, 1, 0, "sync", 0, 1, 32768, 128, 1000, 1000, 4000),
        DmaRecord(0, 0, 1, "sync", 1, 0, 32768, 128, 8500, 8500, 10000),
        DmaRecord(0, 1, 1, "sync", 1, 1, 32768, 128, 8500, 8500, 10000),
    ]
    updates = [
        SemaphoreUpdate(0, 4000, "S.dma.q0", 1, "dma", 0),
        SemaphoreUpdate(0, 6500, "S.tensor", 1, "tensor", 0),
        SemaphoreUpdate(0, 8000, "S.vector", 1, "vector", 0),
        SemaphoreUpdate(0, 10000, "S.dma.q1", 1, "dma", 1),
    ]
    allocations = [
        (0, "sbuf", "a", 0, 128, 0, 512),
        (0, "sbuf", "b", 0, 128, 512, 512),
        (0, "sbuf", "d", 0, 128, 4096, 64),
        (0, "psum", "p", 0, 128, 0, 2048),
        (0, "sbuf", "unused", 0, 128, 8192, 1024),
    ]
    return Trace(
        base_mhz=BASE_MHZ,
        config=TRN2,
        instructions=instructions,
        dma=dma,
        semaphore_updates=updates,
        memory_allocations=allocations,
        meta={"workload": "small", "config_name": "trn2"},
    )


def pipeline_trace(
    steps: int,
    *,
    dma_ticks: int = 3000,
    matmul_ticks: int = 2000,
    gap_ticks: int = 0,
    dma_engines: int = 16,
    phases: bool = False,
    descriptors: int = 8,
    trigger: int = 600,
) -> Trace:
    """A double-buffered load -> matmul -> evacuate loop of ``steps`` iterations, with ``steps*3``
    instructions and ``steps*dma_engines`` DMA pieces; instruction objects are shared between
    iterations, as in unrolled kernels. Ticks are consistent: each engine is in order, every wait
    starts at the releasing update.

    dma_ticks > matmul_ticks makes it DMA-bound, the reverse compute-bound; gap_ticks adds
    semaphore latency between a producer's done and the consumer (latency-bound when large).
    phases=True makes the "mlp" phases compute-heavy (matmul x2, DMA /2) and every third "attn"
    phase latency-bound, so long traces have visible structure. Each piece moves 64 KiB /
    dma_engines bytes in ``descriptors`` descriptors; a load's trigger occupies Sync ``trigger``.
    """
    tags = ["layer0.attn", "layer0.mlp", "layer1.attn", "layer1.mlp"]
    loads = [
        FakeDma(
            engine="sync",
            src=hbm("W", 128, 256),
            dst=sbuf(128, 256, offset=2048 * (k % 2)),
            signals=(("S.dma.q0", 1),),
            tag=tags[k % 4],
        )
        for k in range(4)
    ]
    instructions, dma, updates = [], [], []
    sync_free = tensor_free = vector_free = 0
    load_done: list[int] = []
    matmul_done: list[int] = []
    vector_done: list[int] = []
    latency = 500
    for i in range(steps):
        phase = i // max(1, steps // 8)
        tag = tags[phase % 4]
        step_dma, step_mm, step_gap = dma_ticks, matmul_ticks, gap_ticks
        if phases and "mlp" in tag:
            step_dma, step_mm = dma_ticks // 2, matmul_ticks * 2
        elif phases and phase % 3 == 2:
            step_gap = gap_ticks + 4 * dma_ticks
        # sync: wait until the buffer is free (the matmul two iterations back is done)
        need = matmul_done[i - 2] + step_gap if i >= 2 else 0
        start = max(sync_free, need)
        load = loads[i % 4]
        waits = (("S.tensor", i - 1),) if i >= 2 else ()
        instructions.append(
            InstructionRecord(
                0,
                "sync",
                i,
                _with(load, waits, tag),
                sync_free,
                start,
                start + trigger,
                start + trigger,
            )
        )
        sync_free = start + trigger
        queued = start + trigger
        piece_start = max(queued, load_done[-1] if load_done else 0)
        piece_end = piece_start + step_dma
        for e in range(dma_engines):
            dma.append(
                DmaRecord(
                    0,
                    e,
                    0,
                    "sync",
                    i,
                    e,
                    65536 // dma_engines,
                    descriptors,
                    queued,
                    piece_start,
                    piece_end,
                )
            )
        load_done.append(piece_end)
        updates.append(SemaphoreUpdate(0, piece_end, "S.dma.q0", i + 1, "dma", i))
        # tensor: wait for the load
        ready = tensor_free
        start = max(ready, piece_end + step_gap)
        matmul = FakeMatmul(
            engine="tensor",
            src=sbuf(128, 256, offset=2048 * (i % 2)),
            dst=psum(128, 512, offset=2048 * (i % 2)),
            waits=(("S.dma.q0", i + 1),),
            signals=(("S.tensor", 1),),
            n_flops=MATMUL_FLOPS,
            tag=tag,
        )
        end = start + step_mm
        instructions.append(
            InstructionRecord(0, "tensor", i, matmul, ready, start, end, end + latency)
        )
        tensor_free = end
        matmul_done.append(end + latency)
        updates.append(SemaphoreUpdate(0, end + latency, "S.tensor", i + 1, "tensor", i))
        # vector: evacuate PSUM
        ready = vector_free
        start = max(ready, end + latency + step_gap)
        copy = FakeOp(
            engine="vector",
            src=psum(128, 512, offset=2048 * (i % 2)),
            dst=sbuf(128, 512, offset=8192),
            waits=(("S.tensor", i + 1),),
            signals=(("S.vector", 1),),
            tag=tag,
        )
        end = start + step_mm // 4
        instructions.append(
            InstructionRecord(0, "vector", i, copy, ready, start, end, end + latency)
        )
        vector_free = end
        vector_done.append(end + latency)
        updates.append(SemaphoreUpdate(0, end + latency, "S.vector", i + 1, "vector", i))
    instructions.sort(
        key=lambda r: ("tensor", "vector", "scalar", "gpsimd", "sync").index(r.engine)
    )
    updates.sort(key=lambda u: u.tick)
    allocations = [
        (0, "sbuf", "w0", 0, 128, 0, 2048),
        (0, "sbuf", "w1", 0, 128, 2048, 2048),
        (0, "sbuf", "out", 0, 128, 8192, 1024),
        (0, "psum", "acc0", 0, 128, 0, 2048),
        (0, "psum", "acc1", 0, 128, 2048, 2048),
    ]
    return Trace(
        base_mhz=BASE_MHZ,
        config=TRN2,
        instructions=instructions,
        dma=dma,
        semaphore_updates=updates,
        memory_allocations=allocations,
        meta={
            "workload": f"pipeline x{steps}",
            "config_name": "trn2",
            "model_flops": steps * MATMUL_FLOPS,
        },
    )


def _with(load: FakeDma, waits: tuple, tag: str) -> FakeDma:
    """The load with this iteration's waits and tag (wait values grow, so objects differ)."""
    return FakeDma(
        engine=load.engine, src=load.src, dst=load.dst, signals=load.signals, waits=waits, tag=tag
    )

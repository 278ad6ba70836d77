"""The deferred builder (``ProgramBuilder(deferred=True)``: waits worked out at ``build()`` by
``hwsim.deferred_deps``) gives the very programs the Python builder gives as it emits.

The pinned build fingerprints (``test_build_fingerprint.py``) cover the kernels, which build
deferred; here both builders get the same random instruction streams, made to hit every rule:
partial reads of wider writes (parts), reads of HBM inputs before and after a write (on either
core), HBM boxes of two row pitches and flat intervals in one tensor (unbinned accesses), wide
on-chip boxes, DMA queues triggered from two engines, instructions that come with waits, one
operand object reused and equal operands as distinct objects, and ``place_hbm`` steps.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from hwsim.builder import ProgramBuilder
from hwsim.dtypes import FP32
from hwsim.errors import HwsimError
from hwsim.isa import MemorySpace, contiguous
from hwsim.isa.ap import AccessPattern
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.vector_ops import TensorTensor
from hwsim.kernels import AluOp

SBUF, PSUM, HBM = MemorySpace.SBUF, MemorySpace.PSUM, MemorySpace.HBM
ROWS, COLS = 256, 96  # every HBM tensor is [ROWS, COLS] fp32
TENSORS = {"in0": "input", "in1": "input", "s0": "scratch", "s1": "scratch", "out": "output"}


def _on_chip(rng: random.Random, reused: list[AccessPattern]) -> AccessPattern:
    if reused and rng.random() < 0.3:
        return rng.choice(reused)  # the same object again
    memory = PSUM if rng.random() < 0.2 else SBUF
    start = rng.choice([0, 0, 32, 64])
    partitions = rng.choice([16, 32, 64])
    width = rng.choice([64, 256, 512, 2048]) if memory is SBUF else rng.choice([64, 128])
    offset = rng.choice([0, 256, 1024, 1536, 4096]) if memory is SBUF else rng.choice([0, 512])
    ap = contiguous(
        memory, FP32, partitions, width // 4, start_partition=start, offset_bytes=offset
    )
    reused.append(ap)
    return ap


def _hbm(rng: random.Random, tensor: str) -> AccessPattern:
    kind = rng.random()
    if kind < 0.6:  # a box of whole-tensor row pitch: rows x columns
        row0, rows = rng.choice([0, 16, 128, 200]), rng.choice([8, 32, 56])
        col0, cols = rng.choice([0, 8, 32]), rng.choice([16, 32, 64])
        return AccessPattern(
            HBM, FP32, 0, rows, (row0 * COLS + col0) * 4, (cols,), (1,), COLS, tensor
        )
    if kind < 0.8:  # another pitch: every other row
        row0, rows = rng.choice([0, 2, 64]), rng.choice([8, 16])
        return AccessPattern(HBM, FP32, 0, rows, row0 * COLS * 4, (COLS,), (1,), 2 * COLS, tensor)
    first, count = rng.choice([0, 400, 9000]), rng.choice([64, 1000, 5000])  # a flat interval
    return AccessPattern(HBM, FP32, 0, 1, first * 4, (count,), (1,), 0, tensor)


def random_program(seed: int, *, deferred: bool, cores: int = 1, length: int = 160):
    rng = random.Random(seed)
    builder = ProgramBuilder(cores, deferred=deferred)
    for name, kind in TENSORS.items():
        values = np.zeros((ROWS, COLS), np.float32) if kind == "input" else None
        builder.program.add_tensor(name, (ROWS, COLS), FP32, kind, values)  # type: ignore[arg-type]
    reused: list[list[AccessPattern]] = [[] for _ in range(cores)]
    placed = False
    for step in range(length):
        core = rng.randrange(cores)
        waits = (("S.vector", 1),) if rng.random() < 0.05 else ()
        choice = rng.random()
        if choice < 0.35:
            engine = rng.choice(["sync", "sync", "scalar", "gpsimd"])
            queue = rng.choice([0, 1, 2])
            tensor = rng.choice(list(TENSORS))
            hbm, chip = _hbm(rng, tensor), _on_chip(rng, reused[core])
            load = rng.random() < 0.6 or (TENSORS[tensor] == "input" and rng.random() < 0.8)
            dst, src = (chip, hbm) if load else (hbm, chip)
            instruction = DmaCopy(engine=engine, queue=queue, dst=dst, src=src, waits=waits)
        elif choice < 0.75:
            engine = rng.choice(["vector", "scalar", "gpsimd"])
            src = _on_chip(rng, reused[core])
            dst = src if rng.random() < 0.1 else _on_chip(rng, reused[core])
            instruction = TensorCopy(engine=engine, dst=dst, src=src, waits=waits)
        else:
            a, b = _on_chip(rng, reused[core]), _on_chip(rng, reused[core])
            alias = rng.random()
            # dst: a itself (read and written: counts as written), an equal but distinct
            # object (read, then written), or another tile
            dst = a if alias < 0.25 else replace(a) if alias < 0.5 else _on_chip(rng, reused[core])
            instruction = TensorTensor(engine="vector", dst=dst, src0=a, src1=b, op=AluOp.add)
        builder.emit(instruction, core)
        if not placed and step > length // 2:
            placed = True
            builder.place_hbm("s0", 0, [], core=0)
            builder.place_hbm("s1", 0, ["s0", "in0"], core=0)
    return builder.build()


def _streams(program):
    return [
        {
            engine: [(i, i.waits, i.signals) for i in stream]
            for engine, stream in core.streams.items()
        }
        for core in program.cores
    ]


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("cores", [1, 2])
def test_deferred_waits_equal_the_python_builders(seed: int, cores: int) -> None:
    eager = random_program(seed, deferred=False, cores=cores)
    deferred = random_program(seed, deferred=True, cores=cores)
    assert _streams(deferred) == _streams(eager)
    assert sum(len(i.waits) for c in eager.cores for s in c.streams.values() for i in s) > 0


def test_the_streams_hold_every_dependency_rule() -> None:
    """The random streams are not vacuous: across the seeds they need RAW, WAR and WAW waits
    on other channels and same-channel RAW waits (what the comparison above checks)."""
    kinds = set()
    for seed in range(40):
        program = random_program(seed, deferred=False)
        for stream in program.cores[0].streams.values():
            for instruction in stream:
                own = instruction.signals[-1][0]
                for semaphore, _ in instruction.waits:
                    kinds.add("own channel" if semaphore == own else "other channel")
                    kinds.add("dma" if semaphore.startswith("S.dma") else "engine")
    assert kinds == {"own channel", "other channel", "dma", "engine"}


def test_an_emitted_instruction_has_its_waits_once_the_program_is_built() -> None:
    builder = ProgramBuilder(deferred=True)
    tile = contiguous(SBUF, FP32, 32, 64)
    builder.emit(
        TensorCopy(engine="vector", dst=tile, src=contiguous(SBUF, FP32, 32, 64, offset_bytes=512))
    )
    reader = builder.emit(
        TensorCopy(engine="scalar", dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=1024), src=tile)
    )
    assert reader.waits == ()  # worked out at build()
    builder.build()
    assert reader.waits == (("S.vector", 1),)
    assert builder.build() is builder.program  # again: the same program, waits not doubled
    assert reader.waits == (("S.vector", 1),)
    with pytest.raises(HwsimError, match="has built its program"):
        builder.emit(TensorCopy(engine="vector", dst=tile, src=tile))


def test_resolution_retries_with_larger_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Table sizes are guesses; a pass that fills a table runs again with every table sized
    from what it used, to the same waits. Here every table starts 256 times too small."""
    from hwsim import deferred_deps

    statuses = []
    real = deferred_deps.resolve

    def too_small(*args):
        result = real(*args[:-1], np.maximum(args[-1] // 256, 1))
        statuses.append(int(result[0]))
        return result

    expected = _streams(random_program(3, deferred=False, cores=2))
    monkeypatch.setattr(deferred_deps, "resolve", too_small)
    assert _streams(random_program(3, deferred=True, cores=2)) == expected
    assert statuses.count(deferred_deps.DONE) == 2  # one per core
    assert len(statuses) > 2


def _sliding_window_reads(deferred: bool, windows: int) -> ProgramBuilder:
    """One tile written, then read by ``windows`` overlapping windows of 512 elements each one
    element further on (a convolution's taps over a padded row), on two engines, then written
    again in halves."""
    builder = ProgramBuilder(deferred=deferred)
    elements = windows + 512
    tile_bytes = 4 * elements

    def tile(offset_bytes: int, width: int = 512) -> AccessPattern:
        return contiguous(SBUF, FP32, 32, width, offset_bytes=offset_bytes)

    builder.emit(TensorCopy(engine="vector", dst=tile(0, elements), src=tile(tile_bytes, elements)))
    for k in range(windows):
        out = tile(2 * tile_bytes + 2048 * (k % 2))
        engine = "scalar" if k % 2 else "gpsimd"
        builder.emit(TensorCopy(engine=engine, dst=out, src=tile(4 * k)))
    half = elements // 2
    for start in (0, half):
        src = tile(2 * tile_bytes + 4096, half)
        builder.emit(TensorCopy(engine="vector", dst=tile(4 * start, half), src=src))
    return builder


def test_overlapping_reads_keep_one_record_each_not_one_per_earlier_read() -> None:
    """Each window read records a fragment of the tile's write; a window overlapping earlier
    windows' fragments makes no fragments of them (they are dominated: the tile's write
    outlives them and the new window's own fragment holds the reader), so the builder keeps
    one record per read, not one per pair of reads, and the waits are the same."""
    windows = 96
    builder = _sliding_window_reads(False, windows)
    tracker = builder._trackers[0]
    indexes = [*tracker.indexes.values(), *getattr(tracker, "fragments", {}).values()]
    kept = sum(len(index.live_accesses()) for index in indexes)
    assert kept <= windows + 8, kept
    program = builder.build()
    deferred = _sliding_window_reads(True, windows).build()
    assert _streams(deferred) == _streams(program)
    # The first half written at the end waits for the last window read of it on each engine
    # (every window reads some of it); the second half then needs nothing more.
    first_half, second_half = program.cores[0].streams["vector"][-2:]
    assert dict(first_half.waits) == {"S.gpsimd": windows // 2, "S.scalar": windows // 2}
    assert second_half.waits == ()


def test_the_compiled_pass_keeps_one_record_per_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled pass's tables hold as many accesses as the Python builder keeps (linear in
    the reads), found in one pass with the first table sizes."""
    from hwsim import deferred_deps, deferred_index

    calls = []
    real = deferred_deps.resolve

    def recorded(*args):
        calls.append((len(args[0]), real(*args)))
        return calls[-1][1]

    monkeypatch.setattr(deferred_deps, "resolve", recorded)
    windows = 2000
    _sliding_window_reads(True, windows).build()
    assert [int(result[0]) for _, result in calls] == [deferred_deps.DONE]
    given, result = calls[0]
    counts = result[4]
    assert counts[deferred_index.N_REG] - given == windows  # a fragment per window read
    assert counts[deferred_index.N_ACC] <= 2 * windows + 8  # and a base per write


@pytest.mark.parametrize("aliased_first", [True, False])
def test_an_operand_read_and_written_is_told_from_an_equal_copy(aliased_first: bool) -> None:
    """dst the very object src0 is counts as written only; an equal but distinct dst is read,
    then written (a RAW wait on the channel's own earlier write). The two instructions are
    equal by value, so the deferred builder keeps a template for each."""

    def waits(deferred: bool) -> list[tuple[tuple[str, int], ...]]:
        builder = ProgramBuilder(deferred=deferred)
        a = contiguous(SBUF, FP32, 32, 64)
        x = contiguous(SBUF, FP32, 32, 64, offset_bytes=1024)
        for aliased in (aliased_first, not aliased_first):
            builder.emit(TensorCopy(engine="vector", dst=a, src=x))
            dst = a if aliased else replace(a)
            builder.emit(TensorTensor(engine="vector", dst=dst, src0=a, src1=x, op=AluOp.add))
        return [i.waits for i in builder.build().cores[0].streams["vector"]]

    expected = waits(False)
    assert expected[1 if aliased_first else 3] == ()
    assert expected[3 if aliased_first else 1] == (("S.vector", 3 if aliased_first else 1),)
    assert waits(True) == expected


def test_warm_up_compiles_or_loads_the_pass_a_sweep_parent_runs_before_its_workers():
    """In a fresh process (here the pass may be loaded already): before, no signature of the
    pass; after ``warm_up``, one."""
    import subprocess
    import sys

    code = (
        "from hwsim import deferred_deps; from hwsim.builder import warm_up; "
        "before = len(deferred_deps.resolve.signatures); warm_up(); "
        "print(before, len(deferred_deps.resolve.signatures))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "1"], done.stdout + done.stderr

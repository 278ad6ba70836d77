"""The compiler's memory semantics: free at last use, partition-aware placement, spilling."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hwsim import lang
from hwsim.config import load_config
from hwsim.lang import isa as nisa
from hwsim.lang.allocator import Block, Pool, placement_starts

# tiny: 32 partitions x 16 KiB; a [32, 1024] fp32 tile is 4 KiB per partition, so 4 fit.
CHUNK = 1024


@lang.kernel
def double_chunks_keeping_them(x):
    """Doubles x chunk by chunk, but keeps every chunk's tile referenced (a list), as kernels
    written for NKI do: the tiles are dead after their store, their Python objects are not."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    kept = []
    for c in range(x.shape[1] // CHUNK):
        tile = lang.load(x[:, c * CHUNK : (c + 1) * CHUNK])
        nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, 2.0)
        lang.store(out[:, c * CHUNK : (c + 1) * CHUNK], tile)
        kept.append(tile)
    return out


def test_tiles_held_by_python_are_freed_after_their_last_use():
    x = np.arange(32 * 8 * CHUNK, dtype=np.float32).reshape(32, 8 * CHUNK) / 7
    result = double_chunks_keeping_them(x, config="tiny", race_check=True)
    assert np.array_equal(result.output, x * 2)
    built = double_chunks_keeping_them.build(x, config="tiny")
    # 8 chunks of 4 KiB in 16 KiB: tiles 4.. reuse the bytes of tiles whose last use passed,
    # with no spill traffic (nothing live was evicted).
    assert built.spill["stores"] == 0 and built.spill["reloads"] == 0
    assert built.spill["freed_after_last_use"] >= 4
    assert result.summary.sbuf_spill["stores"] == 0
    offsets = [a.offset_bytes for a in built.program.allocations if a.memory == "sbuf"]
    assert len(offsets) == 8 and set(offsets) <= {0, 4096, 8192, 12288}


def test_reuse_after_last_use_waits_for_the_old_tiles_store():
    """The 5th load writes the bytes the 1st tile held: it must wait for the 1st store (WAR,
    another DMA queue), which the builder's dependency tracking adds."""
    x = np.ones((32, 5 * CHUNK), np.float32)
    program = double_chunks_keeping_them.build(x, config="tiny").program
    sync = program.cores[0].streams["sync"]
    loads = [i for i in sync if i.dst.memory.value == "sbuf"]
    stores = [i for i in sync if i.dst.memory.value == "hbm"]
    fifth, first_store = loads[4], stores[0]
    assert fifth.dst.offset_bytes == loads[0].dst.offset_bytes
    ((store_signal, store_value),) = first_store.signals
    assert (store_signal, store_value) == (f"S.dma.q{first_store.queue}", 1)
    # the fifth load waits on the first store's queue having completed it (WAR)
    assert any(sem == store_signal and value >= 1 for sem, value in fifth.waits)


def test_a_kernel_that_fits_keeps_its_placement_and_program():
    """No deferral for a kernel that fits: tiles die with their Python objects, as before."""
    x = np.ones((32, 3 * CHUNK), np.float32)
    built = double_chunks_keeping_them.build(x, config="tiny")
    assert built.spill == {}
    offsets = [a.offset_bytes for a in built.program.allocations if a.memory == "sbuf"]
    assert offsets == [0, 4096, 8192]


# ---- partition-aware placement ---------------------------------------------------------------


def test_placement_starts_follow_the_hardware_rule():
    assert placement_starts(128, 128) == (0,)
    assert placement_starts(65, 128) == (0,)
    assert placement_starts(64, 128) == (0, 64)
    assert placement_starts(33, 128) == (0, 64)
    assert placement_starts(32, 128) == (0, 32, 64, 96)
    assert placement_starts(1, 128) == (0, 32, 64, 96)


def test_128_one_partition_tiles_fit_where_they_used_to_take_all_partitions():
    hw = load_config("trn2")
    capacity = hw.sbuf.bytes_per_partition
    n = capacity // 32 // 4 // 16 * 16  # fp32 elements: 32 such rows fill one partition's bytes
    assert 128 * n * 4 > capacity  # reserving every partition, 128 of them could not fit
    seen = []

    @lang.kernel
    def rows(x):
        out = lang.ndarray((128, n), lang.float32, buffer=lang.hbm)
        tiles = []
        for r in range(128):
            t = lang.ndarray((1, n), lang.float32)
            nisa.memset(t, float(r))
            tiles.append(t)
        for r, t in enumerate(tiles):  # all 128 live until here
            lang.store(out[r : r + 1], t)
            seen.append((t.start_partition, t.offset_bytes))
        return out

    result = rows(np.zeros((128, n), np.float32), config="trn2", race_check=True)
    assert np.array_equal(result.output, np.repeat(np.arange(128, dtype=np.float32)[:, None], n, 1))
    assert result.summary.sbuf_spill is None  # placed as written: no planner, no spill
    assert {start for start, _ in seen} == {0, 32, 64, 96}
    assert len(set(seen)) == 128  # every tile its own (partition, offset): none overlap


def test_partition_aware_pool_never_overlaps():
    """Random allocations and frees of every partition count; an occupancy grid checks that
    no two live blocks share a byte of a partition and every start obeys the rule."""
    rng = random.Random(5)
    pool = Pool("sbuf", 4096, 64, partitions=128)
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            pool.free(live.pop(rng.randrange(len(live))))
            continue
        rows = rng.choice([1, 2, 16, 32, 33, 64, 65, 128])
        block = pool.try_allocate("t", rng.choice([64, 128, 448, 1024]), "here", rows)
        if block is None:
            continue
        assert block.start_partition in placement_starts(rows, 128)
        live.append(block)
        grid = np.zeros((128, 4096), np.int32)
        for b in live:
            rows = slice(b.start_partition, b.start_partition + b.partitions)
            grid[rows, b.offset : b.offset + b.size] += 1
        assert grid.max() == 1
    assert pool.peak_bytes <= 4096


def test_a_pool_that_is_not_partition_aware_sees_byte_overlaps():
    """PSUM's pool (``partitions`` 0): every tile spans every partition, so bytes alone
    overlap, and an explicit placement over a live tile is refused."""
    pool = Pool("psum", 8192, 2048)
    pool.reserve("a", 2048, 2048, "here")
    a, b = pool.blocks[0], Block("psum", "b", 2048, 2048, "here")
    assert a.overlaps(b, 0) and not a.overlaps(Block("psum", "c", 4096, 2048, "here"), 0)
    with pytest.raises(lang.OutOfMemoryError, match="overlaps live tile a"):
        pool.reserve("b", 2048, 2048, "here")


def test_start_zero_is_preferred_so_fitting_layouts_are_unchanged():
    pool = Pool("sbuf", 4096, 64, partitions=128)
    a = pool.allocate("a", 1024, "here", 1)
    b = pool.allocate("b", 1024, "here", 1)
    c = pool.allocate("c", 1024, "here", 128)
    assert [(x.start_partition, x.offset) for x in (a, b, c)] == [(0, 0), (0, 1024), (0, 2048)]
    d = pool.allocate("d", 2048, "here", 1)  # partition 0 is full: next quadrant
    assert (d.start_partition, d.offset) == (32, 0)


# ---- spilling --------------------------------------------------------------------------------


def doubled(chunk):
    """A chunk doubled in place: no longer a copy of the input, so leaving SBUF stores it (an
    unchanged copy would be read from the input again: tests/lang/test_spill_policy.py)."""
    nisa.tensor_scalar(chunk, chunk, nisa.AluOp.multiply, 2.0)
    return chunk


@lang.kernel
def sum_of_live_chunks(x):
    """Doubles every chunk first and sums them afterwards: all are live at once (6 x 4 KiB in
    16 KiB), so the planner must spill some and reload them before their use."""
    out = lang.ndarray((x.shape[0], CHUNK), x.dtype, buffer=lang.hbm)
    chunks = [
        doubled(lang.load(x[:, c * CHUNK : (c + 1) * CHUNK])) for c in range(x.shape[1] // CHUNK)
    ]
    acc = lang.ndarray((x.shape[0], CHUNK), x.dtype)
    nisa.tensor_copy(acc, chunks[0])
    for tile in chunks[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


def test_over_allocated_sbuf_is_spilled_and_reloaded_by_timed_dmas():
    x = np.random.default_rng(1).standard_normal((32, 6 * CHUNK)).astype(np.float32)
    result = sum_of_live_chunks(x, config="tiny", race_check=True)
    expected = 2 * x.reshape(32, 6, CHUNK).sum(axis=1, dtype=np.float32)
    np.testing.assert_allclose(result.output, expected, rtol=1e-6, atol=1e-5)
    spill = result.summary.sbuf_spill
    # 4 chunks fit in 16 KiB. Belady: chunk 4 evicts chunk 3 (used last), chunk 5 evicts chunk 4,
    # acc evicts chunk 5; each reload finds chunks 0 and 1 dead after their last use.
    assert (spill["stores"], spill["reloads"], spill["freed_after_last_use"]) == (3, 3, 3)
    tile_bytes = 32 * CHUNK * 4
    assert spill["bytes_stored"] == spill["bytes_reloaded"] == 3 * tile_bytes
    records = [r for r in result.trace.instructions if ":spill:" in r.instruction.tag]
    assert sorted(r.instruction.tag.split(":")[2].split()[0] for r in records) == [
        "sbuf4",
        "sbuf5",
        "sbuf6",
    ]
    reloads = [r for r in result.trace.instructions if ":reload:" in r.instruction.tag]
    assert len(reloads) == 3
    assert all(r.done_tick > r.start_tick for r in records + reloads)  # timed transfers
    # the spill traffic is in the DMA totals: 6 loads + 3 reloads read HBM, 1 store + 3 spills
    dma = result.summary.dma
    assert dma.hbm_read_bytes == (6 + 3) * tile_bytes
    assert dma.hbm_write_bytes == (1 + 3) * tile_bytes
    fits = sum_of_live_chunks(x[:, : 3 * CHUNK], config="tiny")
    assert fits.summary.sbuf_spill is None


def test_one_instruction_whose_operands_do_not_fit_is_rejected_naming_the_line():
    @lang.kernel
    def too_wide(x):
        out = lang.ndarray((32, 1536), lang.float32, buffer=lang.hbm)
        a = lang.load(x[:, 0:1536])  # 6 KiB per partition
        b = lang.load(x[:, 1536:3072])
        c = lang.ndarray((32, 1536), lang.float32)
        nisa.tensor_tensor(c, a, b, nisa.AluOp.add)  # 18 KiB of operands in 16 KiB
        lang.store(out, c)
        return out

    with pytest.raises(lang.OutOfMemoryError) as error:
        too_wide.build(lang.TensorSpec((32, 3072)), config="tiny")
    message = str(error.value)
    assert "Spilling cannot help" in message
    line = too_wide.fn.__code__.co_firstlineno + 6  # the tensor_tensor line (after the decorator)
    assert f"tensor_tensor at test_memory_plan.py:{line}" in message


def test_psum_over_allocation_moves_tiles_through_sbuf():
    """Five accumulators live at once in tiny's 4 PSUM banks: DMA cannot reach PSUM, so the
    planner copies one out to SBUF (VectorE) and back before its next use; a constant one is
    refilled instead. Values are exact, and each copy is counted."""

    @lang.kernel
    def banks(x):
        out = lang.ndarray((32, 80), lang.float32, buffer=lang.hbm)
        tile = lang.load(x)
        accs = [lang.ndarray((32, 16), lang.float32, buffer=lang.psum) for _ in range(5)]
        for i, acc in enumerate(accs):
            nisa.tensor_scalar(acc, tile, nisa.AluOp.multiply, float(i + 1))  # not a constant
        for i, acc in enumerate(accs):  # all 5 live at once
            res = lang.ndarray((32, 16), lang.float32, buffer=lang.sbuf)
            nisa.tensor_copy(res, acc)
            lang.store(out[:, i * 16 : (i + 1) * 16], res)
        return out

    x = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    result = banks(x, config="tiny")
    expected = np.concatenate([x * (i + 1) for i in range(5)], axis=1)
    np.testing.assert_array_equal(result.output, expected)
    built = banks.build(lang.TensorSpec((32, 16)), config="tiny")
    assert built.spill["psum_evictions"] == built.spill["psum_restores"] >= 1
    copies = [
        i
        for stream in built.program.cores[0].streams.values()
        for i in stream
        if ":psum-out:" in str(i.tag) or ":psum-in:" in str(i.tag)
    ]
    assert {i.engine for i in copies} == {"vector"}
    assert len(copies) == 2 * built.spill["psum_evictions"]


def test_an_instruction_whose_psum_operands_do_not_fit_is_rejected():
    @lang.kernel
    def too_big(x):
        out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm)
        acc = lang.ndarray((32, 4096), lang.float32, buffer=lang.psum)  # 16 KiB: > tiny's PSUM
        nisa.memset(acc, 1.0)
        return out

    with pytest.raises(lang.OutOfMemoryError, match="out of PSUM"):
        too_big.build(lang.TensorSpec((32, 16)), config="tiny")


# ---- multi-buffering (par_dim block dimensions) ----------------------------------------------


def scale_through_blocks(bufs):
    """exp(x) chunk by chunk through a ring of ``bufs`` blocks: loads triggered by GpSimd, the
    compute on ScalarE/VectorE, stores by SP, so only the buffers order a load after compute."""

    @lang.kernel
    def scale(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        ring = lang.ndarray((bufs, lang.par_dim(32), CHUNK), lang.float32)
        for c in range(x.shape[1] // CHUNK):
            cols = slice(c * CHUNK, (c + 1) * CHUNK)
            block = ring[c % bufs]
            nisa.dma_copy(block, x[:, cols], engine="gpsimd")
            nisa.activation(block, nisa.ActivationFunction.exp, block)
            for _ in range(8):  # compute comparable to a chunk's DMA
                nisa.tensor_scalar(block, block, nisa.AluOp.multiply, 1.0)
            lang.store(out[:, cols], block, engine="sync")
        return out

    return scale


def test_par_dim_block_dimensions_are_separate_rotating_buffers():
    x = np.random.default_rng(2).standard_normal((32, 6 * CHUNK)).astype(np.float32) / 4
    double = scale_through_blocks(2)
    result = double(x, config="tiny", race_check=True)
    np.testing.assert_allclose(result.output, np.exp(x), rtol=1e-5)
    program = double.build(x, config="tiny").program
    names = [a.name for a in program.allocations]
    offsets = {a.name: a.offset_bytes for a in program.allocations}
    assert names == ["sbuf1[0]", "sbuf1[1]"] and offsets["sbuf1[0]"] != offsets["sbuf1[1]"]
    loads = [i for s in program.cores[0].streams.values() for i in s if i.OPCODE == "dma_copy"]
    loads = [i for i in loads if i.dst.memory.value == "sbuf"]
    assert loads[1].waits == ()  # block 1 is fresh: its load does not wait for block 0's use
    assert loads[2].waits  # block 0 again: waits for its previous readers (WAR)
    single = scale_through_blocks(1)(x, config="tiny", numerics=False).summary.total_ns
    triple = scale_through_blocks(3)(x, config="tiny", numerics=False).summary.total_ns
    # one buffer: each load waits for the previous chunk's store; two overlap a load with the
    # compute; three also hide the store
    assert single > result.summary.total_ns > triple


def test_block_tiles_index_by_block_then_tile_and_hand_out_in_turn():
    seen = {}

    def body():
        grid = lang.ndarray((2, 3, lang.par_dim(32), 64), lang.bfloat16, name="g")
        seen["names"] = [t.name for t in grid.blocks]
        seen["view"] = grid[1, 2, 0:16, 8:].ap()
        seen["turns"] = [grid.next().name for _ in range(7)]
        seen["repr"] = repr(grid)
        with pytest.raises(lang.IndexingError, match="index a block first"):
            grid.ap()
        with pytest.raises(lang.IndexingError, match="must be an int"):
            grid[0:1, 0]

    build = lang.kernel(body).build
    build(config="tiny")
    assert seen["names"] == ["g[0,0]", "g[0,1]", "g[0,2]", "g[1,0]", "g[1,1]", "g[1,2]"]
    assert seen["turns"] == [*seen["names"], "g[0,0]"]
    assert (seen["view"].partitions, seen["view"].free_sizes) == (16, (56,))
    assert "par_dim" in seen["repr"]


def test_defer_false_raises_when_the_tile_does_not_fit_now():
    """For a front end with its own fallback (reuse one of its buffers): the old behaviour."""
    outcome = {}

    def body():
        held = [lang.ndarray((32, CHUNK), lang.float32) for _ in range(4)]  # 16 KiB: full
        try:
            lang.ndarray((32, CHUNK), lang.float32, defer=False)
        except lang.OutOfMemoryError as error:
            outcome["error"] = str(error)
        outcome["held"] = len(held)

    built = lang.kernel(body).build(config="tiny")
    assert "out of SBUF" in outcome["error"] and built.spill == {}  # not deferred


def test_spilled_matmul_operands_accumulate_correctly_in_psum():
    """Every K tile of both operands is loaded before the matmuls (24 KiB in tiny's 16 KiB):
    operands leave and come back to new places (read from the inputs again, or loaded late),
    the PSUM accumulation group is kept."""
    kt, m, n = 10, 32, 512

    @lang.kernel
    def matmul_all_loaded(lhsT, rhs):
        out = lang.ndarray((m, n), lang.float32, buffer=lang.hbm)
        lhs_tiles = [lang.load(lhsT[k * 32 : (k + 1) * 32]) for k in range(kt)]
        rhs_tiles = [lang.load(rhs[k * 32 : (k + 1) * 32]) for k in range(kt)]
        acc = lang.ndarray((m, n), lang.float32, buffer=lang.psum)
        for k in range(kt):
            nisa.nc_matmul(acc, lhs_tiles[k], rhs_tiles[k], accumulate=k > 0)
        result = lang.ndarray((m, n), lang.float32)
        nisa.tensor_copy(result, acc)
        lang.store(out, result)
        return out

    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((kt * 32, m)).astype(np.float32)
    rhs = rng.standard_normal((kt * 32, n)).astype(np.float32)
    result = matmul_all_loaded(lhsT, rhs, config="tiny", race_check=True)
    np.testing.assert_allclose(result.output, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)
    spill = result.summary.sbuf_spill
    assert (spill["stores"], spill["rereads"], spill["deferred_loads"]) == (0, 5, 2)


@lang.kernel
def matmul_groups_in_a_deferred_kernel(lhsT, rhs):
    """Six [32, 512] fp32 matmuls, each into a PSUM tile allocated in the loop and evacuated by
    VectorE, after loads that over-allocate tiny's SBUF (so the planner places every tile)."""
    out = lang.ndarray((32, 6 * 512), lang.float32, buffer=lang.hbm)
    kept = [lang.load(rhs[:, c * 512 : (c + 1) * 512]) for c in range(6)]  # 6 x 2 KiB + ...
    lhs = lang.load(lhsT)
    for c in range(6):
        acc = lang.ndarray((32, 512), lang.float32, buffer=lang.psum)
        nisa.nc_matmul(acc, lhs, kept[c])
        result = lang.ndarray((32, 512), lang.float32)
        nisa.tensor_copy(result, acc)
        lang.store(out[:, c * 512 : (c + 1) * 512], result)
    return out


def test_planned_psum_tiles_rotate_over_the_banks_least_recently_used_first():
    """The planner places each iteration's PSUM tile on the free bank released longest ago, as
    the compiler rotates a loop's PSUM tiles: tiny's 4 banks in turn, so no matmul writes the
    bank the previous iteration's tensor_copy still reads (first fit gave bank 0 every time,
    each matmul waiting for the previous evacuation: write-after-read)."""
    rng = np.random.default_rng(4)
    lhsT = rng.standard_normal((32, 32)).astype(np.float32)
    rhs = rng.standard_normal((32, 6 * 512)).astype(np.float32)
    built = matmul_groups_in_a_deferred_kernel.build(lhsT, rhs, config="tiny")
    assert built.spill != {}  # the planner placed the tiles
    tensor = built.program.cores[0].streams["tensor"]
    assert [i.dst.offset_bytes for i in tensor] == [0, 2048, 4096, 6144, 0, 2048]
    # only the fifth matmul (back on bank 0) waits for VectorE: the first copy read bank 0
    waits_on_vector = [any(s == "S.vector" for s, _ in i.waits) for i in tensor]
    assert waits_on_vector == [False, False, False, False, True, True]
    result = matmul_groups_in_a_deferred_kernel(lhsT, rhs, config="tiny", race_check=True)
    np.testing.assert_allclose(result.output, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_a_reloaded_tile_goes_back_to_its_partitions_when_it_can():
    pool = Pool("sbuf", 4096, 64, partitions=128)
    pool.allocate("full", 4096, "here", 128 - 96)  # partitions 0..31 full
    block = pool.try_allocate("t", 1024, "here", 1, prefer_start=64)
    assert block is not None and block.start_partition == 64
    other = pool.try_allocate("u", 1024, "here", 1, prefer_start=0)  # 0 is full: next start
    assert other is not None and other.start_partition == 32


def test_a_raw_access_pattern_in_a_deferred_kernel_is_a_clear_error():
    """The planner moves tiles; a hand-made on-chip pattern it cannot attribute is refused,
    not silently left pointing at the old place."""

    def body():
        tiles = [lang.ndarray((32, CHUNK), lang.float32) for _ in range(5)]  # the 5th defers
        for tile in tiles:
            nisa.memset(tile, 0.0)
        nisa.tensor_copy(tiles[1], tiles[0].ap())

    with pytest.raises(lang.OutOfMemoryError, match="argument 'src' is an access pattern"):
        lang.kernel(body).build(config="tiny")


def test_tiles_sharing_a_name_get_their_own_spill_areas():
    @lang.kernel
    def named(x):
        out = lang.ndarray((32, CHUNK), lang.float32, buffer=lang.hbm)
        chunks = [lang.ndarray((32, CHUNK), lang.float32, name="chunk") for _ in range(6)]
        for c, tile in enumerate(chunks):
            nisa.dma_copy(tile, x[:, c * CHUNK : (c + 1) * CHUNK])
            doubled(tile)
        acc = lang.ndarray((32, CHUNK), lang.float32, name="acc")
        nisa.tensor_copy(acc, chunks[0])
        for tile in chunks[1:]:
            nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
        lang.store(out, acc)
        return out

    x = np.arange(32 * 6 * CHUNK, dtype=np.float32).reshape(32, 6 * CHUNK) % 11
    result = named(x, config="tiny", race_check=True)
    np.testing.assert_array_equal(result.output, 2 * x.reshape(32, 6, CHUNK).sum(axis=1))
    spills = sorted(t for t in result.program.hbm if t.startswith("spill.chunk"))
    assert spills == ["spill.chunk", *(f"spill.chunk.{i}" for i in range(1, len(spills)))]
    assert len(spills) >= 2
    # chunks 3, 4 and 5 are evicted once each (doubled: not copies of x) and reloaded once
    spill = result.summary.sbuf_spill
    assert (spill["stores"], spill["reloads"]) == (3, 3)


@lang.kernel
def scale_chunks_keeping_copies(x, reclaim):
    """Scales x chunk by chunk and keeps each result tile alive for speed only, as the bridge's
    residency does; ``reclaim`` decides whether the kernel may ask for them back."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    kept: list = []

    def give_one_up() -> bool:
        if not kept:
            return False
        kept.pop(0)  # the oldest: its block is freed with its last reference
        return True

    if reclaim:
        lang.current().reclaimers.append(give_one_up)
    for c in range(x.shape[1] // CHUNK):
        tile = lang.load(x[:, c * CHUNK : (c + 1) * CHUNK])
        nisa.tensor_scalar(tile, tile, nisa.AluOp.multiply, 3.0)
        lang.store(out[:, c * CHUNK : (c + 1) * CHUNK], tile)
        kept.append(tile)
        del tile
    return out


def test_a_tile_that_does_not_fit_takes_back_tiles_held_for_speed_before_the_planner():
    """tiny SBUF holds 4 chunk tiles; the 5th to 8th allocations take the bytes of the oldest
    kept tiles from their reclaimer: no memory planner, no spill, tiles at first-fit offsets.
    Without a reclaimer the same kernel goes to the planner."""
    x = np.arange(32 * 8 * CHUNK, dtype=np.float32).reshape(32, 8 * CHUNK) / 5
    result = scale_chunks_keeping_copies(x, True, config="tiny", race_check=True)
    assert np.array_equal(result.output, x * 3)
    built = scale_chunks_keeping_copies.build(x, True, config="tiny")
    assert not built.spill  # the planner never ran
    offsets = [a.offset_bytes for a in built.program.allocations if a.memory == "sbuf"]
    assert offsets == [0, 4096, 8192, 12288, 0, 4096, 8192, 12288]
    planned = scale_chunks_keeping_copies.build(x, False, config="tiny")
    assert planned.spill  # held tiles nobody gives back: the kernel was deferred

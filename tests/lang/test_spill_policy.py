"""The memory planner's spill policy, one rule per test (hwsim.lang.spill_policy): what leaves
SBUF, what it costs, and how it comes back, pinned by exact counts, bytes and trace tags.

tiny: 32 partitions x 16 KiB; a [32, 1024] fp32 tile is 4 KiB per partition, so 4 fit."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.isa.dma_ops import DgeMode
from hwsim.lang import isa as nisa

CHUNK = 1024
TILE_BYTES = 32 * CHUNK * 4  # one [32, 1024] fp32 tile


def _dmas(result, what):
    return [r for r in result.trace.instructions if f":{what}:" in r.instruction.tag]


@lang.kernel
def sum_of_live_chunks(x):
    """Loads six chunks of an input first, sums them afterwards: 6 x 4 KiB live in 16 KiB."""
    out = lang.ndarray((x.shape[0], CHUNK), x.dtype, buffer=lang.hbm)
    chunks = [lang.load(x[:, c * CHUNK : (c + 1) * CHUNK]) for c in range(x.shape[1] // CHUNK)]
    acc = lang.ndarray((x.shape[0], CHUNK), x.dtype)
    nisa.tensor_copy(acc, chunks[0])
    for tile in chunks[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


def test_a_copy_of_an_input_is_read_again_never_stored_and_early_loads_wait_for_room():
    x = np.random.default_rng(1).standard_normal((32, 6 * CHUNK)).astype(np.float32)
    result = sum_of_live_chunks(x, config="tiny", race_check=True)
    expected = x.reshape(32, 6, CHUNK).sum(axis=1, dtype=np.float32)
    np.testing.assert_allclose(result.output, expected, rtol=1e-6, atol=1e-5)
    # chunks 0-3 fill SBUF. Chunks 4 and 5 are needed after all four: their loads would only
    # push out tiles needed sooner, so they are issued just before their adds (deferred). acc
    # takes chunk 3's place (the farthest next use); chunk 3 is an unchanged copy of x, so it
    # leaves without a store and is read from x again before its add.
    spill = result.summary.sbuf_spill
    assert spill == {
        "stores": 0,
        "reloads": 0,
        "bytes_stored": 0,
        "bytes_reloaded": 0,
        "rereads": 1,
        "bytes_reread": TILE_BYTES,
        "refills": 0,
        "deferred_loads": 2,
        "freed_after_last_use": 3,
    }
    by_tile = result.summary.sbuf_spill_by_tile
    assert [v for v in by_tile.values()] == [
        {"reread_bytes": TILE_BYTES},
        {"deferred_loads": 1},
        {"deferred_loads": 1},
    ]
    assert all("test_spill_policy.py" in name for name in by_tile)
    (reread,) = _dmas(result, "reread")
    assert reread.instruction.src.tensor == "x" and reread.instruction.dst.nbytes == TILE_BYTES
    dma = result.summary.dma
    assert dma.hbm_read_bytes == 7 * TILE_BYTES  # six loads and one re-read, no spill area
    assert dma.hbm_write_bytes == TILE_BYTES  # the output only
    assert not [t for t in result.program.hbm if t.startswith("spill.")]


@lang.kernel
def sum_of_constants(x):
    out = lang.ndarray((32, CHUNK), lang.float32, buffer=lang.hbm)
    tiles = [lang.ndarray((32, CHUNK), lang.float32) for _ in range(5)]  # 5th defers
    for k, tile in enumerate(tiles):
        nisa.memset(tile, float(k + 1))
    acc = lang.ndarray((32, CHUNK), lang.float32)
    nisa.tensor_copy(acc, tiles[0])
    for tile in tiles[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


@lang.kernel
def reuse_a_result(x):
    out = lang.ndarray((32, CHUNK), lang.float32, buffer=lang.hbm)
    doubled = lang.ndarray((32, CHUNK), lang.float32)
    first = lang.load(x[:, 0:CHUNK])
    nisa.tensor_scalar(doubled, first, nisa.AluOp.multiply, 2.0)  # written once: dirty
    acc = lang.ndarray((32, CHUNK), lang.float32)
    nisa.memset(acc, 0.0)
    for c in range(1, 4):  # three rounds, each loading 3 chunks: doubled must leave
        chunks = [lang.load(x[:, (c * 3 + j) * CHUNK : (c * 3 + j + 1) * CHUNK]) for j in (0, 1, 2)]
        for tile in chunks:
            nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
        nisa.tensor_tensor(acc, acc, doubled, nisa.AluOp.add)  # doubled read each round
    lang.store(out, acc)
    return out


@lang.kernel
def in_place(x):
    out = lang.ndarray((32, CHUNK), lang.float32, buffer=lang.hbm)
    chunks = [lang.load(x[:, c * CHUNK : (c + 1) * CHUNK]) for c in range(6)]
    acc = lang.ndarray((32, CHUNK), lang.float32)
    nisa.tensor_copy(acc, chunks[0])
    for tile in chunks[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(x[:, 0:CHUNK], acc)  # the kernel writes its input: x is not read-only
    nisa.tensor_tensor(acc, acc, chunks[5], nisa.AluOp.add)
    lang.store(out, acc)
    return out


@lang.kernel
def rounds(x):
    out = lang.ndarray((32, CHUNK), lang.float32, buffer=lang.hbm)
    ring = [lang.ndarray((32, CHUNK), lang.float32) for _ in range(6)]  # 24 KiB in 16
    acc = lang.ndarray((32, CHUNK), lang.float32)
    nisa.memset(acc, 0.0)
    for c in range(12):
        tile = ring[c % 6]
        nisa.dma_copy(tile, x[:, c * CHUNK : (c + 1) * CHUNK])
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


@lang.kernel
def big(x):
    rows, width = x.shape[0], x.shape[1] // 6
    out = lang.ndarray((rows, width), lang.float32, buffer=lang.hbm)
    doubled = [lang.ndarray((rows, width), lang.float32) for _ in range(6)]
    for c, tile in enumerate(doubled):
        nisa.tensor_scalar(tile, lang.load(x[:, c * width : (c + 1) * width]), nisa.AluOp.add, 1.0)
    acc = lang.ndarray((rows, width), lang.float32)
    nisa.tensor_copy(acc, doubled[0])
    for tile in doubled[1:]:
        nisa.tensor_tensor(acc, acc, tile, nisa.AluOp.add)
    lang.store(out, acc)
    return out


def test_a_constant_tile_is_refilled_not_stored():
    result = sum_of_constants(np.zeros((1, 1), np.float32), config="tiny", race_check=True)
    np.testing.assert_array_equal(result.output, np.full((32, CHUNK), 15.0, np.float32))
    # tile 4's memset evicts tile 3 (farthest next use), acc then evicts tile 4: both hold a
    # constant, so they leave free and come back by the same memset
    spill = result.summary.sbuf_spill
    assert (spill["stores"], spill["reloads"], spill["refills"]) == (0, 0, 2)
    refills = _dmas(result, "refill")
    assert [r.instruction.OPCODE for r in refills] == ["memset", "memset"]
    assert sorted(r.instruction.value for r in refills) == [4.0, 5.0]


def test_a_computed_tile_is_stored_once_per_eviction_and_reloaded_per_use():
    x = np.random.default_rng(4).standard_normal((32, 12 * CHUNK)).astype(np.float32)
    result = reuse_a_result(x, config="tiny", race_check=True)
    chunks = x.reshape(32, 12, CHUNK)
    expected = chunks[:, 3:12].sum(axis=1) + 3 * 2 * chunks[:, 0]
    np.testing.assert_allclose(result.output, expected, rtol=1e-5, atol=1e-4)
    spill = result.summary.sbuf_spill
    # doubled is evicted in every round but written only once: one store, a reload per round
    # in which it left (its spill copy stays current)
    assert (spill["stores"], spill["bytes_stored"]) == (1, TILE_BYTES)
    assert (spill["reloads"], spill["bytes_reloaded"]) == (3, 3 * TILE_BYTES)
    ((_, traffic),) = result.summary.sbuf_spill_by_tile.items()
    assert traffic == {"stored_bytes": TILE_BYTES, "reloaded_bytes": 3 * TILE_BYTES}
    stores = _dmas(result, "spill")
    assert len(stores) == 1 and "reuse_a_result:spill:sbuf" in stores[0].instruction.tag
    # one contiguous transfer per tile: a descriptor per partition row, both ways
    for record in stores + _dmas(result, "reload"):
        runs, run_bytes = record.instruction.dst.contiguous_runs()
        assert record.instruction.src.nbytes == TILE_BYTES and run_bytes * runs == TILE_BYTES


def test_a_copy_of_an_input_the_kernel_writes_is_stored_not_read_again():
    x = np.random.default_rng(5).standard_normal((32, 6 * CHUNK)).astype(np.float32)
    built = in_place.build(x, config="tiny")
    # as sum_of_live_chunks, but x changes: chunks 3, 4, 5 go through the spill area
    spill = built.spill
    assert (spill["rereads"], spill["deferred_loads"]) == (0, 0)
    assert (spill["stores"], spill["reloads"]) == (3, 3)


def test_a_tile_overwritten_whole_at_its_next_use_leaves_free():
    """Contents never read again are dead even before the tile's last use: a ring of buffers
    reloaded every round keeps no spill traffic, however deep."""

    x = np.random.default_rng(6).standard_normal((32, 12 * CHUNK)).astype(np.float32)
    result = rounds(x, config="tiny", race_check=True)
    np.testing.assert_allclose(result.output, x.reshape(32, 12, CHUNK).sum(axis=1), rtol=1e-5)
    spill = result.summary.sbuf_spill
    assert spill["stores"] == spill["reloads"] == spill["rereads"] == 0


@pytest.mark.parametrize(("config", "mode"), [("tiny", DgeMode.hwdge), ("trn1", DgeMode.none)])
def test_spill_stores_come_from_scalar_reloads_from_sync_with_the_hardware_dge_if_any(config, mode):
    rows = 32 if config == "tiny" else 128
    width = CHUNK if config == "tiny" else 12 * 1024  # 48 KiB per partition: 4 fit in trn1's 192
    built = big.build(lang.TensorSpec((rows, 6 * width)), config=config)
    assert (built.spill["stores"], built.spill["reloads"]) == (3, 3)
    made = [
        i
        for s in built.program.cores[0].streams.values()
        for i in s
        if ":spill:" in i.tag or ":reload:" in i.tag
    ]
    queues = built.config.dma.queues_per_engine
    stores = [i for i in made if ":spill:" in i.tag]
    reloads = [i for i in made if ":reload:" in i.tag]
    assert len(stores) == len(reloads) == 3
    assert all((i.engine, i.queue, i.dge_mode) == ("scalar", queues - 1, mode) for i in stores)
    assert all((i.engine, i.queue, i.dge_mode) == ("sync", queues - 2, mode) for i in reloads)

"""Several cores in one run: collectives on the collective engines, the LNC pair's sendrecv and
core_barrier, remote semaphores, and merged programs. Exact ticks on ``tiny`` (1 tick = 1 ns,
intra-chip link 16 B/ns with 100 ns a hop, chip-to-chip 8 B/ns with 200 ns, launch 50 ns,
remote semaphores 10 ns, HBM touches off: configs/tiny.yaml, with two cores a chip)."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.chip import merge_programs, spmd
from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.errors import DeadlockError, HwsimError, IllegalInstructionError
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import run

#: tiny with two cores a chip sharing its HBM stack (tiny itself has one core, as one-core tests
#: expect).
TWO_CORES = {"chip.cores_per_chip": 2, "hbm.cores_per_stack": 2}
TINY = load_config("tiny", overrides=TWO_CORES)
#: ... and 2 cores a logical core (for LNC tests).
TINY_LNC = load_config("tiny", overrides={**TWO_CORES, "chip.cores_per_logical_core": 2})


def _collective_program(kind: str, cores: int, make_src, dst_rows, **fields):
    """One core per rank: load nothing, run ``kind`` from an HBM input into an HBM output."""

    @lang.kernel
    def rank_kernel(x, core):
        out = lang.ndarray((dst_rows, x.shape[1]), x.dtype, buffer=lang.hbm, name="y")
        nisa.collective(kind, out, x, group=tuple(range(cores)), rank=core, **fields)
        return out

    def build(core: int):
        return rank_kernel.build(make_src(core), core, config=TINY).program

    return spmd(build, cores)


def _outputs(result, cores):
    return [result.outputs["y" if k == 0 else f"c{k}.y"] for k in range(cores)]


def test_all_reduce_values_and_ring_ticks_on_one_chip():
    x = [np.full((32, 16), k + 1.0, np.float32) for k in range(2)]
    program = _collective_program("all_reduce", 2, lambda k: x[k], 32)
    result = run(program, TINY)
    for got in _outputs(result, 2):
        np.testing.assert_array_equal(got, x[0] + x[1])
    # 2 ranks, B = 2 KiB, C = 1 KiB: (2 - 1) reduce steps + (2 - 1) forwarding steps of
    # 100 + 1024 / 16 = 164 ns, plus the 50 ns launch
    (first, second) = result.trace.collectives
    assert (first.start_tick, first.end_tick) == (0, 2 * 164 + 50)
    assert first.algorithm == "ring" and first.link_bytes == {"intra_chip": 2048}
    assert second.end_tick == first.end_tick


def test_ring_over_chips_takes_the_slowest_hop():
    # 4 ranks on tiny's 2-core chips: chips 0 and 1, a ring 0-1 (intra), 1-2 (chip), 2-3, 3-0
    x = [np.full((32, 16), float(k), np.float32) for k in range(4)]
    program = _collective_program("all_reduce", 4, lambda k: x[k], 32)
    result = run(program, TINY)
    for got in _outputs(result, 4):
        np.testing.assert_array_equal(got, np.full((32, 16), 6.0, np.float32))
    # C = 2048 / 4 = 512 B; a chip hop: 200 + 512 / (8 x 2 links) = 232 ns; 6 steps + launch
    assert result.trace.collectives[0].end_tick == 6 * 232 + 50


@pytest.mark.parametrize(
    ("kind", "dst_rows", "expected"),
    [
        ("all_gather", 64, lambda x, k: np.concatenate(x)),
        ("reduce_scatter", 16, lambda x, k: (x[0] + x[1])[16 * k : 16 * (k + 1)]),
        (
            "all_to_all",
            32,
            lambda x, k: np.concatenate([x[0][16 * k : 16 * (k + 1)], x[1][16 * k : 16 * (k + 1)]]),
        ),
    ],
)
def test_collective_values(kind, dst_rows, expected):
    rng = np.random.default_rng(3)
    x = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2)]
    result = run(_collective_program(kind, 2, lambda k: x[k], dst_rows), TINY)
    for k, got in enumerate(_outputs(result, 2)):
        np.testing.assert_allclose(got, expected(x, k), rtol=1e-6)


def test_permute_moves_to_the_named_rank():
    x = [np.full((32, 16), k + 10.0, np.float32) for k in range(2)]

    @lang.kernel
    def rank_kernel(x, core):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        nisa.collective(
            "permute", out, x, group=(0, 1), rank=core, send_to=1 - core, recv_from=1 - core
        )
        return out

    program = spmd(lambda k: rank_kernel.build(x[k], k, config=TINY).program, 2)
    got = _outputs(run(program, TINY), 2)
    np.testing.assert_array_equal(got[0], x[1])
    np.testing.assert_array_equal(got[1], x[0])


def test_a_collective_starts_when_its_slowest_rank_arrives():
    x = np.ones((32, 16), np.float32)

    @lang.kernel
    def rank_kernel(x, core):
        tile = lang.load(x)
        if core == 1:  # core 1 works longer before it has its input
            for _ in range(20):
                nisa.tensor_scalar(tile, tile, lang.AluOp.multiply, 1.0)
        staged = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="staged")
        lang.store(staged, tile)
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        nisa.collective("all_reduce", out, staged, group=(0, 1), rank=core)
        return out

    program = spmd(lambda k: rank_kernel.build(x, k, config=TINY).program, 2, shared={"x"})
    result = run(program, TINY)
    first, second = result.trace.collectives
    assert first.arrival_tick < second.arrival_tick
    assert first.start_tick == second.start_tick == second.arrival_tick
    assert second.end_tick - second.start_tick == 2 * 164 + 50
    # rank 0's collective engine waited for its peer: ready at its arrival, started later
    record = next(r for r in result.trace.instructions if r.engine == "collective" and r.core == 0)
    assert record.start_tick == second.arrival_tick


def test_ranks_disagreeing_on_the_collective_is_an_error():
    def build(core):
        @lang.kernel
        def rank_kernel(x):
            out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
            nisa.collective(
                "all_reduce" if core == 0 else "all_to_all", out, x, group=(0, 1), rank=core
            )
            return out

        return rank_kernel.build(np.ones((32, 16), np.float32), config=TINY).program

    with pytest.raises(HwsimError, match="rank 0 runs all_reduce of 2048 B but rank 1 runs"):
        run(spmd(build, 2), TINY)


def test_a_rank_that_never_arrives_is_a_deadlock_naming_the_collective():
    def build(core):
        @lang.kernel
        def rank_kernel(x):
            out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
            if core == 0:
                nisa.collective("all_reduce", out, x, group=(0, 1), rank=0)
            else:
                lang.store(out, lang.load(x))
            return out

        return rank_kernel.build(np.ones((32, 16), np.float32), config=TINY).program

    with pytest.raises(
        DeadlockError, match=r"waits for the other ranks of collective 0 on \(0, 1\)"
    ):
        run(spmd(build, 2), TINY)


def _swap_kernel():
    @lang.kernel
    def swap(x, core):
        tile = lang.load(x[32 * core : 32 * (core + 1), :])
        got = lang.ndarray((32, x.shape[1]), x.dtype)
        nisa.sendrecv(tile, got, send_to=1 - core, recv_from=1 - core)
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        lang.store(out[32 * core : 32 * (core + 1), :], got)
        return out

    return swap


def test_sendrecv_swaps_tiles_between_the_pair_and_is_timed():
    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    swap = _swap_kernel()
    program = spmd(lambda k: swap.build(x, k, config=TINY_LNC).program, 2, shared={"x", "out"})
    result = run(program, TINY_LNC)
    got = result.outputs["out"]
    np.testing.assert_array_equal(got[:32], x[32:])
    np.testing.assert_array_equal(got[32:], x[:32])
    by_pc = {(r.core, r.pc): r for r in result.trace.instructions}  # one sync stream per core
    exchanges, stores = ([by_pc[(core, pc)] for core in (0, 1)] for pc in (1, 2))
    assert {r.instruction.OPCODE for r in exchanges} == {"sendrecv"}
    ready = max(r.start_tick for r in exchanges)
    assert ready == max(p.end_tick for p in result.trace.dma if p.trigger_pc == 0)  # loaded
    # each transfer starts once both ends are ready plus the 10 ns handshake, arrives after the
    # DMA start latency (100 ns) on its sender's engines, and moves 32 x 64 B SBUF to SBUF
    pieces = [p for p in result.trace.dma if p.trigger_pc == 1]
    assert {p.core for p in pieces} == {0, 1}
    assert {p.queued_tick for p in pieces} == {ready + 10 + 100}
    # both cores' exchanges complete when both transfers are done: their stores start then
    done = max(p.end_tick for p in pieces)
    assert [r.start_tick for r in stores] == [done, done]


def test_core_barrier_orders_the_cores_writes_before_their_reads():
    @lang.kernel
    def exchange(x, core):
        shared = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="shared")
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        mine = slice(32 * core, 32 * (core + 1))
        theirs = slice(32 * (1 - core), 32 * (2 - core))
        tile = lang.load(x[mine, :])
        nisa.tensor_scalar(tile, tile, lang.AluOp.multiply, 3.0)
        lang.store(shared[mine, :], tile)
        nisa.core_barrier(shared, core=core)
        lang.store(out[mine, :], lang.load(shared[theirs, :]))
        return out

    x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    program = spmd(
        lambda k: exchange.build(x, k, config=TINY_LNC).program, 2, shared={"x", "shared", "out"}
    )
    result = run(program, TINY_LNC, initcheck=True)
    got = result.outputs["out"]
    np.testing.assert_array_equal(got[:32], 3 * x[32:])
    np.testing.assert_array_equal(got[32:], 3 * x[:32])
    by_op = {}
    for r in result.trace.instructions:
        by_op.setdefault(r.instruction.OPCODE, []).append(r)
    signals, waits = by_op["core_barrier"], by_op["barrier_wait"]
    # each wait starts when the later of the two signals has landed: 10 ns after its start
    assert {w.start_tick for w in waits} == {max(s.start_tick for s in signals) + 10}
    updates = [u for u in result.trace.semaphore_updates if u.semaphore == "S.lnc.barrier"]
    assert sorted(u.core for u in updates) == [0, 1]
    assert {u.source_engine for u in updates} == {"core0.gpsimd", "core1.gpsimd"}


def test_remote_semaphore_of_a_core_outside_the_program_is_named():
    @lang.kernel
    def lonely(x):
        nisa.core_barrier(x, core=0, cores=(0, 5))
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        lang.store(out, lang.load(x))
        return out

    program = lonely.build(np.ones((32, 16), np.float32), config=TINY).program
    with pytest.raises(
        IllegalInstructionError, match=r"core 0 signals semaphore 'S\.lnc\.barrier' of core 5"
    ):
        run(program, TINY)


def test_merge_renames_private_tensors_and_shares_the_named_ones():
    @lang.kernel
    def copy(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        scratch = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="scratch")
        tile = lang.load(x)
        lang.store(scratch, tile)
        lang.store(out, lang.load(scratch))
        return out

    x = np.ones((32, 16), np.float32)
    built = [copy.build(x * (k + 1), config=TINY).program for k in range(2)]
    merged = merge_programs(built, shared={"x"})
    assert set(merged.hbm) == {"x", "out", "scratch", "c1.out", "c1.scratch"}
    assert merged.meta["tensor_cores"] == {"out": 0, "scratch": 0, "c1.out": 1, "c1.scratch": 1}
    result = run(merged, TINY)
    np.testing.assert_array_equal(result.outputs["out"], x)  # the shared x is core 0's values
    np.testing.assert_array_equal(result.outputs["c1.out"], x)
    with pytest.raises(IllegalInstructionError, match="shared tensor 'x' is"):
        merge_programs(
            [built[0], copy.build(np.ones((32, 8), np.float32), config=TINY).program], {"x"}
        )


def test_a_run_holds_the_cores_of_one_instance():
    program = spmd(
        lambda k: _swap_kernel().build(np.ones((64, 16), np.float32), k % 2, config=TINY).program,
        9,
    )
    with pytest.raises(IllegalInstructionError, match="one run of tiny holds at most 8"):
        run(program, TINY, numerics=False)


def test_the_chrome_trace_has_a_process_per_core_and_the_collective_as_flows(tmp_path):
    from hwsim.trace.chrome import core_pid, engine_tid, iter_events, write_chrome_trace

    x = [np.full((32, 16), float(k), np.float32) for k in range(4)]
    result = run(_collective_program("all_reduce", 4, lambda k: x[k], 32), TINY)
    path = tmp_path / "trace.json"
    write_chrome_trace(result.trace, path)
    events = list(iter_events(path))
    tid = engine_tid("collective")
    names = {
        (e["pid"], e["args"]["name"])
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("tid") == tid
    }
    assert names == {(core_pid(core), "CollectiveE") for core in range(4)}
    slices = [e for e in events if e.get("ph") == "X" and e.get("tid") == tid]
    assert sorted(e["pid"] for e in slices) == [core_pid(core) for core in range(4)]
    flows = [e for e in events if e.get("cat") == "collective"]
    starts = [(e["pid"], e["id"]) for e in flows if e["ph"] == "s"]
    ends = [(e["pid"], e["id"]) for e in flows if e["ph"] == "f"]
    assert [pid for pid, _ in starts] == [core_pid(core) for core in range(3)]
    assert [pid for pid, _ in ends] == [core_pid(core) for core in range(1, 4)]
    assert [i for _, i in starts] == [i for _, i in ends]


def _streaming_pair_ns(core_ids):
    """Two cores each loading and storing a 256 KiB tensor, placed on ``core_ids``."""

    @lang.kernel
    def stream(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        for t in range(4):
            rows = slice(32 * t, 32 * (t + 1))
            lang.store(out[rows, :], lang.load(x[rows, :]))
        return out

    # tiny's stack gives 8 B/ns, half of one core's 4 DMA engines x 4 B/ns: sharing shows
    config = load_config(
        "tiny", overrides={"chip.cores_per_chip": 4, "hbm.stacks": 2, "hbm.cores_per_stack": 2}
    )
    x = np.ones((128, 512), np.float32)
    program = spmd(lambda k: stream.build(x, config=config).program, 2)
    return run(program, config, numerics=False, core_ids=core_ids).summary.total_ns


def test_cores_on_one_hbm_stack_share_its_bandwidth_and_cores_on_two_do_not():
    # physical cores 0 and 1 share stack 0; cores 0 and 2 use stacks 0 and 1
    shared, apart = _streaming_pair_ns([0, 1]), _streaming_pair_ns([0, 2])
    assert shared > 1.2 * apart
    assert _streaming_pair_ns([4, 6]) == apart  # the same placement on other stacks


def test_the_report_splits_each_core_into_compute_and_exposed_communication():
    @lang.kernel
    def overlapped(x, core):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        other = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="z")
        nisa.collective("all_reduce", out, x, group=(0, 1), rank=core)
        tile = lang.load(x)  # independent of the collective: runs beside it
        for _ in range(4):
            nisa.activation(tile, nisa.ActivationFunction.exp, tile)
        lang.store(other, tile)
        return out

    x = np.ones((32, 16), np.float32)
    program = spmd(lambda k: overlapped.build(x, k, config=TINY).program, 2, shared={"x"})
    result = run(program, TINY)
    report = result.summary.extras["communication"]
    for core in (0, 1):
        row = report["cores"][core]
        # the all-reduce of 2 KiB takes 2 x 164 + 50 ns (the first test's), all of it beside
        # the load, the activations or the store, or exposed
        assert row["communication_ns"] == 2 * 164 + 50
        assert row["overlapped_ns"] + row["exposed_ns"] == row["communication_ns"]
        assert 0 < row["overlapped_ns"] < row["communication_ns"]
        assert row["compute_ns"] > 0 and row["link_bytes"] == {"intra_chip": 2048}
    assert (
        run(_collective_program("all_reduce", 2, lambda k: x, 32), TINY).summary.extras[
            "communication"
        ]["cores"][0]["exposed_ns"]
        == 2 * 164 + 50
    )  # nothing else ran: all of it exposed


#: tiny's two cores on their one HBM stack (8 B/ns, 1/8 tick a byte), with HBM touches on: a
#: reduced byte costs two touches, a forwarded byte one.
TOUCHING = load_config(
    "tiny",
    overrides={
        **TWO_CORES,
        "collectives.hbm_touches_per_copy_byte": 1,
        "collectives.hbm_touches_per_reduce_byte": 2,
    },
)


@pytest.mark.parametrize(
    ("algorithm", "ranks", "hbm_bytes"),
    [
        # 2 ranks, B = 2 KiB, chunks of 1 KiB: one reduce step (2 touches), one copy step (1)
        ("ring", 2, 1024 * 2 + 1024 * 1),
        # 4 ranks, B = 4 KiB, chunks of 1 KiB: 3 reduce steps and 3 copy steps
        ("ring", 4, 3 * 1024 * 2 + 3 * 1024 * 1),
        # halving moves 2 KiB then 1 KiB (reduce), doubling the same (copy)
        ("rdh", 4, (2048 + 1024) * 2 + (2048 + 1024) * 1),
        # each of 2 phases writes its chunk to 3 peers, at the larger touches
        ("mesh", 4, 2 * 3 * 1024 * 2),
    ],
)
def test_a_collective_counts_the_hbm_bytes_each_rank_reads_and_writes(algorithm, ranks, hbm_bytes):
    cost = CostModel.for_config(TOUCHING).collectives.of(
        "all_reduce", 1024 * ranks, tuple(range(ranks)), algorithm=algorithm
    )
    assert (cost.algorithm, cost.hbm_bytes) == (algorithm, hbm_bytes)
    permute = CostModel.for_config(TOUCHING).collectives.of("permute", 4096, (0, 1))
    assert permute.hbm_bytes == 4096  # one touch a byte


def test_a_collective_holds_its_hbm_stack_and_the_dmas_after_it_wait():
    """Both ranks' all-reduce starts at tick 0 and holds the stack they share for its HBM bytes
    (3,072 B each: 384 ticks); core 0's store, triggered at 148 after four VectorE ops, reaches
    its engines at 248 and needs 2 KiB of the stack (256 ticks) after both reservations."""
    x = np.ones((32, 16), np.float32)

    @lang.kernel
    def rank_kernel(x, core):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        nisa.collective("all_reduce", out, x, group=(0, 1), rank=core)
        if core == 0:
            tile = lang.ndarray(x.shape, x.dtype, buffer=lang.sbuf)
            nisa.memset(tile, 1.0)
            for _ in range(3):
                nisa.tensor_scalar(tile, tile, lang.AluOp.multiply, 1.0)
            lang.store(lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="w"), tile)
        return out

    def store_ticks(config):
        program = spmd(lambda k: rank_kernel.build(x, k, config=config).program, 2, shared={"x"})
        result = run(program, config)
        assert {r.start_tick for r in result.trace.collectives} == {0}
        return {(d.start_tick, d.end_tick) for d in result.trace.dma}

    untouched = load_config("tiny", overrides=TWO_CORES)  # the collective reads no HBM
    assert store_ticks(untouched) == {(248, 248 + 2048 // 8)}
    assert store_ticks(TOUCHING) == {(248, 2 * 3072 // 8 + 2048 // 8)}


def test_hbm_held_beside_a_run_delays_the_dmas_after_it():
    """Work beside the run (a rank's collective between its graphs) holding 3,072 B of the
    stack from tick 0 (384 ticks at 8 B/ns) and 800 B from tick 700 (100 ticks). The 2 KiB load
    reaches its engines at 100 (start latency) and needs the stack for 256 ticks after the
    first hold: it ends at 384 + 256 = 640. The store, triggered then, reaches its engines at
    740, after the second hold began at 700 (the stack free at 800): it ends at 800 + 256."""
    x = np.ones((32, 16), np.float32)

    @lang.kernel
    def copy_through(x):
        tile = lang.load(x)
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="y")
        lang.store(out, tile)
        return out

    program = copy_through.build(x, config=TINY).program
    alone = _transfer_spans(run(program, TINY))
    held = _transfer_spans(run(program, TINY, hbm_held=[(0, 0, 3072), (0, 700, 800)]))
    assert alone == [(100, 100 + 256), (456, 456 + 256)]  # HBM-bound, the stack free
    assert held == [(100, 384 + 256), (740, 800 + 256)]


def _transfer_spans(result):
    """(first piece's start, last piece's end) of each DMA transfer, in start order."""
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    for d in result.trace.dma:
        key = (d.trigger_engine, d.trigger_pc)
        start, end = spans.get(key, (d.start_tick, d.end_tick))
        spans[key] = (min(start, d.start_tick), max(end, d.end_tick))
    return sorted(spans.values())

"""Kernel builds under the list scheduler (``schedule="list"``): shorter runs, the same numerics
(race checker and initcheck on), and the marks that keep order (``no_reorder``,
``schedule_barrier``, engine state) respected."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.lang import isa as nisa
from hwsim.library.workloads import WORKLOADS
from hwsim.machine.simulator import run
from hwsim.schedule import SCHEDULE_ENV

CHECKED = dict(race_check=True, initcheck=True)


def chains(x, y, *, barrier: bool = False):
    """Two independent load -> compute -> store chains. In program order the second load is
    triggered behind the first store (one trigger engine), which waits for the first chain."""
    out_x = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out_x")
    out_y = lang.ndarray(y.shape, y.dtype, buffer=lang.hbm, name="out_y")
    tx = lang.load(x)
    nisa.activation(tx, lang.ActivationFunction.exp, tx)
    lang.store(out_x, tx)
    if barrier:
        lang.schedule_barrier("chain")
    ty = lang.load(y)
    nisa.tensor_scalar(ty, ty, lang.AluOp.multiply, 2.0)
    lang.store(out_y, ty)
    return out_x, out_y


@lang.kernel
def two_chains(x, y):
    return chains(x, y)


@lang.kernel
def two_chains_in_order(x, y):
    with lang.no_reorder():
        return chains(x, y)


@lang.kernel
def two_chains_with_barrier(x, y):
    return chains(x, y, barrier=True)


def inputs():
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((128, 512)).astype(np.float32),
        rng.standard_normal((128, 512)).astype(np.float32),
    )


def dma_stream(result):
    """(opcode, HBM tensor) of each DMA in its trigger engine's stream (one engine here)."""
    streams = result.program.cores[0].streams
    (engine,) = {e for e, stream in streams.items() if any(i.IS_DMA for i in stream)}
    return [(i.OPCODE, i.dst.tensor or i.src.tensor) for i in streams[engine] if i.IS_DMA]


def synchronised_streams(result):
    """Per engine, each instruction without its source tag: what it does and how it syncs."""
    return {
        engine: [(i.static_key(), i.waits, i.signals) for i in stream]
        for engine, stream in result.program.cores[0].streams.items()
    }


def test_list_schedule_shortens_two_chains_with_identical_outputs():
    x, y = inputs()
    program = two_chains(x, y, config="trn2", schedule="program", **CHECKED)
    listed = two_chains(x, y, config="trn2", schedule="list", **CHECKED)
    # The second load moves ahead of the first store on the triggering engine's stream.
    assert dma_stream(program) == [
        ("dma_copy", "x"),
        ("dma_copy", "out_x"),
        ("dma_copy", "y"),
        ("dma_copy", "out_y"),
    ]
    listed_dmas = dma_stream(listed)
    assert {t for _, t in listed_dmas[:2]} == {"x", "y"}  # both loads, then the stores
    assert {t for _, t in listed_dmas[2:]} == {"out_x", "out_y"}
    assert listed.summary.total_ns < program.summary.total_ns
    np.testing.assert_allclose(program.outputs[0], np.exp(x), rtol=1e-5)
    np.testing.assert_array_equal(program.outputs[1], 2 * y)
    for got, want in zip(listed.outputs, program.outputs, strict=True):
        np.testing.assert_array_equal(got, want)
    assert listed.program.meta["schedule"] == "list"  # type: ignore[union-attr]
    assert "schedule" not in program.program.meta  # type: ignore[union-attr]


@lang.kernel
def two_chains_sequential(x, y):
    outs = []
    for step in lang.sequential_range(2):
        src = (x, y)[step]
        out = lang.ndarray(src.shape, src.dtype, buffer=lang.hbm, name=("out_x", "out_y")[step])
        tile = lang.load(src)
        if step == 0:
            nisa.activation(tile, lang.ActivationFunction.exp, tile)
        else:
            nisa.tensor_scalar(tile, tile, lang.AluOp.multiply, 2.0)
        lang.store(out, tile)
        outs.append(out)
    return tuple(outs)


@lang.kernel
def two_chains_with_edge(x, y):
    out_x = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out_x")
    out_y = lang.ndarray(y.shape, y.dtype, buffer=lang.hbm, name="out_y")
    tx = lang.load(x)
    nisa.activation(tx, lang.ActivationFunction.exp, tx)
    store_x = nisa.dma_copy(out_x, tx)
    ty = lang.ndarray(y.shape, y.dtype)
    load_y = nisa.dma_copy(ty, y)
    lang.schedule_edge(store_x, load_y)
    nisa.tensor_scalar(ty, ty, lang.AluOp.multiply, 2.0)
    lang.store(out_y, ty)
    return out_x, out_y


@pytest.mark.parametrize(
    "kernel",
    [two_chains_in_order, two_chains_with_barrier, two_chains_sequential, two_chains_with_edge],
)
def test_no_reorder_and_barriers_keep_program_order(kernel):
    x, y = inputs()
    program = two_chains(x, y, config="trn2", schedule="program", **CHECKED)
    kept = kernel(x, y, config="trn2", schedule="list", **CHECKED)
    assert synchronised_streams(kept) == synchronised_streams(program)
    assert kept.summary.total_ns == program.summary.total_ns
    for got, want in zip(kept.outputs, program.outputs, strict=True):
        np.testing.assert_array_equal(got, want)


def test_marks_do_nothing_under_program_order():
    x, y = inputs()
    plain = two_chains(x, y, config="trn2", schedule="program")
    for kernel in (
        two_chains_in_order,
        two_chains_with_barrier,
        two_chains_sequential,
        two_chains_with_edge,
    ):
        marked = kernel(x, y, config="trn2", schedule="program")
        assert synchronised_streams(marked) == synchronised_streams(plain)


@lang.kernel
def two_draws(x):
    """The first draw must wait (its tile is still being stored), the second need not: without
    the engine-state order the scheduler would draw the second tile's numbers first."""
    first = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="first")
    second = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="second")
    copied = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="copied")
    busy = lang.load(x)
    lang.store(copied, busy)
    nisa.rng(busy)  # WAR behind the store
    lang.store(first, busy)
    fresh = lang.ndarray(x.shape, x.dtype)
    nisa.rng(fresh)
    lang.store(second, fresh)
    return copied, first, second


def test_engine_state_order_keeps_random_numbers():
    x = np.arange(128 * 64, dtype=np.uint32).reshape(128, 64)
    program = two_draws(x, config="trn2", schedule="program", **CHECKED)
    listed = two_draws(x, config="trn2", schedule="list", **CHECKED)
    assert not np.array_equal(program.outputs[1], program.outputs[2])
    for got, want in zip(listed.outputs, program.outputs, strict=True):
        np.testing.assert_array_equal(got, want)


def test_policy_from_the_environment(monkeypatch):
    x, y = inputs()
    monkeypatch.setenv(SCHEDULE_ENV, "list")
    assert two_chains.build(x, y, config="trn2").program.meta["schedule"] == "list"
    monkeypatch.setenv(SCHEDULE_ENV, "fastest")
    with pytest.raises(Exception, match=r"\$HWSIM_SCHEDULE='fastest' is not a scheduling policy"):
        two_chains.build(x, y, config="trn2")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("matmul_blocked", marks=pytest.mark.slow),  # ~8 s each on a shared core
        pytest.param("matmul_block_free", marks=pytest.mark.slow),
        "softmax",
        "layernorm",
        "attention",
    ],
)
def test_library_kernels_keep_their_numerics_under_the_list_scheduler(name):
    workload = next(w for w in WORKLOADS if w.name == name)
    programs = {
        policy: workload.kernel.build(
            *workload.args(0), config="trn2", schedule=policy, **workload.kwargs
        ).program
        for policy in ("program", "list")
    }
    results = {p: run(prog, "trn2", **CHECKED) for p, prog in programs.items()}
    for result in results.values():
        ok = workload.check(result.outputs).ok
        assert ok
    np.testing.assert_array_equal(results["list"].outputs["out"], results["program"].outputs["out"])
    assert results["list"].summary.total_ns <= results["program"].summary.total_ns


@lang.kernel
def through_placed_scratch(x):
    """x -> scratch a -> out_a; then scratch b, placed over a's bytes, x * 3 -> b -> out_b."""
    out_a = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out_a")
    out_b = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out_b")
    a = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="a")
    b = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="b")
    lang.place_hbm(a, 0, [])
    t = lang.load(x)
    lang.store(a, t)
    lang.store(out_a, lang.load(a))
    lang.place_hbm(b, 0, [a])
    nisa.tensor_scalar(t, t, lang.AluOp.multiply, 3.0)
    lang.store(b, t)
    lang.store(out_b, lang.load(b))
    return out_a, out_b


def test_hbm_placements_are_replayed_in_place():
    x = inputs()[0]
    program = through_placed_scratch(x, config="trn2", schedule="program", **CHECKED)
    listed = through_placed_scratch(x, config="trn2", schedule="list", **CHECKED)
    np.testing.assert_array_equal(listed.outputs[0], x)
    np.testing.assert_array_equal(listed.outputs[1], 3 * x)
    assert listed.program.hbm["b"].address_bytes == 0  # type: ignore[union-attr]
    assert listed.summary.total_ns <= program.summary.total_ns


def test_list_scheduled_builds_are_deterministic():
    workload = next(w for w in WORKLOADS if w.name == "attention")
    streams = [
        synchronised_streams(
            workload.kernel.build(*workload.args(0), config="trn2", schedule="list")
        )
        for _ in range(2)
    ]
    assert streams[0] == streams[1]
    program = workload.kernel.build(*workload.args(0), config="trn2", schedule="program")
    assert streams[0] != synchronised_streams(program)  # it did reorder


@pytest.mark.parametrize(
    "name", ["conv2d_3x3", pytest.param("matmul_basic", marks=pytest.mark.slow)]
)
def test_best_is_never_slower_than_program_order_or_the_list_schedule(name):
    # On trn1, conv2d_3x3's list schedule is estimated faster but simulates 1% slower; on trn2,
    # matmul_basic's is estimated slower (so list keeps program order) but simulates 4% faster.
    workload = next(w for w in WORKLOADS if w.name == name)
    config = "trn1" if name == "conv2d_3x3" else "trn2"
    totals = {}
    for policy in ("program", "list", "best"):
        program = workload.kernel.build(*workload.args(0), config=config, schedule=policy).program
        result = run(program, config, **CHECKED)
        assert workload.check(result.outputs).ok
        totals[policy] = result.summary.total_ns
    assert totals["best"] == min(totals.values())
    assert totals["best"] < max(totals["program"], totals["list"])

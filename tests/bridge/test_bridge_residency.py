"""On-chip residency (``bridge.residency``): forwarded loads move nothing, stale tiles are never
forwarded, elided stores are never emitted, and residency off is the plain DMA queue plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

import hwsim.bridge.context as context_module
from hwsim import lang
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PASS_NAMES, PassSelection
from hwsim.bridge.residency import ResidentQueues
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing, DmaQueues, TransposedLoader


def _dmas(program, tensor: str | None = None) -> list[DmaCopy]:
    """The DMA copies of a program (touching HBM tensor ``tensor``, if given)."""
    found = []
    for stream in program.cores[0].streams.values():
        for ins in stream:
            if isinstance(ins, DmaCopy) and (
                tensor is None or tensor in (ins.src.tensor, ins.dst.tensor)
            ):
                found.append(ins)
    return found


def _run_kernel(body, x: np.ndarray):
    return lang.kernel(body)(x, config="trn2", initcheck=True)


# ---- the queue plan, inside a kernel ------------------------------------------------------------
def test_a_forwarded_load_is_the_stored_tile_and_moves_nothing():
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        mid = lang.ndarray((64, 32), lang.float32, lang.hbm, name="mid")
        out = lang.ndarray((64, 32), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((64, 32), lang.float32)
        queues.load(t, x)
        nisa.tensor_scalar(t, t, lang.AluOp.add, 1.0)
        queues.store(mid, t)
        d = lang.ndarray((64, 32), lang.float32)
        got = queues.load_resident(d, mid)
        seen["same"] = got is t
        nisa.tensor_scalar(d, got, lang.AluOp.multiply, 2.0)
        queues.store(out, d)
        queues.finish()
        seen["stats"] = queues.stats
        return out

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    result = _run_kernel(body, x)
    assert seen["same"]
    assert seen["stats"].loads_forwarded == 1
    # One load of x, the store to mid, the store to out: no DMA reads mid back.
    reads_of_mid = [d for d in _dmas(result.program, "mid") if d.src.tensor == "mid"]
    assert reads_of_mid == []
    assert len(_dmas(result.program)) == 3
    np.testing.assert_array_equal(result.outputs[0], (x + 1) * 2)


def test_a_tile_written_after_its_store_is_not_forwarded():
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        queues.deferrable.add("mid")  # a graph value: its store may be deferred
        mid = lang.ndarray((64, 32), lang.float32, lang.hbm, name="mid")
        out = lang.ndarray((64, 32), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((64, 32), lang.float32)
        queues.load(t, x)
        queues.store(mid, t)  # mid = x (deferred)
        nisa.memset(t, 7.0)  # t changes: the pending store must go first, mid is stale in t
        d = lang.ndarray((64, 32), lang.float32)
        got = queues.load_resident(d, mid)
        seen["got_dst"] = got is d
        queues.store(out, got)
        queues.finish()
        seen["stats"] = queues.stats
        return out

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    result = _run_kernel(body, x)
    assert seen["got_dst"]
    assert seen["stats"].loads_forwarded == 0
    assert seen["stats"].stores_elided == 0
    mid = _dmas(result.program, "mid")
    assert [d.dst.tensor == "mid" for d in mid] == [True, False]  # store, then a real load
    np.testing.assert_array_equal(result.outputs[0], x)  # the values before the memset


def test_a_store_every_reader_of_which_was_forwarded_is_elided():
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        queues.deferrable.add("mid")
        mid = lang.ndarray((64, 32), lang.float32, lang.hbm, name="mid")
        out = lang.ndarray((64, 32), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((64, 32), lang.float32)
        queues.load(t, x)
        queues.store(mid, t)
        d = lang.ndarray((64, 32), lang.float32)
        y = queues.load_resident(d, mid)
        r = lang.ndarray((64, 32), lang.float32)
        nisa.tensor_scalar(r, y, lang.AluOp.add, 3.0)
        queues.release_dead(["out"])  # mid's last reader is done
        queues.store(out, r)
        queues.finish()
        seen["stats"] = queues.stats
        return out

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    result = _run_kernel(body, x)
    assert _dmas(result.program, "mid") == []  # never written, never read
    assert seen["stats"].stores_elided == 1
    assert seen["stats"].bytes_elided == 64 * 32 * 4
    np.testing.assert_array_equal(result.outputs[0], x + 3)


def test_a_load_in_another_dtype_is_not_forwarded():
    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        mid = lang.ndarray((64, 32), lang.bfloat16, lang.hbm, name="mid")
        out = lang.ndarray((64, 32), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((64, 32), lang.float32)
        queues.load(t, x)
        queues.store(mid, t)  # rounds to bf16 in HBM
        d = lang.ndarray((64, 32), lang.float32)
        got = queues.load_resident(d, mid)
        assert got is d  # the fp32 tile is not what a bf16 round trip gives
        queues.store(out, got)
        queues.finish()
        return out

    x = (np.arange(64 * 32, dtype=np.float32) * 1.001).reshape(64, 32)
    result = _run_kernel(body, x)
    rounded = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(result.outputs[0], rounded)


# ---- the pass, on graphs ------------------------------------------------------------------------
class _Chain(torch.nn.Module):
    def forward(self, x, w):
        h = torch.relu(x @ w)
        return torch.tanh(h + 1.0) * 2.0


def _graph():
    x, w = torch.randn(32, 64), torch.randn(64, 128)
    gm = fx.symbolic_trace(_Chain())
    traced = make_fx(gm, tracing_mode="real")(x, w)
    return traced, [x, w]


def test_residency_is_a_named_pass_and_reports_what_it_did():
    assert "residency" in PASS_NAMES
    graph, args = _graph()
    selection = PassSelection.all().without("fusion")  # separate ops, so values cross ops
    on = lower_graph(graph, args, passes=selection)
    off = lower_graph(graph, args, passes=selection.without("residency"))
    stats = on.pipeline["residency"]
    assert stats["loads_forwarded"] + stats["loads_copied"] > 0
    assert stats["stores_elided"] > 0
    assert off.pipeline["residency"] == {}
    step = next(s for s in on.pipeline["steps"] if s["pass"] == "residency")
    assert step["stores_elided"] == stats["stores_elided"]
    assert len(_dmas(on.program)) < len(_dmas(off.program))
    expected = _Chain()(*args)
    for lowered in (on, off):
        got = lowered.run(args).outputs
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    t_on = on.run(args, numerics=False).result.summary.total_ns
    t_off = off.run(args, numerics=False).result.summary.total_ns
    assert t_on < t_off


def test_residency_off_is_the_plain_dma_queue_plan():
    """Off, the program is instruction for instruction the one ``DmaQueues`` gives."""
    graph, args = _graph()
    off_passes = {"residency": False, "row_broadcast": False}  # what DmaQueues alone does
    off = lower_graph(graph, args, passes=off_passes)

    class PlainQueues(DmaQueues):  # what the bridge used before residency
        def __init__(self, load_queues: int = 2, **_: object) -> None:
            super().__init__(load_queues=load_queues)
            self.deferrable: set[str] = set()

        def load_resident(self, dst, src, *, engine="sync"):
            self.load(dst, src, engine=engine)
            return dst

        def release_dead(self, live):
            pass

        def rows_of(self, tensor, elements):
            return None

        def finish(self):
            pass

        def result_ring(self, buffers):
            return BufferRing(buffers)

        rows_broadcast = 0

    saved = context_module.ResidentQueues
    context_module.ResidentQueues = PlainQueues  # type: ignore[misc]
    try:
        plain = lower_graph(graph, args, passes=off_passes)
    finally:
        context_module.ResidentQueues = saved
    streams = off.program.cores[0].streams
    assert {k: len(v) for k, v in streams.items()} == {
        k: len(v) for k, v in plain.program.cores[0].streams.items()
    }
    for name, stream in streams.items():
        assert list(stream) == list(plain.program.cores[0].streams[name])
    t_off = off.run(args, numerics=False).result.summary.total_ns
    assert t_off == plain.run(args, numerics=False).result.summary.total_ns


@pytest.mark.parametrize("selection", ["all", {"fusion": False}])
def test_forwarding_keeps_the_numbers(selection):
    graph, args = _graph()
    lowered = lower_graph(graph, args, passes=selection)
    expected = _Chain()(*args)
    torch.testing.assert_close(lowered.run(args).outputs, expected, rtol=1e-5, atol=1e-5)


def _stored_in_two_halves(queues: ResidentQueues, x):
    """x + 1 (left columns) and x + 2 (right columns), each half loaded, computed and stored
    through ``queues`` into HBM tensor ``mid``, so the stores leave both halves resident."""
    rows, width = x.shape
    half = width // 2
    mid = lang.ndarray((rows, width), lang.float32, lang.hbm, name="mid")
    left, right = (lang.ndarray((rows, half), lang.float32) for _ in range(2))
    for tile, columns, addend in ((left, slice(0, half), 1.0), (right, slice(half, width), 2.0)):
        queues.load(tile, x[:, columns])
        nisa.tensor_scalar(tile, tile, lang.AluOp.add, addend)
        queues.store(mid[:, columns], tile)
    return mid, left, right


def test_column_ranges_of_resident_tiles_are_read_in_place_or_copied_together():
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        mid, _, right = _stored_in_two_halves(queues, x)
        out = lang.ndarray((64, 32), lang.float32, lang.hbm, name="out")
        part = queues.load_resident(lang.ndarray((64, 8), lang.float32), mid[:, 20:28])
        seen["view"] = part.tile is right  # columns of one resident tile: a view of it
        whole = lang.ndarray((64, 32), lang.float32)
        queues.load(whole, mid)  # spans both tiles: two on-chip copies
        nisa.tensor_tensor(whole[:, 20:28], whole[:, 20:28], part, lang.AluOp.add)
        queues.store(out, whole)
        queues.finish()
        seen["stats"] = queues.stats
        return out

    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    result = _run_kernel(body, x)
    assert seen["view"]
    assert (seen["stats"].loads_forwarded, seen["stats"].loads_copied) == (1, 1)
    assert [d for d in _dmas(result.program, "mid") if d.src.tensor == "mid"] == []
    expected = x + np.where(np.arange(32) < 16, 1.0, 2.0).astype(np.float32)
    expected[:, 20:28] *= 2
    np.testing.assert_array_equal(result.outputs[0], expected)


def test_residency_backs_off_when_the_memory_planner_takes_over():
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        queues.deferrable.add("mid")
        mid = lang.ndarray((32, 32), lang.float32, lang.hbm, name="mid")
        out = lang.ndarray((32, 32), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((32, 32), lang.float32)
        queues.load(t, x)
        queues.store(mid, t)  # deferred
        big = [lang.ndarray((32, 1024), lang.float32) for _ in range(5)]  # > 16 KiB: deferred
        for b in big:
            nisa.memset(b, 0.0)
        d = lang.ndarray((32, 32), lang.float32)
        got = queues.load_resident(d, mid)
        seen["dst"] = got is d
        queues.store(out, got)
        queues.finish()
        seen["stats"] = queues.stats
        return out

    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    result = lang.kernel(body)(x, config="tiny", initcheck=True)
    assert seen["stats"].backed_off and seen["dst"]
    assert seen["stats"].stores_elided == 0
    np.testing.assert_array_equal(result.outputs[0], x)


def test_a_resident_value_gives_its_sbuf_to_an_op_that_needs_it_instead_of_backing_off():
    """tiny SBUF: 16 KiB per partition. A 4 KiB resident value (the records of its load and of
    its store, one tile) and three 4 KiB working tiles fill it; the next tile takes the resident
    value's bytes: its deferred store is emitted first, and the load of it reads HBM into that
    tile. The kernel never goes to the planner."""
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 16)
        queues.deferrable.add("mid")
        mid = lang.ndarray((32, 1024), lang.float32, lang.hbm, name="mid")
        out = lang.ndarray((32, 1024), lang.float32, lang.hbm, name="out")
        t = lang.ndarray((32, 1024), lang.float32)
        queues.load(t, x)
        queues.store(mid, t)  # deferred; the record holds the tile
        del t
        work = [lang.ndarray((32, 1024), lang.float32) for _ in range(3)]
        for w in work:
            nisa.memset(w, 0.0)
        d = lang.ndarray((32, 1024), lang.float32)  # reclaims the resident tile's bytes
        got = queues.load_resident(d, mid)
        seen["dst"] = got is d
        queues.store(out, got)
        queues.finish()
        seen["stats"] = queues.stats
        seen["planner"] = lang.current().planner
        return out

    x = np.arange(32 * 1024, dtype=np.float32).reshape(32, 1024)
    result = lang.kernel(body)(x, config="tiny", initcheck=True)
    stats = seen["stats"]
    assert stats.records_reclaimed == 2 and not stats.backed_off and seen["planner"] is None
    assert seen["dst"] and stats.stores_elided == 0  # read back from HBM, its store was kept
    np.testing.assert_array_equal(result.outputs[0], x)


def test_a_transposing_load_of_resident_tiles_transposes_them_where_they_are():
    """The TensorE path of ``TransposedLoader`` reads a value that stores left in SBUF (here in
    two column pieces) in place: no staging tile and no on-chip copy into one, whose buffer
    would have to wait for the last reader of the memory it reuses."""
    seen = {}

    def body(x):
        queues = ResidentQueues(enabled=True, budget_bytes=1 << 17)
        mid, left, right = _stored_in_two_halves(queues, x)
        out = lang.ndarray((256, 128), lang.float32, lang.hbm, name="out")
        transposed = lang.ndarray((128, 2, 128), lang.float32)  # [k, K tiles, rows]
        TransposedLoader(queues, mode="tensor").load(transposed, mid, 0, 128, 0, 256)
        for j in range(2):
            queues.store(out[j * 128 : (j + 1) * 128, :], transposed[:, j, :])
        queues.finish()
        seen["stats"] = queues.stats
        seen["sources"] = {id(left): left, id(right): right}
        return out

    x = np.arange(128 * 256, dtype=np.float32).reshape(128, 256) / 7
    result = _run_kernel(body, x)
    streams = result.program.cores[0].streams
    assert [ins for ins in streams["gpsimd"] if isinstance(ins, TensorCopy)] == []
    assert [d for d in _dmas(result.program, "mid") if d.src.tensor == "mid"] == []
    transposes = [ins for ins in streams["tensor"] if ins.OPCODE == "nc_transpose"]
    assert len(transposes) == 2
    read = {ins.reads()[0].offset_bytes for ins in transposes}
    held = {t.block.offset for t in seen["sources"].values()}
    assert read == held  # each transpose read a stored tile, not a copy of it
    assert seen["stats"].loads_forwarded == 1 and seen["stats"].loads_copied == 0
    expected = (x + np.where(np.arange(256) < 128, 1.0, 2.0).astype(np.float32)).T
    np.testing.assert_array_equal(result.outputs[0], expected)

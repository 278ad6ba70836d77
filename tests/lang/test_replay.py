"""Equal ISA calls append copies (``hwsim.lang.replay``) and ``lang.repeat`` replays a block: both
must give the very program that making and recording every instruction gives (waits included),
and must not stand in for a call or block that would emit something else."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hwsim import lang
from hwsim.errors import HwsimError
from hwsim.lang import TensorSpec
from hwsim.lang import isa as nisa
from hwsim.lang.kernel import KernelContext
from hwsim.lang.replay import keyable
from hwsim.library import attention, matmul_optimized, softmax
from hwsim.program import Program


def _without_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels built from here on have no replay cache: every call is made and recorded, and
    ``repeat`` runs its body every time."""
    init = KernelContext.__init__

    def without(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.replays = None

    monkeypatch.setattr(KernelContext, "__init__", without)


def _text(program: Program) -> list[str]:
    return [repr(i) for core in program.cores for s in core.streams.values() for i in s]


@lang.kernel
def in_place_and_copies(x):
    """Equal calls with in-place and equal-copy operands (their waits differ), scalars of both
    zero signs, and a block that is repeated with and without a change of state."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
    a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
    b = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.memset(b, 0.0)
    for i in range(6):
        view = a[:, 0:256]
        nisa.tensor_tensor(view, view, b[:, 0:256], lang.AluOp.add)  # dst is src0
        nisa.tensor_tensor(a[:, 0:256], a[:, 0:256], b[:, 0:256], lang.AluOp.add)
        nisa.activation(b, lang.ActivationFunction.copy, a, scale=0.0 if i % 2 else -0.0)
        nisa.tensor_tensor(b[:, 256:], a[:, 256:], b[:, 256:], lang.AluOp.multiply)
    nisa.dma_copy(dst=out, src=b)
    return out


def _kernels():
    return [
        lambda: matmul_optimized.build(  # several K and N blocks: its groups repeat
            TensorSpec((2048, 2048), "bf16"), TensorSpec((2048, 4096), "bf16"), config="trn1"
        ),
        lambda: softmax.build(TensorSpec((256, 512), "fp32"), config="trn2"),
        lambda: attention.build(
            TensorSpec((256, 64), "bf16"),
            TensorSpec((256, 64), "bf16"),
            TensorSpec((256, 64), "bf16"),
            config="trn2",
        ),
        lambda: in_place_and_copies.build(TensorSpec((128, 512), "fp32"), config="trn2"),
    ]


def test_replayed_programs_equal_programs_made_call_by_call(monkeypatch) -> None:
    replayed = [_text(build().program) for build in _kernels()]
    _without_replay(monkeypatch)
    made = [_text(build().program) for build in _kernels()]
    for a, b in zip(replayed, made, strict=True):
        assert a == b


def test_a_replayed_zero_keeps_its_sign() -> None:
    program = in_place_and_copies.build(TensorSpec((128, 512), "fp32"), config="trn2").program
    scales = [i.scale for i in program.cores[0].streams["scalar"] if i.OPCODE == "activation"]
    assert [math.copysign(1.0, s) for s in scales] == [-1.0, 1.0] * 3


def test_only_immutable_fields_are_keyed() -> None:
    assert keyable([1, True, 2.5, "x", None, lang.AluOp.add])
    assert not keyable([1, [1, 2]])
    assert not keyable([(1, 2)])  # a tuple may hold a list
    assert not keyable([{}])


def _counting_kernel(calls: list[str], allocate: bool, draw_queue: bool, hbm: bool):
    @lang.kernel
    def k(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
        nisa.dma_copy(dst=a, src=x, queue=0)
        for i in range(4):

            def body() -> None:
                calls.append("ran")
                nisa.tensor_scalar(a, a, lang.AluOp.add, 1.0)
                if allocate:
                    t = lang.ndarray((128, 16), lang.float32, buffer=lang.sbuf)
                    nisa.memset(t, 0.0)
                if draw_queue:
                    nisa.dma_copy(dst=a[:, 0:16], src=a[:, 16:32])
                if hbm:
                    nisa.dma_copy(dst=out, src=a, queue=1)

            lang.repeat(body, [a], params=(i % 2,))
        nisa.dma_copy(dst=out, src=a, queue=0)
        return out

    return k


@pytest.mark.parametrize(
    ("allocate", "draw_queue", "hbm", "runs"),
    [
        (False, False, False, 2),  # two keys (i % 2): each body runs once
        (True, False, False, 4),  # allocates: never kept
        (False, True, False, 4),  # draws a DMA queue: never kept
        (False, False, True, 4),  # an HBM operand: its input status is per instruction
    ],
)
def test_repeat_keeps_only_blocks_it_can_replay_exactly(
    allocate: bool, draw_queue: bool, hbm: bool, runs: int, monkeypatch
) -> None:
    calls: list[str] = []
    kernel = _counting_kernel(calls, allocate, draw_queue, hbm)
    replayed = _text(kernel.build(TensorSpec((128, 512), "fp32"), config="trn2").program)
    assert len(calls) == runs
    _without_replay(monkeypatch)
    calls.clear()
    made = _text(kernel.build(TensorSpec((128, 512), "fp32"), config="trn2").program)
    assert len(calls) == 4
    assert replayed == made


def test_a_block_keyed_by_other_views_runs_again() -> None:
    calls: list[int] = []

    @lang.kernel
    def k(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
        nisa.dma_copy(dst=a, src=x, queue=0)
        for lo in (0, 256, 0, 256):
            view = a[:, lo : lo + 256]

            def body(view=view) -> None:
                calls.append(1)
                nisa.tensor_scalar(view, view, lang.AluOp.add, 1.0)

            lang.repeat(body, [view])
        nisa.dma_copy(dst=out, src=a, queue=0)
        return out

    program = k.build(TensorSpec((128, 512), "fp32"), config="trn2").program
    assert len(calls) == 2
    offsets = [i.dst.offset_bytes for i in program.cores[0].streams["vector"]]
    assert offsets == [0, 1024, 0, 1024]


def test_a_copy_gets_the_waits_of_an_equal_instruction_and_none_after_build() -> None:
    from hwsim.builder import ProgramBuilder
    from hwsim.dtypes import FP32
    from hwsim.isa.ap import AccessPattern, MemorySpace
    from hwsim.isa.copy_ops import TensorCopy

    a = AccessPattern(MemorySpace.SBUF, FP32, 0, 1, 0, (8,), (1,))
    b = AccessPattern(MemorySpace.SBUF, FP32, 0, 1, 64, (8,), (1,))

    def copy() -> TensorCopy:
        return TensorCopy(engine="vector", dst=b, src=a)

    replayed, made = ProgramBuilder(deferred=True), ProgramBuilder(deferred=True)
    for builder in (replayed, made):
        builder.emit(TensorCopy(engine="scalar", dst=a, src=b), owned=True)
        builder.emit(copy(), owned=True)
    token = replayed.last_replay
    assert token is not None
    replayed.emit_again(token)
    made.emit(copy(), owned=True)
    replayed.build()
    made.build()
    assert _text(replayed.program) == _text(made.program)
    assert made.program.cores[0].streams["vector"][0].waits  # the RAW on the scalar copy
    with pytest.raises(HwsimError, match="has built its program"):
        replayed.emit_again(token)


def test_repeat_refuses_unhashable_params_and_operands_that_are_not_tiles() -> None:
    @lang.kernel
    def k(x, params, operand):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
        nisa.dma_copy(dst=a, src=x, queue=0)
        lang.repeat(lambda: nisa.memset(a, 0.0), [operand or a], params)
        nisa.dma_copy(dst=out, src=a, queue=0)
        return out

    spec = TensorSpec((128, 512), "fp32")
    with pytest.raises(HwsimError, match=r"params must be hashable"):
        k.build(spec, [1, 2], None, config="trn2")
    with pytest.raises(HwsimError, match=r"operands are tiles and views, got int"):
        k.build(spec, (), 3, config="trn2")
    k.build(spec, (1, 2), None, config="trn2")


def test_a_repeated_block_shares_objects_only_where_positions_have_no_waits() -> None:
    program = matmul_optimized.build(
        TensorSpec((2048, 2048), "bf16"), TensorSpec((2048, 4096), "bf16"), config="trn1"
    ).program
    stream = program.cores[0].streams["tensor"]
    uses: dict[int, int] = {}
    for instruction in stream:
        uses[id(instruction)] = uses.get(id(instruction), 0) + 1
    shared = [i for i in stream if uses[id(i)] > 1]
    assert shared  # the blocks' copies without waits are one object each
    assert all(not i.waits for i in shared)
    assert any(i.waits for i in stream)  # and a position with waits has an object of its own


#: Runs of the bodies below, counted outside them (a list a body closes over is captured too).
_RUNS: list[str] = []


@lang.kernel
def closing_over(x, mode):
    """A block whose key (the tile alone) lacks what it reads: a loop variable (``loop``), a
    numpy array made anew each iteration (``array``) or a bound method's object (``method``)."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
    a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
    nisa.dma_copy(dst=a, src=x, queue=0)

    def add_column(column: int, scale: float) -> None:
        _RUNS.append(mode)
        lo = column * 128
        nisa.tensor_scalar(a[:, lo : lo + 128], a[:, 0:128], lang.AluOp.add, scale)

    class Column:
        def __init__(self, column: int) -> None:
            self.column = column

        def add(self) -> None:
            add_column(self.column, 1.0)

    for i in range(8):
        column = i % 4
        scale = np.full(2, 1.0)  # the same contents, a new array each iteration
        if mode == "loop":
            lang.repeat(lambda: add_column(column, 1.0), [a])  # noqa: B023 (called at once)
        elif mode == "array":
            lang.repeat(lambda: add_column(0, float(scale[0])), [a])  # noqa: B023
        else:
            lang.repeat(Column(column).add, [a])
    nisa.dma_copy(dst=out, src=a, queue=0)
    return out


@pytest.mark.parametrize(("mode", "runs"), [("loop", 4), ("array", 8), ("method", 8)])
def test_a_block_is_copied_only_when_what_its_body_captures_is_equal(
    mode: str, runs: int, monkeypatch
) -> None:
    """A body met with other captured values runs again (before, the first run's copy stood in
    for every iteration: the loop's four columns were all written as column 0): the program is
    the one of call-by-call emission. A numpy array compares unequal to every other array
    (its ``==`` has no truth value), and a bound method by its object."""
    spec = TensorSpec((128, 512), "fp32")
    _RUNS.clear()
    program = closing_over.build(spec, mode, config="trn2").program
    assert len(_RUNS) == runs
    if mode == "loop":
        offsets = [i.dst.offset_bytes for i in program.cores[0].streams["vector"]]
        assert offsets == [0, 512, 1024, 1536] * 2
    _without_replay(monkeypatch)
    assert _text(program) == _text(closing_over.build(spec, mode, config="trn2").program)


def test_a_block_met_again_with_equal_captured_values_is_copied() -> None:
    """Equal numbers and lists, and views of the same geometry (new objects each iteration)
    count as equal: the body runs once per distinct set of values, at most ``MAX_VARIANTS``."""

    @lang.kernel
    def k(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
        nisa.dma_copy(dst=a, src=x, queue=0)
        for i in range(24):
            column, extents = i % 2, [(0, 128)]  # a new list each iteration
            view = a[:, column * 128 : column * 128 + 128]

            def body() -> None:
                _RUNS.append("ran")
                for lo, width in extents:  # noqa: B023 (the body runs inside repeat)
                    nisa.tensor_scalar(view, a[:, lo : lo + width], lang.AluOp.add, 1.0)  # noqa: B023

            lang.repeat(body, [a])
        nisa.dma_copy(dst=out, src=a, queue=0)
        return out

    _RUNS.clear()
    program = k.build(TensorSpec((128, 512), "fp32"), config="trn2").program
    assert len(_RUNS) == 2  # one run per column; the other 22 iterations are copies
    offsets = [i.dst.offset_bytes for i in program.cores[0].streams["vector"]]
    assert offsets == [0, 512] * 12


def test_a_key_keeps_at_most_max_variants_runs_and_stays_right_beyond(monkeypatch) -> None:
    """A body met with more distinct captured values than ``MAX_VARIANTS`` runs every time past
    the cap (nothing more is kept), and its program is still call-by-call emission's."""
    from hwsim.lang import replay

    caches: list[replay.ReplayCache] = []
    init = replay.ReplayCache.__init__

    def kept_here(self) -> None:
        init(self)
        caches.append(self)

    monkeypatch.setattr(replay.ReplayCache, "__init__", kept_here)
    distinct = replay.MAX_VARIANTS + 3

    @lang.kernel
    def k(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        a = lang.ndarray((128, 512), lang.float32, buffer=lang.sbuf)
        nisa.dma_copy(dst=a, src=x, queue=0)
        for i in range(2 * distinct):
            scale = float(i % distinct)

            def body() -> None:
                _RUNS.append("ran")
                nisa.tensor_scalar(a, a, lang.AluOp.add, scale)  # noqa: B023 (runs inside repeat)

            lang.repeat(body, [a])
        nisa.dma_copy(dst=out, src=a, queue=0)
        return out

    _RUNS.clear()
    spec = TensorSpec((128, 512), "fp32")
    program = k.build(spec, config="trn2").program
    (variants,) = [v for _, v in caches[-1].blocks.values()]
    assert len(variants) == replay.MAX_VARIANTS
    # the first MAX_VARIANTS values are copied the second time round; the 3 past the cap run twice
    assert len(_RUNS) == distinct + (distinct - replay.MAX_VARIANTS)
    scales = [i.scalar0 for i in program.cores[0].streams["vector"]]
    assert scales == [float(i % distinct) for i in range(2 * distinct)]
    _without_replay(monkeypatch)
    assert _text(program) == _text(k.build(spec, config="trn2").program)

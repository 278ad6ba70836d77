"""A build defers the collector's full passes (``full_gc_deferred``): a build only adds to what
it keeps, so they walk a growing heap for nothing. The young generations still run, so a tile
the author's code drops in a reference cycle is freed during the build, as before, and the
collector's settings are restored after the build, also when the kernel raises."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from hwsim import lang
from hwsim.lang import TensorSpec
from hwsim.trace.gc_pause import full_gc_deferred

seen: dict[str, object] = {}


@lang.kernel
def drops_a_tile_in_a_cycle(x):
    seen["threshold"] = gc.get_threshold()
    tile = lang.ndarray((128, 64), "float32", lang.sbuf)
    cycle: list[object] = [tile]
    cycle.append(cycle)
    seen["tile"] = weakref.ref(tile)
    del tile, cycle
    junk = [[] for _ in range(20_000)]  # allocations enough for several young collections
    seen["freed_during_build"] = seen["tile"]() is None  # type: ignore[operator]
    del junk
    out = lang.ndarray((128, 64), "float32", lang.hbm)
    data = lang.ndarray((128, 64), "float32", lang.sbuf)
    lang.isa.dma_copy(data, x)
    lang.isa.dma_copy(out, data)
    return out


@lang.kernel
def raises(x):
    raise ValueError("the kernel's own error")


def test_a_build_defers_full_collections_only_and_restores_the_settings() -> None:
    before = gc.get_threshold()
    drops_a_tile_in_a_cycle.build(TensorSpec((128, 64), "float32"))
    young, middle, full = seen["threshold"]  # type: ignore[misc]
    assert (young, middle) == before[:2]
    assert full > 1_000_000 > before[2]
    assert gc.get_threshold() == before


def test_young_collections_still_free_cyclic_garbage_during_a_build() -> None:
    drops_a_tile_in_a_cycle.build(TensorSpec((128, 64), "float32"))
    assert seen["freed_during_build"] is True


def test_settings_are_restored_when_the_kernel_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="the kernel's own error"):
        raises.build(TensorSpec((128, 64), "float32"))
    assert gc.get_threshold() == before


def test_nested_deferrals_restore_the_outer_setting() -> None:
    before = gc.get_threshold()
    with full_gc_deferred():
        inner = gc.get_threshold()
        with full_gc_deferred():
            pass
        assert gc.get_threshold() == inner
    assert gc.get_threshold() == before


def test_deferrals_on_threads_ending_out_of_order_restore_the_first_setting() -> None:
    """Ranks of a torch.distributed group build on threads: A enters, B enters, A ends, B ends."""
    before = gc.get_threshold()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    inside_b: list[int] = []

    def a() -> None:
        with full_gc_deferred():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with full_gc_deferred():
            b_in.set()
            a_out.wait(10)
            inside_b.append(gc.get_threshold()[2])

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inside_b[0] > 1_000_000  # still deferred while B builds, after A ended
    assert gc.get_threshold() == before

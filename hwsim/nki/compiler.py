"""``nki.compiler``: direct allocation (``sbuf`` / ``psum``: ``alloc``, ``mod_alloc``,
``auto_alloc``; ``hwsim.nki.direct``), honoured; decorators and options, accepted.
``no_reorder`` is recorded for a scheduler (as ``nl.no_reorder``); the others have no effect
here (each run's summary lists them under ``nki_notes``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwsim.nki.direct import psum_space as psum
from hwsim.nki.direct import sbuf_space as sbuf
from hwsim.nki.language import no_reorder

__all__ = ["multi_buffer", "no_reorder", "psum", "sbuf"]


def _no_effect(name: str) -> Callable[..., Any]:
    def decorator(fn: Any = None, **options: Any) -> Any:
        if fn is None or not callable(fn):
            return lambda f: f
        return fn

    decorator.__name__ = name
    decorator.__doc__ = f"nki.compiler.{name}: accepted, without effect in the simulator."
    return decorator


skip_middle_end_transformations = _no_effect("skip_middle_end_transformations")
enable_stack_allocator = _no_effect("enable_stack_allocator")
force_auto_alloc = _no_effect("force_auto_alloc")
disable_reorder = _no_effect("disable_reorder")


class multi_buffer:
    """``nl.affine_range(n, directives=ncc.multi_buffer(k))``: the tiles allocated in that
    loop's body are multi-buffered ``k`` deep (the depth of its allocation rings)."""

    def __init__(self, depth: int) -> None:
        if int(depth) < 1:
            raise ValueError(f"ncc.multi_buffer({depth}): the depth must be >= 1")
        self.depth = int(depth)


def tile_size_hint(*args: Any, **kwargs: Any) -> None:
    """Accepted, without effect."""

"""Masks that are Python constants: ``mask=(2 * i + g) * 128 < seqlen`` compares ints, so the
kernel passes True or False. True is no mask; False masks every element off, and NKI then does
nothing for that call. Here the call runs with its instructions dropped (``dropping``): its
tiles are allocated as usual and nothing is emitted, including the emissions its results
(a pending load, copy or matmul) make later.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from hwsim.lang.kernel import current
from hwsim.nki.state import state


@contextlib.contextmanager
def dropping() -> Iterator[None]:
    """Instructions emitted in the block are dropped (the call they come from is masked off)."""
    st = state()
    if st.dropping:
        yield
        return
    context = current()
    st.dropping = True
    context.emit = lambda instruction, operands=(): instruction  # type: ignore[method-assign]
    try:
        yield
    finally:
        del context.__dict__["emit"]
        st.dropping = False


@contextlib.contextmanager
def undropped() -> Iterator[None]:
    """Emit in the block even inside a masked-off call: the deferred initialisation of a tile
    declared outside it (``nl.zeros`` of a block tensor, filled at its first use), which the
    kernel did ask for."""
    st = state()
    if not st.dropping:
        yield
        return
    context = current()
    dropper = context.__dict__.pop("emit")
    st.dropping = False
    try:
        yield
    finally:
        context.emit = dropper  # type: ignore[method-assign]
        st.dropping = True


def honours_constant_mask(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with ``mask=True`` as no mask and ``mask=False`` as a call that emits nothing."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        mask = kwargs.get("mask")
        if isinstance(mask, bool | np.bool_):
            kwargs["mask"] = None
            if not mask:
                with dropping():
                    result = fn(*args, **kwargs)
                from hwsim.nki.tensor import NkiTensor

                if isinstance(result, NkiTensor):  # nothing written: assigning it copies nothing
                    result.written_mask = False
                return result
        return fn(*args, **kwargs)

    return call


def emitting(dropped: bool) -> contextlib.AbstractContextManager[None]:
    """For a pending result made by a masked-off call: its later emission is dropped too."""
    return dropping() if dropped else contextlib.nullcontext()

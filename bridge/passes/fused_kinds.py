"""Fused-group lowerings, registered by the group's type as single ops are by their ATen op.

A fusion pass replaces a group of nodes by one node whose target is a ``FusedKernel`` of some
kind (an elementwise chain or matmul epilogue, a row pass, a conv with its batch norm, an
attention, ...). The kind's lowering is registered here against the kind's own class:

    @register_fused(MyKernel)
    def lower_my_kernel(ctx, kernel, outside, escapes) -> HbmValue: ...

``outside`` are the fused node's arguments (the group's inputs from outside it, as lowered
values); ``escapes`` says whether its value is a graph output. ``graph_lowering`` looks the
lowering up by the target's exact type (``fused_lowering``): a subclass is a kind of its own
and must register, so a new kind never falls through to another kind's lowering silently.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from hwsim.bridge.errors import BridgeError, register_once
from hwsim.bridge.identity import group_tag

__all__ = ["FUSED_LOWERINGS", "fused_lowering", "group_tag", "register_fused"]

#: fn(ctx, kernel, outside, escapes) -> the fused node's value.
FusedLowering = Callable[[Any, Any, list[Any], bool], Any]

FUSED_LOWERINGS: dict[type, FusedLowering] = {}


def register_fused(kind: type) -> Callable[[FusedLowering], FusedLowering]:
    """Register the lowering of fused kind ``kind`` (one per kind)."""

    def register(fn: FusedLowering) -> FusedLowering:
        what = f"fused kind {kind.__name__}"
        register_once(FUSED_LOWERINGS, kind, fn, what, attrgetter("__qualname__"))
        return fn

    return register


def fused_lowering(target: Any) -> FusedLowering:
    """The lowering registered for ``type(target)``; an error naming the kind if there is none."""
    found = FUSED_LOWERINGS.get(type(target))
    if found is None:
        known = ", ".join(sorted(k.__name__ for k in FUSED_LOWERINGS))
        raise BridgeError(
            f"fused kind {type(target).__name__} has no registered lowering "
            f"(bridge.passes.fused_kinds.register_fused); registered: {known}"
        )
    return found

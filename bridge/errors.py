"""Errors of the PyTorch bridge: why an op cannot run on the simulator, and registry misuse."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from hwsim.errors import HwsimError

T = TypeVar("T")


class Reason(StrEnum):
    """Why an op runs on the CPU instead of the simulator (one category per cause)."""

    NO_LOWERING = "no lowering"  # nothing registered for this ATen overload
    DTYPE = "dtype"  # a tensor dtype the lowering (or the hardware) does not handle
    SHAPE = "shape"  # a shape, rank, dim or argument value the lowering does not handle
    DATA_DEPENDENCE = "data dependence"  # output shape or control flow depends on values
    MUTATION = "mutation"  # the op writes one of its inputs (in-place / out= variants)
    LOWERING_FAILED = "lowering failed"  # the lowering raised while emitting (a bridge bug)


class BridgeError(HwsimError):
    """Base of the bridge's errors."""


class Unsupported(BridgeError):
    """``op`` cannot be lowered: ``reason`` says which category, ``detail`` says what and why."""

    def __init__(self, op: object, reason: Reason, detail: str) -> None:
        self.op = op_name(op)
        self.reason = Reason(reason)
        self.detail = detail
        super().__init__(f"{self.op}: {self.reason.value}: {detail}")


class DuplicateLoweringError(BridgeError):
    """A lowering was registered twice for one ATen overload (or one fused kind)."""


def register_once(
    table: dict[Any, T], key: Any, entry: T, what: str, where: Callable[[T], str]
) -> None:
    """``table[key] = entry``; a ``DuplicateLoweringError`` naming both places (``where``) if
    ``what`` (the key as a message names it) already has a lowering."""
    if key in table:
        raise DuplicateLoweringError(
            f"{what} already has a lowering ({where(table[key])}); "
            f"{where(entry)} registers it again"
        )
    table[key] = entry


class FallbackError(BridgeError):
    """Fallback policy 'error' met an op that would have run on the CPU."""

    def __init__(self, unsupported: Unsupported, where: str = "") -> None:
        self.unsupported = unsupported
        at = f" (node {where})" if where else ""
        super().__init__(
            f"fallback='error': {unsupported}{at}. Use fallback='cpu' or 'warn' to run it on the "
            "CPU instead"
        )


def as_unsupported(error: HwsimError, where: str) -> Unsupported:
    """``error`` itself if it is ``Unsupported``, else a LOWERING_FAILED wrapping it."""
    if isinstance(error, Unsupported):
        return error
    return Unsupported(where, Reason.LOWERING_FAILED, f"{type(error).__name__}: {error}")


def op_name(op: object) -> str:
    """``aten.add.Tensor`` for an OpOverload, the qualified name for other callables."""
    if isinstance(op, str):
        return op
    name = getattr(op, "__name__", None)
    module = getattr(op, "__module__", "") or ""
    if hasattr(op, "_schema") and hasattr(op, "_overloadname"):
        return str(op)
    return f"{module}.{name}" if name and module and module != "builtins" else str(name or op)

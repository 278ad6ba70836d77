"""The kinds of generated case, by name: ``kernel`` (kernel-language kernels, here) and any that
another package adds through the ``hwsim.fuzz_kinds`` entry point (the bridge adds ``graph``:
random PyTorch graphs through torch.compile), loaded only when asked for, so ``hwsim`` itself
never imports torch.

A kind gives: ``generate(draw)`` a spec (plain JSON), ``check_spec(spec)`` (a spec read back
from a database is checked before use), ``check_case(spec, config)`` the failures found,
``smaller(spec)`` candidate shrinks, and ``reproduction(spec, failures, where, config)`` the text
of a ready-to-run Python file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hwsim.fuzz.spec import Draw, FuzzError

ENTRY_POINT_GROUP = "hwsim.fuzz_kinds"
#: The mix when none is given: three kernels to one graph (graphs cost several seconds each).
DEFAULT_MIX = "kernel=3,graph=1"


@dataclass(frozen=True)
class FuzzKind:
    name: str
    generate: Callable[[Draw], dict[str, Any]]
    check_spec: Callable[[Any], dict[str, Any]]
    check_case: Callable[[dict[str, Any], str], list[Any]]
    smaller: Callable[[dict[str, Any]], Iterator[dict[str, Any]]]
    reproduction: Callable[[dict[str, Any], list[dict[str, str]], str, str], str]
    #: Attempts one shrink may make (each a full check of a candidate).
    shrink_attempts: int = 150


def _kernel_kind() -> FuzzKind:
    from hwsim.fuzz.checks import check_case
    from hwsim.fuzz.shrink import kernel_candidates, reproduction
    from hwsim.fuzz.spec import check_spec, generate

    return FuzzKind("kernel", generate, check_spec, check_case, kernel_candidates, reproduction)


@functools.cache
def load_kind(name: str) -> FuzzKind:
    """The kind called ``name`` (an unknown one is an error listing those there are)."""
    if name == "kernel":
        return _kernel_kind()
    from importlib.metadata import entry_points

    points = {p.name: p for p in entry_points(group=ENTRY_POINT_GROUP)}
    if name not in points:
        known = ", ".join(["kernel", *sorted(points)])
        raise FuzzError(f"unknown fuzz kind '{name}'; known: {known}")
    kind = points[name].load()()
    if not isinstance(kind, FuzzKind):
        raise FuzzError(f"fuzz kind '{name}' ({points[name].value}) did not give a FuzzKind")
    return kind


def available_kinds() -> list[str]:
    from importlib.metadata import entry_points

    return ["kernel", *sorted(p.name for p in entry_points(group=ENTRY_POINT_GROUP))]


def parse_mix(text: str) -> tuple[str, ...]:
    """``kernel=3,graph=1`` as the cycle of kinds cases take in turn (case i: cycle[i % len]).
    Kinds not installed are left out of the default mix, and an error when named."""
    cycle: list[str] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, eq, count = item.partition("=")
        try:
            times = int(count) if eq else 1
        except ValueError:
            raise FuzzError(f"--mix {item!r}: expected KIND=COUNT, e.g. kernel=3") from None
        if times < 0 or times > 100:
            raise FuzzError(f"--mix {item!r}: a count from 0 to 100")
        if text == DEFAULT_MIX and name not in available_kinds():
            continue
        load_kind(name)
        cycle += [name] * times
    if not cycle:
        raise FuzzError(f"--mix {text!r}: no case kind left to run")
    return tuple(cycle)

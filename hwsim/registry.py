"""Name-keyed registries (engines, advisor rules, timing models, ...): a name added twice is an
error that says which table it was."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def add_unique(table: dict[K, V], key: K, value: V, what: str) -> V:
    """``table[key] = value`` and return ``value``; a key already there raises ``ValueError``
    naming ``what`` ('advisor rule', 'engine')."""
    if key in table:
        raise ValueError(f"{what} {key!r} is already registered")
    table[key] = value
    return value

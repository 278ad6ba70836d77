"""Operand roles as data: each operand field of an instruction declares whether the instruction
reads it, writes it or both (``operand``), and ``reads()`` / ``writes()`` are derived from that.

A field made by ``operand`` always holds an access pattern; one made by ``maybe_operand`` may hold
an immediate or None instead (a per-partition scalar, an optional result), and counts only when
it holds a pattern. The derived methods list the operands in field order, and are generated once
per class as plain attribute reads (``(self.src, *aps(self.scalar0))``): they run for every
instruction a kernel emits. An instruction whose regions are not whole operands (a matmul that
reads its destination only when accumulating, a gather of some partitions) writes its own
``reads`` or ``writes``; a derived one never replaces a hand-written one.

The metadata also carries the operand's name in ``nki.isa`` where it differs from the field's
(``nki="data1"`` on ``tensor_tensor``'s ``src0``), from which ``hwsim.lang.isa`` makes its calls.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hwsim.isa.ap import AccessPattern

READ, WRITE, READ_WRITE = "read", "write", "read-write"
#: Field metadata keys: the operand's role, whether it may hold a non-pattern, its nki.isa name.
ROLE, MAYBE, NKI = "role", "maybe", "nki"
#: Marks a generated ``reads``/``writes`` (a subclass generates its own; hand-written ones stay).
DERIVED = "_derived_from_roles"


def operand(role: str, *, nki: str | None = None, default: Any = dataclasses.MISSING) -> Any:
    """An operand field that always holds an access pattern, read, written or both."""
    return dataclasses.field(default=default, metadata={ROLE: role, MAYBE: False, NKI: nki})


def maybe_operand(role: str, *, nki: str | None = None, default: Any = dataclasses.MISSING) -> Any:
    """An operand field that may hold an immediate or None instead of an access pattern."""
    return dataclasses.field(default=default, metadata={ROLE: role, MAYBE: True, NKI: nki})


def param(*, nki: str, default: Any = dataclasses.MISSING) -> Any:
    """A non-operand field (an op, a flag) whose nki.isa name differs from its own."""
    return dataclasses.field(default=default, metadata={NKI: nki})


def aps(*values: Any) -> tuple[AccessPattern, ...]:
    """The access patterns among ``values`` (immediates and None left out)."""
    return tuple(v for v in values if isinstance(v, AccessPattern))


def nki_name(f: dataclasses.Field[Any]) -> str:
    """A field's name in nki.isa's calls."""
    return f.metadata.get(NKI) or f.name


_METHODS = {"reads": (READ, READ_WRITE), "writes": (WRITE, READ_WRITE)}
#: Per instruction class: the names of its operand fields it writes (``written_fields``).
_WRITTEN: dict[type, frozenset[str]] = {}


def written_fields(cls: type) -> frozenset[str]:
    """The operand fields an instruction class writes (role write or read-write): what the
    legality check holds to the memories its engine may write."""
    found = _WRITTEN.get(cls)
    if found is None:
        found = _WRITTEN[cls] = frozenset(
            f.name for f in dataclasses.fields(cls) if f.metadata.get(ROLE) in (WRITE, READ_WRITE)
        )
    return found


def derive_operand_methods(cls: type) -> None:
    """Give ``cls`` ``reads`` and ``writes`` from its fields' roles, unless it or a base class
    below ``Instruction`` has hand-written one."""
    fields = dataclasses.fields(cls)
    for method, roles in _METHODS.items():
        if _hand_written(cls, method):
            continue
        parts: list[str] = []
        maybes: list[str] = []
        for f in fields:
            if f.metadata.get(ROLE) not in roles:
                continue
            if f.metadata[MAYBE]:
                maybes.append(f"self.{f.name}")
                continue
            if maybes:
                parts.append(f"*aps({', '.join(maybes)})")
                maybes = []
            parts.append(f"self.{f.name}")
        if maybes:
            parts.append(f"*aps({', '.join(maybes)})")
        body = f"({', '.join(parts)},)" if parts else "()"
        namespace: dict[str, Any] = {"aps": aps}
        source = f"def {method}(self):\n    return {body}\n"
        where = f"<{cls.__name__}.{method} from its operand roles>"
        exec(compile(source, where, "exec"), namespace)  # as @dataclass makes its methods
        function = namespace[method]
        function.__qualname__ = f"{cls.__qualname__}.{method}"
        function.__doc__ = f"Operands {'read' if method == 'reads' else 'written'} (field roles)."
        setattr(function, DERIVED, True)
        setattr(cls, method, function)


def _hand_written(cls: type, method: str) -> bool:
    for base in cls.__mro__:
        if base.__name__ == "Instruction" and base.__module__ == "hwsim.isa.base":
            return False
        found = base.__dict__.get(method)
        if found is not None:
            return not getattr(found, DERIVED, False)
    return False

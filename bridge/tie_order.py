"""The reference order of ties where torch leaves it open: ``topk`` (any order of equal values)
and ``sort(stable=False)`` (introsort). Their values are fixed, their indices among equal values
are not: torch's CPU kernels give whatever their selection algorithm leaves. The simulator's
lowerings (``lowerings/sort.py``) give equal values lowest index first, which is what a stable
sort gives; the checks (``HwsimMode(check=True)``, OpInfo conformance) compare with that
canonical reference: the same values (exactly), and the one well-defined index order. An
index order that is not this one still fails. An eager op that falls back to the CPU returns this
order too (``HwsimMode.run_call``), so a result does not depend on which ops ran where.

Ops whose values torch leaves undefined (``empty_permuted``: uninitialized memory; the simulator
zero-fills) are compared by shape, dtype and strides only (``UNINITIALIZED``)."""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def stable_topk(
    x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.long)
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def stable_sort(
    x: torch.Tensor, dim: int = -1, descending: bool = False, *, stable: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sort(x, dim=dim, descending=descending, stable=True)


def canonical(func: Any, args: Any, kwargs: dict[str, Any], expected: Any) -> Any:
    """``expected`` with ties in the canonical order, for the ops whose tie order is open."""
    if func is aten.topk.default:
        return stable_topk(*args, **kwargs)
    if func is aten.sort.default:
        return stable_sort(*args, **kwargs)
    if func is aten.sort.stable and not kwargs.get("stable"):
        return stable_sort(*args, **{k: v for k, v in kwargs.items() if k != "stable"})
    return expected


#: OpInfo entries whose reference is taken with ``canonical`` order (by entry name).
OPINFO_REFERENCES = {"topk": stable_topk, "sort": stable_sort}

#: Ops (and OpInfo entries) whose output values are undefined in torch.
UNINITIALIZED = frozenset({aten.empty_permuted.default})
UNINITIALIZED_OPINFOS = frozenset({"empty_permuted"})

"""Which of PyTorch's OpInfo entries exercise each lowered overload.

Those whose name or alias is the overload's packet name (``aten.add.Tensor`` -> ``add``; a
leading ``_`` and an ``nn.functional.`` prefix are tried too), plus the small tables
``OWN_OPINFOS`` (entries whose own ATen op is the overload under another name, ``to`` ->
``_to_copy``) and ``EXERCISED_BY`` (entries that decompose into it, ``nn.functional.linear`` ->
``t`` + ``addmm``).
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hwsim.bridge.errors import BridgeError
from hwsim.bridge.registry import LOWERINGS

#: Lowered overload -> OpInfo entries whose own ATen op it is, under a name that is not derived
#: from the packet name (``softmax`` is CompositeImplicit over ``_softmax``, found by name).
OWN_OPINFOS: dict[str, tuple[str, ...]] = {
    "aten._safe_softmax.default": ("torch.ops.aten._safe_softmax.default",),
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        "nn.functional.scaled_dot_product_attention",
    ),
    "aten._to_copy.default": ("to", "bfloat16", "float"),
    "aten.native_layer_norm.default": ("nn.functional.layer_norm",),
    "aten.index.Tensor": ("__getitem__",),
    "aten.convolution.default": tuple(
        f"nn.functional.conv{kind}{d}d" for kind in ("", "_transpose") for d in (1, 2, 3)
    ),
    "aten.max_pool2d_with_indices.default": ("nn.functional.max_pool2d",),
    "aten._native_batch_norm_legit_no_training.default": ("nn.functional.batch_norm",),
    "aten._native_batch_norm_legit.default": ("nn.functional.batch_norm",),
    "aten.native_batch_norm.default": ("nn.functional.batch_norm",),
    "aten._native_batch_norm_legit_functional.default": ("nn.functional.batch_norm",),
}
#: Lowered overload -> OpInfo entries that reach it only through a decomposition.
EXERCISED_BY: dict[str, tuple[str, ...]] = {
    "aten.addmm.default": ("nn.functional.linear",),
    "aten.mm.default": ("matmul",),
    "aten.bmm.default": ("matmul",),
    "aten.clone.default": ("contiguous",),
    "aten.cat.default": ("stack",),
    "aten.embedding.default": ("nn.functional.embedding_bag",),  # via bridge.embedding_bag
}


def opinfo_db() -> list[Any]:
    """PyTorch's ``op_db`` (needs the ``expecttest`` package, a dev extra)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from torch.testing._internal.common_methods_invocations import op_db
        except ModuleNotFoundError as error:  # torch's test utilities import test-only packages
            raise BridgeError(
                f"PyTorch's OpInfo database needs the '{error.name}' package: "
                "pip install -e '.[dev]'"
            ) from error
    return list(op_db)


def full_name(info: Any) -> str:
    """``softmax`` or ``softmax.with_dtype`` (name and variant)."""
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def _names(info: Any) -> set[str]:
    return {info.name, *(alias.name for alias in info.aliases)}


@dataclass(frozen=True)
class OpInfoMap:
    """Lowered overloads <-> the OpInfo entries that exercise them (names as ``full_name``)."""

    own: dict[str, tuple[str, ...]]  # overload -> entries whose own op it is
    exercised: dict[str, tuple[str, ...]]  # overload -> entries that decompose into it
    unmapped: tuple[str, ...]  # lowered overloads no entry exercises

    def own_overloads(self, entry: str) -> set[str]:
        return {op for op, entries in self.own.items() if entry in entries}

    def overloads(self, entry: str) -> set[str]:
        by = (self.own, self.exercised)
        return {op for table in by for op, entries in table.items() if entry in entries}

    def entries(self) -> list[str]:
        seen = {e for table in (self.own, self.exercised) for es in table.values() for e in es}
        return sorted(seen)


def opinfo_map(db: Sequence[Any], lowered: Iterable[Any] | None = None) -> OpInfoMap:
    """The mapping for ``lowered`` overloads (default: every entry of ``LOWERINGS``)."""
    from hwsim.bridge import lowerings  # noqa: F401  (LOWERINGS is complete once this has run)

    ops = sorted(str(op) for op in (LOWERINGS if lowered is None else lowered))
    by_packet = {str(op): op.overloadpacket.__name__ for op in LOWERINGS}
    own: dict[str, tuple[str, ...]] = {}
    exercised: dict[str, tuple[str, ...]] = {}
    for op in ops:
        packet = by_packet.get(op, op.split(".")[1])
        stems = {packet, packet.lstrip("_")}
        wanted = stems | {f"nn.functional.{s}" for s in stems}
        found = [full_name(i) for i in db if _names(i) & wanted]
        found += [full_name(i) for i in db if i.name in OWN_OPINFOS.get(op, ())]
        own[op] = tuple(sorted(set(found)))
        exercised[op] = tuple(
            sorted(full_name(i) for i in db if i.name in EXERCISED_BY.get(op, ()))
        )
    unmapped = tuple(op for op in ops if not own[op] and not exercised[op])
    return OpInfoMap(own, exercised, unmapped)


def select_entries(db: Sequence[Any], mapping: OpInfoMap, ops: Sequence[str] | None) -> list[Any]:
    """The OpInfo entries to run: those mapped to a lowered overload (``ops`` None), or those
    named by ``ops`` (entry name, ``name.variant``, alias, or a lowered overload's name)."""
    if not ops:
        wanted = set(mapping.entries())
        return [i for i in db if full_name(i) in wanted]
    chosen: list[Any] = []
    for name in ops:
        if name in mapping.own:
            targets = set(mapping.own[name]) | set(mapping.exercised[name])
            hits = [i for i in db if full_name(i) in targets]
        else:
            hits = [i for i in db if name == full_name(i) or name in _names(i)]
        if not hits:
            known = sorted({full_name(i) for i in db} | {str(op) for op in LOWERINGS})
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise BridgeError(
                f"--ops {name}: no OpInfo entry or lowered overload has that name{hint}; "
                "give an OpInfo name such as 'add' or 'nn.functional.gelu', or an overload such "
                "as 'aten.add.Tensor'"
            )
        chosen += [i for i in hits if i not in chosen]
    return chosen

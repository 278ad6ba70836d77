"""How a lowered graph's inputs and outputs are HBM tensors of its program: the bindings
``LoweredGraph.run`` fills and reads back, and how ``lower_graph`` makes them from the graph's
placeholders, tensor constants and prepared weights."""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import fx

from hwsim.bridge.context import TilingOptions
from hwsim.bridge.dtypes import MOVABLE_DTYPES, tensor_to_numpy, to_hw
from hwsim.bridge.errors import Reason, Unsupported
from hwsim.bridge.passes.prepare_constants import PreparedLayout, PreparedWeight
from hwsim.bridge.precision import Precision
from hwsim.bridge.tiling.weights import block_columns, weight_block_bytes
from hwsim.config import HardwareConfig
from hwsim.dtypes import DType
from hwsim.dtypes import cast as hw_cast
from hwsim.dtypes import dtype as hw_dtype
from hwsim.isa.ap import MemorySpace
from hwsim.library.common import limits
from hwsim.program import Program


@dataclass(frozen=True)
class InputBinding:
    """Placeholder ``index`` is HBM input ``name``: its storage span, viewed with ``strides``.
    A tensor constant of the graph (a ``get_attr`` node) is an input filled from ``constant``
    on every run (index -1)."""

    name: str
    index: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype
    constant: torch.Tensor | None = None
    #: Whether the program reads the input's values. An input only its metadata is used of
    #: (``full_like(x, 1)``, ``zeros_like``) is neither range-checked nor copied in: its bytes
    #: may be anything (``torch.empty``), and no check may read memory nothing wrote.
    read: bool = True
    #: A constant prepared at compile time (``passes.prepare_constants``): the HBM input holds
    #: ``prepared.arrange`` of placeholder ``index`` (``shape``/``strides`` are the
    #: placeholder's), cast to ``prepared.dtype``.
    prepared: PreparedLayout | None = None

    @property
    def span(self) -> int:
        """Elements of the HBM input."""
        if self.prepared is not None:
            return self.prepared.elements
        if math.prod(self.shape) == 0:
            return 1
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))

    @property
    def hw_dtype(self) -> DType:
        """The dtype of the HBM input."""
        return hw_dtype(self.prepared.dtype) if self.prepared is not None else to_hw(self.dtype)

    def values(self, tensor: torch.Tensor) -> np.ndarray:
        """The HBM input's elements for ``tensor`` (the placeholder's value), a new array when
        prepared, else a view of its storage span."""
        if self.prepared is not None:
            arranged = self.prepared.arrange(tensor).to(torch.float32).numpy()
            return hw_cast(arranged.reshape(-1), self.hw_dtype)
        offset = tensor.storage_offset()
        span = torch.as_strided(tensor.detach(), (self.span,), (1,), offset)
        return storage_view(span)


def storage_view(span: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's elements as numpy in their device representation, sharing
    its memory where the dtype is native, without ``Tensor.numpy()``: that marks the tensor's
    storage as never resizable again, and FSDP2 frees (resizes to 0) the storage of the
    unsharded parameters a compiled block reads. The view does not keep the memory alive:
    ``LoweredGraph.run`` drops it after the run."""
    if span.dtype in (torch.bool, torch.int64) or span.numel() == 0:  # converted: a copy
        return tensor_to_numpy(span.clone(), check=False)
    like = tensor_to_numpy(torch.empty(0, dtype=span.dtype), check=False).dtype
    buffer = (ctypes.c_char * (span.numel() * span.element_size())).from_address(span.data_ptr())
    return np.frombuffer(memoryview(buffer).cast("B"), dtype=like)


@dataclass(frozen=True)
class OutputBinding:
    """A graph output: HBM tensor ``name`` (None for a non-tensor ``constant``)."""

    name: str | None
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    constant: Any = None
    #: The tensor holds the output's storage as it lies (a permuted view of a whole tensor, such
    #: as a weight's transpose saved for backward): read back flat and viewed with ``strides``.
    storage_order: bool = False


def is_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether strides lay ``shape`` out densely with no overlap (a permuted contiguous)."""
    expected = 1
    for n, s in sorted(zip(shape, strides, strict=True), key=lambda d: d[1]):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def call_input_bytes(bindings: list[InputBinding], constants: Iterable[str]) -> list[int]:
    """Bytes of the graph inputs a call copies in: placeholders that are not constants."""
    frozen = set(constants)
    return [
        math.prod(b.shape) * b.dtype.itemsize
        for b in bindings
        if b.index >= 0 and b.constant is None and b.prepared is None and b.name not in frozen
    ]


def mark_unread(bindings: list[InputBinding], program: Program) -> list[InputBinding]:
    """The bindings, each knowing whether an instruction of ``program`` reads its input."""
    read: set[str] = set()
    for core in program.cores:
        for _engine, _pc, instruction in core.instructions():
            read.update(ap.tensor for ap in instruction.reads() if ap.memory is MemorySpace.HBM)
    return [b if b.name in read else dataclasses.replace(b, read=False) for b in bindings]


def prepared_bindings(
    graph: fx.Graph,
    bindings: list[InputBinding],
    precision: Precision,
    config: HardwareConfig,
    options: TilingOptions,
) -> list[InputBinding]:
    """An HBM input per distinct (constant, layout) the graph's ``PreparedWeight`` nodes read,
    in the dtype auto-cast gives the matmul; each node learns its input's name
    (``meta['prepared']``)."""
    by_name = {b.name: b for b in bindings}
    lim = limits(config)
    block_bytes = weight_block_bytes(lim, options)
    made: dict[tuple[str, bool], InputBinding] = {}
    for node in graph.nodes:
        if not isinstance(node.target, PreparedWeight):
            continue
        source = by_name[node.args[0].name]
        k, n = node.meta["val"].shape
        transposed = node.target.transposed
        key = (source.name, transposed)
        if key not in made:
            dtype = precision.matmul_dtype(to_hw(source.dtype))
            block = block_columns(int(k), int(n), dtype.itemsize, lim, block_bytes)
            layout = PreparedLayout(int(k), int(n), lim.tile_k, block, transposed, dtype.name)
            name = f"{source.name}__prepared{'_t' if transposed else ''}"
            made[key] = dataclasses.replace(source, name=name, prepared=layout)
        node.meta["prepared"] = made[key].name
    return list(made.values())


def bind_placeholder(index: int, node: fx.Node, example: Any) -> InputBinding:
    """Placeholder ``index`` (``node``) bound to an HBM input like ``example``: a tensor of a
    movable dtype with concrete sizes, else ``Unsupported`` saying which input and why."""
    if not isinstance(example, torch.Tensor):
        raise Unsupported(
            "placeholder", Reason.SHAPE, f"input {node.name} is {type(example).__name__}"
        )
    if example.dtype not in MOVABLE_DTYPES:
        raise Unsupported("placeholder", Reason.DTYPE, f"input {node.name} is {example.dtype}")
    if any(not isinstance(n, int) for n in (*example.shape, *example.stride())):
        raise Unsupported("placeholder", Reason.SHAPE, f"input {node.name} has symbolic sizes")
    return InputBinding(
        node.name, index, tuple(example.shape), tuple(example.stride()), example.dtype
    )


def bind_constant(graph: fx.GraphModule | fx.Graph, node: fx.Node) -> InputBinding:
    """A tensor constant held by the GraphModule (``torch.tensor(...)`` in a traced function)."""
    owner = graph if isinstance(graph, fx.GraphModule) else None
    value: Any = owner
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    if not isinstance(value, torch.Tensor):
        raise Unsupported(
            "get_attr", Reason.SHAPE, f"constant {node.target} is not a tensor of a GraphModule"
        )
    binding = bind_placeholder(-1, node, value)
    return InputBinding(
        binding.name, -1, binding.shape, binding.strides, binding.dtype, value.detach().clone()
    )

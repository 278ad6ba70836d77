"""The roofline floor of a graph on a config: the least time any schedule could take.

    floor = max(tensor, hbm, vector, scalar)

- **tensor**: TensorE FLOPs (2·M·N·K per matmul, 2·N·Cout·Hout·Wout·Cin/groups·kh·kw per
  convolution) over the TensorE peak for the compute dtype (``hwsim.report.peaks``, HARDWARE.md
  §2.1: 2·rows·cols·packing/multiplier per cycle at the TensorE clock);
- **hbm**: the bytes no schedule avoids — every graph input (weights, buffers, activations) read
  once and every output written once — over one core's HBM bandwidth (its share of the stack,
  §1.1) or its DMA engines' aggregate bandwidth (§2.5), whichever is lower. An input only
  gathered from (an embedding table) counts the rows its gathers return; a constant that only
  matmuls read (a weight, prepared at compile time in the dtype auto-cast gives it:
  ``passes.prepare_constants``) counts its bytes in that dtype;
- **vector** / **scalar**: each elementwise or reduction node touches each of its elements at
  least once: transcendental functions (exp, tanh, GELU, ...) on ScalarE, the rest on VectorE,
  at each engine's streaming rate for fp32 (``peaks.elements_per_s``; no MIN_II, no
  performance mode: a lower bound).

Views, reshapes and getitem cost nothing. ``binding`` names the largest term.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.lowerings.pointwise import ACTIVATIONS
from hwsim.bridge.precision import Precision
from hwsim.bridge.registry import LOWERINGS
from hwsim.config import HardwareConfig
from hwsim.dtypes import dtype as hw_dtype
from hwsim.report import peaks

aten = torch.ops.aten

#: Ops whose elementwise work is a ScalarE activation function (``lowerings.pointwise``): the
#: activations of the same name, GELU, and abs.
SCALAR_OPS = frozenset(
    {*(getattr(aten, name).default for name in ACTIVATIONS), aten.gelu.default, aten.abs.default}
)
#: Families whose nodes move or name data without elementwise compute.
_FREE_FAMILIES = frozenset({"views"})


@dataclass(frozen=True)
class Floor:
    """The floor's terms (ns), their inputs, and which term binds."""

    tensor_ns: float
    hbm_ns: float
    vector_ns: float
    scalar_ns: float
    tensor_flops: int
    hbm_bytes: int
    vector_elements: int
    scalar_elements: int
    compute_dtype: str

    @property
    def floor_ns(self) -> float:
        return max(self.tensor_ns, self.hbm_ns, self.vector_ns, self.scalar_ns)

    @property
    def binding(self) -> str:
        terms = {
            "tensor": self.tensor_ns,
            "hbm": self.hbm_ns,
            "vector": self.vector_ns,
            "scalar": self.scalar_ns,
        }
        return max(terms, key=terms.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"floor_ns": self.floor_ns, "binding": self.binding}


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _bytes(value: Any) -> int:
    return sum(
        t.numel() * t.element_size()
        for t in pytree.tree_leaves(value)
        if isinstance(t, torch.Tensor)
    )


def _flops(node: fx.Node) -> int:
    target, out = node.target, _val(node)
    if target in (aten.mm.default, aten.addmm.default, aten.bmm.default):
        a = _val(node.args[1] if target is aten.addmm.default else node.args[0])
        return 2 * out.numel() * int(a.shape[-1])
    if target is aten.convolution.default:
        weight = _val(node.args[1])
        return 2 * out.numel() * math.prod(weight.shape[1:])  # Cin/groups * kh * kw per output
    return 0


def _elements(node: fx.Node) -> int:
    """Elements an elementwise or reduction node must touch: its largest operand or result."""
    sizes = [
        t.numel()
        for t in pytree.tree_leaves((_val(node), [_val(a) for a in node.all_input_nodes]))
        if isinstance(t, torch.Tensor)
    ]
    return max(sizes, default=0)


#: Ops that read only the rows their indices name of their first argument.
_GATHERS = frozenset({aten.embedding.default, aten.index_select.default})
#: Ops through which a weight reaches a matmul, and the matmuls that read it.
_TO_MATMUL = frozenset({aten.t.default, aten.permute.default, aten.transpose.int})
_MATMULS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default})


def _only_matmuls_read(node: fx.Node) -> bool:
    """Every use of ``node`` is a matmul operand, directly or through a transpose."""
    return all(
        user.target in _MATMULS or (user.target in _TO_MATMUL and _only_matmuls_read(user))
        for user in node.users
    )


def _input_bytes(node: fx.Node, precision: Precision, constants: frozenset[str]) -> int:
    """Bytes of graph input ``node`` that every schedule reads (module docstring)."""
    value = _val(node)
    full = _bytes(value)
    users = list(node.users)
    if users and all(u.target in _GATHERS and u.args[0] is node for u in users):
        return min(full, sum(_bytes(_val(u)) for u in users))
    own = value.dtype if isinstance(value, torch.Tensor) else None
    if node.name in constants and own == torch.float32 and _only_matmuls_read(node):
        return min(full, value.numel() * precision.matmul_dtype(hw_dtype("fp32")).itemsize)
    return full


def graph_floor(
    graph: fx.Graph,
    config: HardwareConfig,
    precision: Precision,
    constants: frozenset[str] = frozenset(),
) -> Floor:
    """The floor of ``graph`` (module docstring); TensorE's dtype is what auto-cast makes of
    the matmuls' inputs (``precision.matmul_dtype``), fp32 if there are none. ``constants``:
    the placeholders holding the model's frozen weights (``lower_graph(constants=)``)."""
    flops = vector = scalar = 0
    hbm = 0
    matmul_dtypes: list[str] = []
    for node in graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            if node.users:
                hbm += _input_bytes(node, precision, constants)
        elif node.op == "output":
            hbm += _bytes(
                [_val(n) for n in pytree.tree_leaves(node.args[0]) if isinstance(n, fx.Node)]
            )
        elif node.op == "call_function" and node.target is not operator.getitem:
            work = _flops(node)
            if work:
                flops += work
                dtype = _val(node.args[-1])
                if isinstance(dtype, torch.Tensor):
                    matmul_dtypes.append(str(dtype.dtype).removeprefix("torch."))
                continue
            target: Any = node.target
            lowering = LOWERINGS.get(target)
            if lowering is None or lowering.family in _FREE_FAMILIES:
                continue
            if node.target in SCALAR_OPS:
                scalar += _elements(node)
            else:
                vector += _elements(node)
    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    own = names.get(matmul_dtypes[0], "fp32") if matmul_dtypes else "fp32"
    dtype = precision.matmul_dtype(hw_dtype(own)).name
    hbm_rate = min(
        peaks.hbm_bandwidth_bytes_per_ns_per_core(config),
        peaks.dma_bandwidth_bytes_per_ns_per_core(config),
    )
    vector_rate = peaks.elements_per_s(config.vector_engine, "fp32") / 1e9
    scalar_rate = peaks.elements_per_s(config.scalar_engine, "fp32") / 1e9
    return Floor(
        tensor_ns=flops / peaks.peak_flops_per_s(config, dtype) * 1e9,
        hbm_ns=hbm / hbm_rate,
        vector_ns=vector / vector_rate,
        scalar_ns=scalar / scalar_rate,
        tensor_flops=flops,
        hbm_bytes=hbm,
        vector_elements=vector,
        scalar_elements=scalar,
        compute_dtype=dtype,
    )

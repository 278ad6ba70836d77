"""A graph node's identity on the instructions lowered for it: which op, which node, which members.

Every instruction the bridge emits carries, in its tag, the ``Origin`` (``hwsim.isa.origin``) of
the node it was lowered for: ``op`` (the ATen op's short name, ``addmm``; a fused group's kind,
``fused[add+gelu]``), ``node`` (the FX node's name; a fused group's members joined by ``+``) and
``members`` (a fused group's nodes). ``LoweringContext.node`` tags with it; the trace's Ops track,
the plots' colours and the report's per-op times (``bridge.op_times``) read it back as fields.
This module is the one place the bridge makes them.
"""

from __future__ import annotations

from typing import Any

from hwsim.isa.origin import Origin

#: The op of a node lowered without a call (a copy into a graph output's own bytes).
COPY_OP = "copy"


def node_identity(node: str, call: Any = None) -> Origin:
    """The identity of single node ``node`` lowered from ``call`` (an ``OpCall``; None: a copy)."""
    return Origin(op_label(call.op) if call is not None else COPY_OP, node)


def group_tag(kernel: Any) -> Origin:
    """The identity of a fused group's instructions: its kind and every source node
    (``fused[add+gelu]`` of ``add_3`` and ``gelu_1``: shown as ``fused[add+gelu]/add_3+gelu_1``)."""
    members = tuple(kernel.node_names)
    return Origin(kernel.__name__, "+".join(members), members)


def op_label(op: Any) -> str:
    """``aten.addmm.default`` -> ``addmm``; any other callable by its name."""
    name = getattr(op, "__name__", None) or str(op)
    return str(name).split(".")[0]

"""The norm_prologue pass: a layer norm (or RMS norm) in the prologue of the matmuls it feeds.

After ``reduction_fusion`` a transformer's norms are row passes (``RowKernel``) whose output
[tokens, hidden] (possibly viewed 2-D) is the left operand of the next matmuls: Q, K and V
projections, an MLP's up-projection(s). Apart, each matmul loads the rows back and transposes
them for TensorE. When at least one reader is a matmul of a weight prepared at compile time
(a plain ``mm``/``addmm``, a matmul group of ``fusion``, an ``mlp`` kernel), the norm becomes a
``NormPrologue`` node: its lowering transposes each normalised row tile into one xᵀ in SBUF
(``tiling.prologue``) that every such matmul reads in place. When those matmuls are all its
readers (a pre-norm transformer), the rows are never stored; when another node reads them (a
post-norm residual add) or they are a graph output, they are stored too. When xᵀ does not fit
its share of SBUF, the norm lowers as it would without the pass (the fusion notes say why).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim.bridge.passes.fused_kinds import group_tag, register_fused
from hwsim.bridge.passes.fused_nodes import graph_outputs
from hwsim.bridge.passes.fusion import RESHAPES, FusedKernel, Ref
from hwsim.bridge.passes.mlp_fusion import MlpKernel
from hwsim.bridge.passes.prepare_constants import PreparedWeight
from hwsim.bridge.passes.reduction_fusion import RowKernel, lower_row_kernel

aten = torch.ops.aten

_MATMULS = (aten.mm.default, aten.addmm.default)
_NORMS = ("layer_norm", "rms_norm")


class NormPrologue(RowKernel):
    """Target of a norm whose rows feed matmuls on chip: the norm's ``RowKernel`` (``row``:
    what lowers when the prologue cannot be), and whether the rows are stored too."""

    def __init__(self, row: RowKernel, store_rows: bool, readers: list[str]) -> None:
        super().__init__(row.members, row.kind, **row.params)
        self.row, self.store_rows, self.readers = row, store_rows, readers
        self.__name__ = f"fused[{row.kind}>xT]"


def _prepared(node: Any) -> bool:
    return isinstance(node, fx.Node) and isinstance(node.target, PreparedWeight)


def _dtype(node: Any) -> Any:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return getattr(val, "dtype", None)


def _plain_reader(node: fx.Node, x: fx.Node) -> bool:
    """``mm``/``addmm`` of x (its left operand only) and a prepared weight."""
    if node.target not in _MATMULS or len(node.args) < 2 or node.kwargs:
        return False
    a, b = node.args[-2], node.args[-1]
    others = [arg for arg in node.args[:-2] if arg is x]
    return a is x and not others and _prepared(b) and _dtype(node) == _dtype(x)


def _group_reader(node: fx.Node, x: fx.Node) -> bool:
    """A matmul group or MLP kernel whose every use of x is as the left operand of a member
    ``mm``/``addmm`` of a prepared weight."""
    kernel = node.target
    if type(kernel) not in (FusedKernel, MlpKernel):
        return False
    assert isinstance(kernel, FusedKernel)
    indices = {i for i, arg in enumerate(node.args) if arg is x}
    uses = 0
    for member in kernel.members:
        refs = pytree.tree_leaves(
            (member.args, member.kwargs), is_leaf=lambda r: isinstance(r, Ref)
        )
        mine = [r for r in refs if isinstance(r, Ref) and r.index in indices]
        if not mine:
            continue
        if member.target not in _MATMULS or len(mine) != 1 or member.kwargs:
            return False
        a, b = member.args[-2], member.args[-1]
        if not (isinstance(a, Ref) and a.index in indices and isinstance(b, Ref)):
            return False
        if not _prepared(node.args[b.index]) or getattr(member.val, "dtype", None) != _dtype(x):
            return False
        uses += 1
    return uses > 0


def _readers(norm: fx.Node) -> tuple[list[fx.Node], bool]:
    """(the matmul nodes that can read the norm's xᵀ, whether anything else reads its rows)."""
    k = norm.meta["val"].shape[-1]
    matmuls: list[fx.Node] = []
    others = False
    for user in norm.users:
        x, readers = norm, [user]
        if user.target in RESHAPES:
            shape = tuple(user.meta["val"].shape)
            if len(shape) != 2 or shape[1] != k:
                others = True
                continue
            x, readers = user, list(user.users)
        for reader in readers:
            if _plain_reader(reader, x) or _group_reader(reader, x):
                matmuls.append(reader)
            else:
                others = True
    return matmuls, others


def fuse_norm_prologues(gm: fx.GraphModule) -> dict[str, int]:
    """Make each norm whose rows a prepared-weight matmul reads a ``NormPrologue``."""
    outputs = graph_outputs(gm)
    fused = unstored = 0
    for node in gm.graph.nodes:
        kernel = node.target
        if type(kernel) is not RowKernel or kernel.kind not in _NORMS:
            continue
        if kernel.kind == "layer_norm" and kernel.params["normalized_dims"] != 1:
            continue
        matmuls, others = _readers(node)
        if not matmuls:
            continue
        views = [u for u in node.users if u.target in RESHAPES]
        store = others or node in outputs or any(v in outputs for v in views)
        node.target = NormPrologue(kernel, store, [m.name for m in matmuls])
        fused += 1
        unstored += not store
    return {"norm_prologues": fused, "rows_not_stored": unstored}


@register_fused(NormPrologue)
def lower_norm_prologue(ctx: Any, kernel: NormPrologue, outside: list[Any], escapes: bool) -> Any:
    """The norm with its rows transposed into xᵀ on chip (``tiling.prologue``), or the norm
    alone (its ``RowKernel``) when xᵀ does not fit its share of SBUF."""
    from hwsim.bridge.lowerings.norm import layer_norm, rms_norm
    from hwsim.bridge.passes.fused_lowering import _call, _meta
    from hwsim.bridge.tiling.prologue import PROLOGUE_SBUF_SHARE, TransposedRows, prologue_bytes
    from hwsim.library.common import TransposedLoader

    last = kernel.members[-1]
    meta = _meta(last.val)
    x = outside[0]
    k = int(x.shape[-1])
    m = x.numel // k
    compute = ctx.matmul_dtype(meta.dtype)
    need = prologue_bytes(m, k, ctx.limits.tile_k, compute)
    budget = int(ctx.limits.sbuf_bytes * PROLOGUE_SBUF_SHARE)
    why = None
    if need > budget:
        why = (
            f"xᵀ of {m} rows of {k} takes {need} bytes per partition, past the prologue's "
            f"{budget} (PROLOGUE_SBUF_SHARE of SBUF)"
        )
    elif ctx.split.cores > 1:
        # xᵀ would live in one core's SBUF while the matmuls that read it split their rows
        # between the cores of the logical core: the other core would read SBUF nothing wrote.
        why = f"the graph is lowered for {ctx.split.cores} cores (LNC); xᵀ stays on one core"
    if why is not None:
        ctx.fusion_notes.append({"group": kernel.node_names, "fused": False, "why": why})
        return lower_row_kernel(ctx, kernel.row, outside, escapes)
    store = kernel.store_rows or escapes
    loader = TransposedLoader(ctx.queues, mode="tensor")
    rows = TransposedRows(m, k, compute, store, loader)
    params = kernel.params
    with ctx.node(last.name, meta, _call(last), escapes=escapes, tag=group_tag(kernel)):
        if kernel.kind == "layer_norm":
            w, b = (outside[i] if i is not None else None for i in params["affine"])
            result, _ = layer_norm(ctx, x, 1, w, b, params["eps"], with_stats=False, taken=rows)
        else:
            weight = params["weight"]
            w = outside[weight] if weight is not None else None
            result = rms_norm(ctx, x, w, params["eps"], taken=rows)
    rows.value = result
    ctx.transposed[result.tile.name] = rows
    note = {"group": kernel.node_names, "fused": True, "row": kernel.kind, "prologue": True}
    ctx.fusion_notes.append(note | {"rows_stored": store})
    return result

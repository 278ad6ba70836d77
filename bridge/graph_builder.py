"""The kernel body of a lowered graph: its nodes lowered in order into one kernel-language
program (``lower_graph`` builds it once per physical core), and the graph's outputs bound."""

from __future__ import annotations

import inspect
import operator
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from hwsim import lang
from hwsim.bridge.auto_cast import compute_dtype, exact_origin
from hwsim.bridge.context import IndexCheck, LoweringContext, TensorMeta, TilingOptions
from hwsim.bridge.dtypes import to_hw
from hwsim.bridge.errors import BridgeError, Reason, Unsupported
from hwsim.bridge.graph_bindings import InputBinding, OutputBinding, is_dense
from hwsim.bridge.lnc import CoreLowering, LncPlan
from hwsim.bridge.memory_plan import HbmArena, Lifetimes
from hwsim.bridge.passes.fused_kinds import fused_lowering
from hwsim.bridge.passes.fusion import FusedKernel
from hwsim.bridge.passes.prepare_constants import PreparedWeight
from hwsim.bridge.precision import Precision
from hwsim.bridge.registry import OpCall, check_support
from hwsim.bridge.residency.broadcast import input_rows
from hwsim.bridge.tiling import copy_tiles
from hwsim.bridge.values import HbmValue, PreparedMatrix
from hwsim.dtypes import dtype as hw_dtype
from hwsim.errors import HwsimError


def node_meta(value: Any) -> Any:
    """TensorMeta of a tensor (or a tuple of them) from node metadata."""
    if isinstance(value, torch.Tensor):
        return TensorMeta(
            tuple(value.shape), to_hw(value.dtype), tuple(value.stride()), value.dtype
        )
    if isinstance(value, (tuple, list)):
        return tuple(node_meta(v) for v in value)
    return value


class GraphBuilder:
    """Holds what the kernel body needs and what it leaves behind (outputs, lowered nodes)."""

    def __init__(
        self,
        graph: fx.Graph,
        bindings: list[InputBinding],
        precision: Precision,
        options: TilingOptions | None,
        arena: HbmArena | None = None,
        *,
        residency: bool = False,
        broadcast_rows: bool = False,
        lnc: CoreLowering | None = None,
    ) -> None:
        self.graph = graph
        self.lnc = lnc
        self.arena = arena
        self.use_residency = residency
        self.broadcast_rows = broadcast_rows
        self.rows_broadcast = 0  # partition broadcasts done on chip (``residency.broadcast``)
        self.residency: dict[str, Any] = {}  # what residency did (``ResidencyStats``)
        self.bindings = bindings
        self.precision = precision
        self.options = options or TilingOptions()
        self.output_bindings: list[OutputBinding] = []
        self.out_spec: pytree.TreeSpec = pytree.tree_flatten(None)[1]
        self.lowered: dict[str, str] = {}
        self.index_checks: list[IndexCheck] = []
        self.collective_groups: list[Any] = []
        self.fusion_notes: list[dict[str, Any]] = []
        self.compute_dtypes: dict[str, str] = {}

    def kernel(self, name: str) -> lang.Kernel:
        """The kernel-language kernel whose parameters are the graph's inputs, by name."""

        def body(**tiles: Any) -> list[Any]:
            return self._body(tiles)

        parameters = [
            inspect.Parameter(b.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for b in self.bindings
        ]
        body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        body.__name__ = name
        return lang.kernel(body)

    def _body(self, tiles: dict[str, Any]) -> list[Any]:
        ctx = LoweringContext(
            self.precision,
            self.options,
            self.arena,
            residency=self.use_residency,
            broadcast_rows=self.broadcast_rows,
            weight_dtypes=[hw_dtype(b.prepared.dtype) for b in self.bindings if b.prepared],
            input_row_widths=input_rows(b.shape for b in self.bindings if not b.prepared),
        )
        self.index_checks = ctx.index_checks
        self.collective_groups = ctx.collective_groups
        lnc = self.lnc or CoreLowering(0, LncPlan(1, 0))
        ctx.split = lnc.split
        lnc.queues = ctx.queues
        self.fusion_notes = ctx.fusion_notes
        env: dict[fx.Node, Any] = {}
        inputs = ctx.input_names
        by_name = {b.name: b for b in self.bindings}
        lifetimes = Lifetimes(self.graph)
        for node in self.graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                b = by_name[node.name]
                env[node] = HbmValue(tiles[node.name], b.shape, b.strides, 0)
                inputs.add(tiles[node.name].name)
            elif isinstance(node.target, PreparedWeight):  # a weight prepared at compile time
                env[node] = self._prepared(tiles, node)
                inputs.add(env[node].tile.name)
            elif node.op == "call_function":
                if isinstance(node.target, FusedKernel):
                    ctx.needed_after = lifetimes.needed_after(node, env)
                args = [env[a] for a in node.all_input_nodes]
                with lnc.node(node, args, inputs):
                    env[node] = self._lower(ctx, node, env, lifetimes.escapes(node))
                ctx.needed_after = None
                ctx.release_all_but(lifetimes.live_tensors(node, env))
            elif node.op == "output":
                args = [env[a] for a in node.all_input_nodes]
                with lnc.node(node, args, inputs):  # the outputs' copies: on core 0
                    outputs = self._outputs(ctx, node, env, inputs)
                ctx.queues.finish()  # stores still deferred are emitted now
                if self.use_residency:
                    self.residency = ctx.queues.stats.to_dict()
                self.rows_broadcast = ctx.queues.rows_broadcast
                return outputs
            else:
                raise Unsupported(node.op, Reason.NO_LOWERING, f"{node.op} node {node.name}")
        raise BridgeError("graph has no output node")

    def _prepared(self, tiles: dict[str, Any], node: fx.Node) -> PreparedMatrix:
        binding = next(b for b in self.bindings if b.name == node.meta["prepared"])
        assert binding.prepared is not None
        return PreparedMatrix.over(tiles[binding.name], binding.prepared)

    def _lower(
        self, ctx: LoweringContext, node: fx.Node, env: dict[fx.Node, Any], escapes: bool
    ) -> Any:
        if node.target is operator.getitem:
            source, index = node.args
            return env[source][index]  # type: ignore[index]
        if isinstance(node.target, FusedKernel):  # a group of a fusion pass, lowered by its kind
            lower_group = fused_lowering(node.target)
            outside = [env[a] if isinstance(a, fx.Node) else a for a in node.args]
            ctx.casts_tensore = not any(exact_origin(m.origin) for m in node.target.members)
            try:
                fused = lower_group(ctx, node.target, outside, escapes)
            finally:
                ctx.casts_tensore = True
            _check_result(node, fused, node.meta.get("val"))
            for member in node.target.members:
                self.lowered[member.name] = str(member.target)
                self._note_dtype(member.name, member.target, member.val, member.origin)
            return fused
        meta = node.meta.get("val")
        args_meta, kwargs_meta = pytree.tree_map_only(
            fx.Node, lambda n: n.meta.get("val"), (node.args, node.kwargs)
        )
        call = OpCall(node.target, tuple(args_meta), dict(kwargs_meta), meta)
        lowering = check_support(call)
        args, kwargs = pytree.tree_map_only(fx.Node, lambda n: env[n], (node.args, node.kwargs))
        origin = node.meta.get("original_aten")
        ctx.casts_tensore = not exact_origin(origin)  # a one-hot/mask matmul keeps its dtype
        try:
            with ctx.node(node.name, node_meta(meta), call, escapes=escapes):
                result = lowering.fn(ctx, *args, **kwargs)
        except Unsupported:
            raise
        except (HwsimError, ValueError, IndexError, TypeError, KeyError) as error:
            raise Unsupported(
                node.target, Reason.LOWERING_FAILED, f"node {node.name}: {error}"
            ) from error
        finally:
            ctx.casts_tensore = True
        _check_result(node, result, meta)
        self.lowered[node.name] = str(node.target)
        self._note_dtype(node.name, node.target, meta, origin)
        return result

    def _note_dtype(self, name: str, target: Any, value: Any, origin: Any = None) -> None:
        dtype = compute_dtype(self.precision, target, value, origin)
        if dtype:
            self.compute_dtypes[name] = dtype

    def _outputs(
        self, ctx: LoweringContext, node: fx.Node, env: dict[fx.Node, Any], inputs: set[str]
    ) -> list[Any]:
        leaves, self.out_spec = pytree.tree_flatten(node.args[0])
        tiles: list[Any] = []
        used = set(inputs)
        for i, leaf in enumerate(leaves):
            value = env[leaf] if isinstance(leaf, fx.Node) else leaf
            if not isinstance(value, HbmValue):
                self.output_bindings.append(OutputBinding(None, constant=value))
                continue
            meta = leaf.meta["val"]
            if value.numel == 0:  # nothing to compute or read back (its tensor is a placeholder)
                empty = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype)
                self.output_bindings.append(OutputBinding(None, constant=empty))
                continue
            whole = value.is_contiguous() and value.offset == 0
            if not whole and _permuted_whole(value, tuple(meta.stride())):
                self._permuted_output(ctx, i, value, meta.dtype, used, tiles)
                continue
            if not whole or value.tile.name in used or value.numel != value.tile.shape[0]:
                with ctx.node(f"output{i}", None):
                    copy = ctx.new_value(value.shape, value.dtype)
                    copy_tiles(ctx, copy, value)
                value = copy
            used.add(value.tile.name)
            tiles.append(value.tile)
            self.output_bindings.append(
                OutputBinding(value.tile.name, value.shape, tuple(meta.stride()), meta.dtype)
            )
        return tiles

    def _permuted_output(
        self,
        ctx: LoweringContext,
        i: int,
        value: HbmValue,
        dtype: torch.dtype,
        used: set[str],
        tiles: list[Any],
    ) -> None:
        """A permuted view of a whole tensor leaves as its storage, viewed on the host with the
        view's strides: no transposing copy (4-byte descriptors, one per element). Its tensor is
        copied as it lies (whole-row descriptors) only when it is an input or already an output."""
        storage = HbmValue.contiguous(value.tile, (value.numel,))
        if value.tile.name in used:
            with ctx.node(f"output{i}", None):
                copy = ctx.new_value((value.numel,), value.dtype)
                copy_tiles(ctx, copy, storage)
            storage = copy
        used.add(storage.tile.name)
        tiles.append(storage.tile)
        self.output_bindings.append(
            OutputBinding(storage.tile.name, value.shape, value.strides, dtype, storage_order=True)
        )


def _permuted_whole(value: HbmValue, strides: tuple[int, ...]) -> bool:
    """Whether ``value`` is a permutation of a whole tensor (a transpose of a weight) that torch
    also strides that way: its bytes already lie in the output's storage order."""
    return (
        value.offset == 0
        and value.numel == value.tile.shape[0]
        and value.strides == strides
        and is_dense(value.shape, value.strides)
    )


def _check_result(node: fx.Node, result: Any, meta: Any) -> None:
    """A lowering must return torch's shapes (a mismatch is a bug in the lowering)."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    metas = meta if isinstance(meta, (tuple, list)) else (meta,)
    for got, want in zip(results, metas, strict=False):
        if (
            isinstance(got, HbmValue)
            and isinstance(want, torch.Tensor)
            and got.shape != tuple(want.shape)
        ):
            raise Unsupported(
                node.target,
                Reason.LOWERING_FAILED,
                f"node {node.name}: lowering returned shape {got.shape}, torch says "
                f"{tuple(want.shape)}",
            )

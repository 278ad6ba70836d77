"""Export for sweeps: a torch model lowered once into a saved program (``FILE.hwprog``).

    from hwsim.bridge.export import export_program
    export_program(model.eval(), (tokens,), "gpt2.hwprog", config="trn2")

then, with no torch: ``hwsim run gpt2.hwprog --config trn2 --set dma.bandwidth_bytes_per_ns=46``,
or ``gpt2.hwprog`` as a sweep workload. Steps:

1. ``torch.export.export(model, args, kwargs)``, then ``run_decompositions`` with PyTorch's
   default (Core ATen) table, with the bridge's corrections (``bridge.decompositions``);
2. the graph is checked whole: symbolic (dynamic or data-dependent) shapes, buffer mutations and
   every op the bridge cannot lower are refused, all named at once (``Unsupported``): a saved
   program has no CPU to fall back to;
3. ``lower_graph`` on ``config``; the program's HBM inputs are filled with the parameters,
   buffers, constants and example inputs, in placeholder order (the graph signature's);
4. ``program.meta`` records where it came from, what it was lowered for
   (``hwsim.workloads.saved.lowered_for``: the geometry a later config must share), the
   precision, and the model's own CPU outputs with their tolerances, so ``hwsim run`` checks
   numerics with no torch;
5. with ``check`` it is simulated once on ``config`` and checked as ``hwsim run`` would, then
   saved with ``hwsim.workloads.saved.save_program``: data only (JSON and ``.npy`` arrays in a
   hashed, versioned zip; docs/export.md), so the file can be shared and loading it runs no code.
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from hwsim.bridge.auto_cast import reference_casts
from hwsim.bridge.decompositions import decomposition_table
from hwsim.bridge.dtypes import tensor_to_numpy
from hwsim.bridge.errors import BridgeError, Reason, Unsupported
from hwsim.bridge.graph_lowering import LoweredGraph, lower_graph
from hwsim.bridge.partition import analyze
from hwsim.bridge.precision import Precision
from hwsim.config import HardwareConfig, load_config
from hwsim.program import Program
from hwsim.units import time_text
from hwsim.workloads.saved import (
    EXPECTED_OUTPUTS,
    LOWERED_FOR,
    check_outputs,
    lowered_for,
    save_program,
)

aten = torch.ops.aten

#: Nodes that only assert what export already knows of the example inputs (dtype, device,
#: ranges); they produce nothing the program needs.
_ASSERTIONS = frozenset(
    {
        aten._assert_tensor_metadata.default,
        aten._assert_scalar.default,
        aten._assert_async.default,
        aten._assert_async.msg,
        aten.sym_constrain_range.default,
        aten.sym_constrain_range_for_size.default,
    }
)


@dataclass
class ExportResult:
    """What ``export_program`` saved: the file, the program, and the one check run (if any)."""

    path: Path
    program: Program
    lowered: LoweredGraph
    ops: dict[str, int]  # ATen op -> nodes lowered
    check: dict[str, Any] = field(default_factory=dict)  # total_ns, max_abs_err, numerics_ok

    @property
    def instructions(self) -> int:
        return self.program.instruction_count

    @property
    def hbm_bytes(self) -> int:
        """HBM the program occupies: tensors of their own plus a planned scratch arena, if any
        (tensors placed in it share bytes)."""
        own = sum(
            d.nbytes for d in self.program.hbm.values() if getattr(d, "address_bytes", None) is None
        )
        return own + getattr(self.program, "scratch_arena_bytes", 0)

    @property
    def input_bytes(self) -> int:
        """Bytes of HBM inputs: weights, buffers, constants and the example inputs."""
        return sum(d.nbytes for d in self.program.hbm.values() if d.kind == "input")

    def describe(self) -> str:
        """A few lines saying what was saved."""
        facts = self.program.meta[LOWERED_FOR]
        by_count = sorted(self.ops.items(), key=lambda item: (-item[1], item[0]))
        lines = [
            f"saved {self.path}",
            f"  model {self.program.meta['source']['model']}, lowered for {facts['config']} "
            f"(auto-cast {_auto_cast_label(self.program.meta.get('precision', {}))})",
            f"  {self.instructions} instructions, HBM {_mib(self.hbm_bytes)} "
            f"(inputs {_mib(self.input_bytes)}: weights, buffers and example inputs)",
            *_wrap(
                f"  {sum(self.ops.values())} ops lowered:",
                [f"{op.removeprefix('aten.')} x{n}" for op, n in by_count],
            ),
        ]
        if self.check:
            verdict = "OK" if self.check["numerics_ok"] else "MISMATCH"
            lines.append(
                f"  checked on {facts['config']}: {time_text(self.check['total_ns'])}, "
                f"numerics {verdict} (max abs error {self.check['max_abs_err']:.3g})"
            )
        return "\n".join(lines)


def export_program(
    model: torch.nn.Module,
    args: Sequence[Any],
    path: str | Path,
    *,
    kwargs: dict[str, Any] | None = None,
    config: str | HardwareConfig = "trn2",
    auto_cast: str | None = None,
    auto_cast_type: str | None = None,
    name: str | None = None,
    check: bool = True,
    passes: Any = None,
) -> ExportResult:
    """Export ``model(*args, **kwargs)``, lower it for ``config`` and save it at ``path``
    (``.hwprog``). Shapes are those of the example inputs (static); the example inputs' values
    are saved as the program's inputs. ``check`` simulates it once and refuses to save a program
    whose outputs miss the model's CPU outputs. ``auto_cast``/``auto_cast_type``: as the
    options of ``torch.compile`` (``bridge.precision``; default neuronx-cc's matmult/bf16)."""
    hw = load_config(config) if isinstance(config, str) else config
    precision = Precision.of(auto_cast, auto_cast_type)
    made = lower_model(
        model, args, kwargs=kwargs, config=hw, precision=precision, name=name, passes=passes
    )
    program = made.program
    program.meta[LOWERED_FOR] = lowered_for(program, hw)
    program.meta[EXPECTED_OUTPUTS] = made.expected
    checked = _check(program, hw, made.expected) if check else {}
    saved = save_program(program, path)
    return ExportResult(saved, program, made.lowered, made.ops, checked)


@dataclass
class LoweredModel:
    """A model lowered for one config: the program (its inputs bound to copies of the
    parameters and example inputs), the lowering, ATen op -> nodes lowered, and the model's CPU
    outputs by output HBM tensor (values and tolerance, as ``check_outputs`` takes them)."""

    program: Program
    lowered: LoweredGraph
    ops: dict[str, int]
    expected: dict[str, dict[str, Any]]


def lower_model(
    model: torch.nn.Module,
    args: Sequence[Any],
    *,
    kwargs: dict[str, Any] | None = None,
    config: HardwareConfig,
    precision: Precision | None = None,
    name: str | None = None,
    passes: Any = None,
) -> LoweredModel:
    """Steps 1-3 of the module docstring and the model's CPU outputs: ``model(*args, **kwargs)``
    as one program for ``config``, refused whole if any part of it cannot run there."""
    args, kwargs = tuple(args), dict(kwargs or {})
    chosen = precision or Precision.of()
    model_name = type(model).__name__
    exported = _export(model, args, kwargs)
    graph_module = exported.graph_module
    examples = _placeholder_values(exported, args, kwargs)
    examples = _drop_unused_inputs(graph_module.graph, examples)
    _refuse_what_cannot_be_saved(exported, graph_module.graph, model_name)
    lowered = lower_graph(
        graph_module,
        examples,
        config=config,
        precision=chosen,
        name=name or model_name,
        passes=passes,  # the pipeline torch.compile runs (bridge.passes): all by default
        constants=state_placeholders(exported),  # prepared once, saved prepared
    )
    lowered.bind(examples, copy=True)  # the program holds copies, not the model's parameters
    program = lowered.program
    with torch.no_grad(), reference_casts(chosen) as casts:  # auto-cast's rounding on the CPU
        expected = _expected_outputs(lowered, model(*args, **kwargs), chosen, casts)
    ops = dict(sorted(collections.Counter(lowered.nodes.values()).items()))
    program.meta.update(
        workload=name or model_name,
        source={
            "model": model_name,
            "torch": torch.__version__,
            "inputs": [f"{list(t.shape)} {t.dtype}" for t in _user_tensors(args, kwargs)],
        },
        precision=chosen.to_dict(),
        ops=ops,
        passes=lowered.pipeline,
    )
    return LoweredModel(program, lowered, ops, expected)


def _auto_cast_label(meta: dict[str, Any]) -> str:
    """'matmult/bf16' from a saved program's precision entry (a program saved before auto-cast
    has ``compute`` instead: its label is that)."""
    if "auto_cast" in meta:
        return str(Precision(**meta).label())
    return str(meta.get("compute", "?"))


# ---- torch.export ------------------------------------------------------------------------------


def _export(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        exported = torch.export.export(model, args, kwargs)
    except Exception as exc:  # torch raises many kinds; the cause stays chained for --debug
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise BridgeError(
            f"torch.export could not trace {type(model).__name__}: {type(exc).__name__}: {first}"
        ) from exc
    with warnings.catch_warnings():  # torch's own deprecation noise while it copies the program
        warnings.filterwarnings("ignore", r".*LeafSpec.* is deprecated", FutureWarning)
        return exported.run_decompositions(_decompositions())


def _decompositions() -> Any:
    """torch.export's default (Core ATen) table with the bridge's corrections
    (``bridge.decompositions``: SDPA's CPU op keeps its log-sum-exp and the traced layout)."""
    table = torch.export.default_decompositions()
    table.update(decomposition_table())
    return table


def _placeholder_values(
    exported: ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[Any]:
    """Each placeholder's value, in the graph signature's order: parameters, buffers and lifted
    constants from the program, then the user inputs flattened as export did."""
    in_spec = exported.call_spec.in_spec
    keys = in_spec.children()[1].context if in_spec is not None else list(kwargs)
    leaves, spec = pytree.tree_flatten((args, {k: kwargs[k] for k in keys}))
    if in_spec is not None and spec != in_spec:
        raise BridgeError(f"example inputs flatten to {spec}, export traced {in_spec}")
    user = iter(leaves)
    values: list[Any] = []
    for spec_ in exported.graph_signature.input_specs:
        target = spec_.target or ""
        if spec_.kind is InputKind.USER_INPUT:
            values.append(next(user))
        elif spec_.kind is InputKind.PARAMETER or (
            spec_.kind is InputKind.BUFFER and spec_.persistent
        ):
            values.append(exported.state_dict[target])
        elif spec_.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            values.append(exported.constants[target])
        else:
            raise Unsupported(
                "placeholder",
                Reason.SHAPE,
                f"input {spec_.arg.name} is a {spec_.kind.name.lower()}; saved programs hold "
                "tensors only",
            )
    return values


def state_placeholders(exported: ExportedProgram) -> frozenset[str]:
    """Names of the placeholders holding the model's parameters, buffers and constants: what
    the compiler may prepare at compile time (``passes.prepare_constants``)."""
    state = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    return frozenset(s.arg.name for s in exported.graph_signature.input_specs if s.kind in state)


def _drop_unused_inputs(graph: fx.Graph, examples: list[Any]) -> list[Any]:
    """Remove assertion nodes, then non-tensor inputs export specialised on (``use_cache=False``):
    the graph no longer reads them. Edits the freshly decomposed graph in place."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _ASSERTIONS and not node.users:
            graph.erase_node(node)
    kept = []
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, examples, strict=True):
        if isinstance(value, torch.Tensor):
            kept.append(value)
        elif node.users:
            raise Unsupported(
                "placeholder",
                Reason.SHAPE,
                f"input {node.name} is a {type(value).__name__} the graph computes with; "
                "saved programs take tensor inputs only",
            )
        else:
            graph.erase_node(node)
    return kept


# ---- what a saved program cannot hold ----------------------------------------------------------


def _refuse_what_cannot_be_saved(exported: ExportedProgram, graph: fx.Graph, model: str) -> None:
    for node in graph.nodes:
        symbolic = _symbolic_shape(node.meta.get("val"))
        if symbolic is not None:
            raise Unsupported(
                node.target if node.op == "call_function" else node.op,
                Reason.DATA_DEPENDENCE,
                f"node {node.name} of {model} has symbolic shape {symbolic}: a saved program has "
                "the static shapes of the example inputs; export once per shape, and keep "
                "value-dependent shapes (nonzero, masked indexing) out of the model",
            )
    mutated = [
        s.target
        for s in exported.graph_signature.output_specs
        if s.kind is not OutputKind.USER_OUTPUT
    ]
    if mutated:
        raise Unsupported(
            "output",
            Reason.MUTATION,
            f"{model} updates {', '.join(str(m) for m in mutated)} in its forward pass; a saved "
            "program computes outputs only (put the model in eval() mode, without caches)",
        )
    refused = [v for v in analyze(graph).values() if not v.supported and v.op != "getitem"]
    if refused:
        first = refused[0].unsupported
        assert first is not None
        by_op: dict[str, list[Any]] = collections.defaultdict(list)
        for verdict in refused:
            by_op[verdict.op].append(verdict)
        named = "; ".join(
            f"{op} x{len(found)} ({found[0].unsupported.reason.value}: "
            f"{found[0].unsupported.detail}; e.g. node {found[0].node})"
            for op, found in by_op.items()
        )
        raise Unsupported(
            first.op,
            first.reason,
            f"{model} has {len(refused)} node(s) the simulator cannot run, and a saved program "
            f"has no CPU fallback: {named}",
        )


def _symbolic_shape(value: Any) -> tuple[Any, ...] | None:
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and any(
            not isinstance(n, int) for n in (*leaf.shape, *leaf.stride())
        ):
            return tuple(leaf.shape)
        if isinstance(leaf, torch.SymInt):
            return (leaf,)
    return None


# ---- inputs, expected outputs, the check -------------------------------------------------------


def _expected_outputs(
    lowered: LoweredGraph, outputs: Any, precision: Precision, casts: reference_casts
) -> dict[str, dict[str, Any]]:
    """The model's CPU outputs (with the run's auto-cast rounding) by output HBM tensor: flat
    values in the device representation and the tolerance of the dtype the run computes them
    in."""
    leaves = pytree.tree_leaves(outputs)
    if len(leaves) != len(lowered.outputs):
        raise BridgeError(
            f"the model returned {len(leaves)} values but the exported graph has "
            f"{len(lowered.outputs)} outputs"
        )
    expected = {}
    for binding, leaf in zip(lowered.outputs, leaves, strict=True):
        if binding.name is None:
            continue
        if not isinstance(leaf, torch.Tensor) or tuple(leaf.shape) != binding.shape:
            raise BridgeError(
                f"output {binding.name}: the model returned {type(leaf).__name__} "
                f"{tuple(getattr(leaf, 'shape', ()))}, the graph {binding.shape}"
            )
        tolerance = precision.tolerance(leaf.dtype, cast=casts.cast_through(leaf))
        expected[binding.name] = {
            "values": np.array(tensor_to_numpy(leaf.reshape(-1), binding.name), copy=True),
            "shape": binding.shape,
            "dtype": str(leaf.dtype).removeprefix("torch."),
            "rtol": tolerance.rtol,
            "atol": tolerance.atol,
        }
    return expected


def _check(
    program: Program, config: HardwareConfig, expected: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Simulate once on ``config`` and compare as ``hwsim run`` will."""
    from hwsim.kernels import warm_up
    from hwsim.machine.simulator import run

    warm_up()
    result = run(program, config)
    verdict = check_outputs(expected, result.outputs)
    checked = {
        "total_ns": result.summary.total_ns,
        "max_abs_err": verdict.max_abs_err,
        "numerics_ok": verdict.ok,
        "numerics_tolerance": verdict.tolerance,
    }
    if not verdict.ok:
        raise BridgeError(
            f"the lowered program's outputs differ from the model's on the CPU (max abs error "
            f"{verdict.max_abs_err:.3g}, tolerance {verdict.tolerance:.3g}, on "
            f"{config.chip.name}); not saved: pass check=False to save it anyway"
        )
    program.meta["export_check"] = {"config": config.chip.name, **checked}
    return checked


def _user_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]


def _wrap(head: str, items: list[str], width: int = 100) -> list[str]:
    """``head`` then ``items`` comma-separated, in lines of at most ``width`` (items unbroken)."""
    lines, line = [], head
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        if len(line) + 1 + len(text) > width and line.strip():
            lines.append(line)
            line = "   "
        line += " " + text
    return [*lines, line]


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"

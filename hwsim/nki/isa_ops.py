"""How an ``nki.isa`` call becomes a kernel-language call, in either API generation.

Newer calls name the destination (``nisa.tensor_tensor(dst=t, data1=a, data2=b, op=nl.add)``);
older ones return a new tile (``t = nisa.tensor_tensor(a, b, op=nl.add)``). A call is the newer
kind when it passes ``dst`` or as many arguments as the newer form requires. Arguments keep
NKI's names; operators may be ``nl.add``, ``np.add``, an ``AluOp`` or a name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

import numpy as np

from hwsim.engines import sequencer_engines
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang.tiles import psum, sbuf
from hwsim.nki import pending as pd
from hwsim.nki import tensor as nt
from hwsim.nki.state import state

E = TypeVar("E", bound=Enum)

_NUMPY = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.maximum: "max", np.minimum: "min", np.power: "power", np.equal: "is_equal",
    np.not_equal: "not_equal", np.greater: "is_gt", np.greater_equal: "is_ge",
    np.less: "is_lt", np.less_equal: "is_le", np.logical_and: "logical_and",
    np.logical_or: "logical_or", np.logical_xor: "logical_xor", np.bitwise_and: "bitwise_and",
    np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor", np.exp: "exp", np.log: "log",
    np.tanh: "tanh", np.sqrt: "sqrt", np.abs: "abs", np.sign: "sign", np.sin: "sin",
    np.cos: "cos", np.square: "square", np.max: "max", np.min: "min", np.sum: "add",
    np.prod: "multiply", np.mod: "mod", np.arctan: "arctan", np.reciprocal: "reciprocal",
}  # fmt: skip
#: nl operator names whose AluOp / ReduceOp name differs.
_ALU_NAMES = {
    "maximum": "max", "minimum": "min", "equal": "is_equal", "greater": "is_gt",
    "greater_equal": "is_ge", "less": "is_lt", "less_equal": "is_le",
    "left_shift": "logical_shift_left", "right_shift": "logical_shift_right", "sum": "add",
    "prod": "multiply", "copy": "bypass", "bypass": "bypass",
    # nl.abs as an ALU op (tensor_scalar(op0=nl.abs, operand0=0.0)): max(|x|, |0|) = |x|
    "abs": "abs_max",
}  # fmt: skip


def _op_name(op: Any) -> str:
    if isinstance(op, (AluOp, ActivationFunction, ReduceOp)):
        return op.name
    if op in _NUMPY:
        return _NUMPY[op]
    name = getattr(op, "name", None) or getattr(op, "__name__", None) or op
    return str(name)


def _member(kind: type[E], name: str, op: Any, call: str, what: str) -> E:
    """``kind``'s member called ``name`` (``op`` as the kernel wrote it), or an error at
    ``call`` that lists the valid names."""
    try:
        return kind[name]
    except KeyError:
        valid = ", ".join(m.name for m in kind)
        raise nt.fail(call, f"op={op!r} is not {what}; valid: {valid}") from None


def alu_op(op: Any, call: str) -> AluOp:
    name = _op_name(op)
    return _member(AluOp, _ALU_NAMES.get(name, name), op, call, "an ALU operator")


def act_op(op: Any, call: str) -> ActivationFunction:
    name = {"bypass": "copy", "identity": "copy", "reciprocal": "reciprocal"}.get(
        _op_name(op), _op_name(op)
    )
    return _member(ActivationFunction, name, op, call, "an activation function")


def reduce_op(op: Any, call: str) -> ReduceOp:
    name = _op_name(op)
    return _member(ReduceOp, _ALU_NAMES.get(name, name), op, call, "a reduction")


#: Parameters whose value is an operator, and its kind.
_OP_PARAMS = {"op": alu_op, "op0": alu_op, "op1": alu_op, "cmp_op": alu_op}
#: Arguments accepted everywhere and applied by this layer, or without effect here.
_DROPPED = ("name",)


def _engine(value: Any) -> str | None:
    if value is None:
        return None
    text = str(getattr(value, "name", value)).replace("_engine", "").replace("engine.", "")
    if text != "unknown" and text not in sequencer_engines():
        raise nt.fail("engine=", f"{value!r}; valid: nisa.vector_engine, scalar_engine, ...")
    return None if text == "unknown" else text


def convert(name: str, fn: Callable[..., Any], args: tuple, kwargs: dict, mask: Any) -> tuple:
    """Bind ``args``/``kwargs`` to the kernel-language ``fn`` with tensors as views and
    operators as enums; an unknown argument is one clear error naming the call."""
    call = f"nisa.{name}"
    for key in _DROPPED:
        kwargs.pop(key, None)
    if "engine" in kwargs:
        engine = _engine(kwargs.pop("engine"))
        if engine is not None:
            kwargs["engine"] = engine
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        params = ", ".join(sig.parameters)
        raise nt.fail(call, f"{exc}; this simulator's {name} takes ({params})") from None
    out = {}
    special = {"activation", "activation_reduce", "activate2", "tensor_reduce"}
    special |= {"tensor_partition_reduce"}
    for key, value in bound.arguments.items():
        if key in _OP_PARAMS and value is not None and not (key == "op" and name in special):
            value = _OP_PARAMS[key](value, call)
        out[key] = _operand(value, mask)
    if name in ("activation", "activation_reduce") and "op" in bound.arguments:
        out["op"] = act_op(bound.arguments["op"], call)
    if name in ("tensor_reduce", "tensor_partition_reduce") and "op" in bound.arguments:
        out["op"] = reduce_op(bound.arguments["op"], call)
    if "reduce_op" in out and name in ("tensor_scalar_reduce",):
        out["reduce_op"] = reduce_op(bound.arguments["reduce_op"], call)
    if name == "tensor_tensor":
        _broadcast_operands(out, ("data1", "data2"))
    return (), out


def _broadcast_operands(out: dict[str, Any], names: tuple[str, ...]) -> None:
    """Operands whose free dimensions of size 1 repeat to the others' (a [P, 1] column against
    a [P, N] tile): a stride-0 read, as the access pattern of a VectorE operand allows."""
    from hwsim.nki.pattern import broadcast

    shapes = [tuple(out[n].shape) for n in names if hasattr(out.get(n), "shape")]
    if len(shapes) != len(names) or len(set(shapes)) == 1 or len({len(s) for s in shapes}) != 1:
        return
    wide = tuple(max(dims) for dims in zip(*shapes, strict=True))
    for n in names:
        view = out[n]
        if tuple(view.shape) != wide and all(
            a in (b, 1) for a, b in zip(view.shape, wide, strict=True)
        ):
            out[n] = broadcast(view, (), wide)


def _operand(value: Any, mask: Any) -> Any:
    if isinstance(value, (nt.NkiTensor, pd.Pending)):
        return nt.src(value, mask)
    if isinstance(value, (list, tuple)) and any(isinstance(v, nt.NkiTensor) for v in value):
        return type(value)(_operand(v, mask) for v in value)
    return value


# ---- result shapes of the older, tile-returning form -------------------------------------------
def result_shape(name: str, inputs: dict[str, Any]) -> tuple[tuple[int, ...], Any, Any]:
    """(shape, default dtype, buffer) of the tile an older-style call returns."""
    data = next(
        (inputs[k] for k in ("data", "data1", "data0", "src", "on_true_tile") if k in inputs),
        None,
    )
    shape = tuple(data.shape) if data is not None else ()
    dtype = getattr(data, "dtype", "fp32")
    if name == "nc_transpose":
        engine = _engine(inputs.get("engine")) or "tensor"
        return (shape[1], shape[0]), dtype, psum if engine == "tensor" else sbuf
    if name == "tensor_reduce":
        axes = inputs.get("axis", inputs.get("axes", 1))
        count = len(axes) if isinstance(axes, (tuple, list)) else 1
        keep = inputs.get("keepdims", False)
        kept = shape[: len(shape) - count]
        return ((*kept, *([1] * count)) if keep else (*kept, 1)), dtype, sbuf
    if name == "tensor_partition_reduce":
        return (1, *shape[1:]), dtype, sbuf
    if name == "bn_stats":
        from hwsim import kernels

        return (shape[0], kernels.BN_STATS_WIDTH), "fp32", sbuf
    if name == "bn_aggr":
        return (shape[0], 2), "fp32", sbuf
    if name == "max8":
        return (shape[0], 8), dtype, sbuf
    return shape, dtype, sbuf


def lang_fn(name: str) -> Callable[..., Any]:
    from hwsim.lang import isa as lisa

    return getattr(lisa, name)


def call(name: str, new_required: tuple[str, ...], args: tuple, kwargs: dict) -> Any:
    """One nki.isa call of either generation (module docstring)."""
    mask = kwargs.pop("mask", None)
    dtype = kwargs.pop("dtype", None)
    given = len(args) + sum(1 for k in kwargs if k in new_required)
    newer = "dst" in kwargs or given >= len(new_required)
    fn = lang_fn(name)
    if newer:
        if dtype is not None:
            state().note(f"nisa.{name}(dtype=...): the newer form takes the dtype of dst")
        _, bound = convert(name, fn, args, kwargs, mask)
        if "dst" in bound:
            target = kwargs.get("dst", args[0] if args else None)
            bound["dst"] = nt.dst(target, mask)
        return fn(**bound)
    names = [p for p in inspect.signature(fn).parameters if p != "dst"]
    inputs = dict(zip(names, args, strict=False)) | kwargs
    shape, default_dtype, buffer = result_shape(name, inputs)
    for key in ("axis", "keepdims"):
        inputs.pop(key, None)
    out = nt.allocate(shape, (default_dtype if dtype is None else dtype), buffer)
    _, bound = convert(name, fn, (), {**inputs, "dst": out}, mask)
    fn(**bound)
    out.written_mask = mask  # only the masked part is written: an assignment copies that
    return out

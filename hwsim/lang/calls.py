"""Kernel-language ISA calls derived from the instructions: ``isa_call("tensor_tensor", doc)`` is
``tensor_tensor(dst, data1, data2, op, *, engine='vector')``, made from the registered class's
fields.

A call's parameters are the instruction's fields under their ``nki.isa`` names (field metadata,
``hwsim.isa.operands``), in ``nki.isa``'s order: the class's ``NKI_ARGS`` when it differs from the
default (fields without a default first, in field order; then, keyword-only, those with one).
``engine`` is a parameter when the instruction may run on several engines (default: the first of
``ENGINES``, or ``engine=NAME`` in ``NKI_ARGS``). Each argument is converted by its field's type:
tiles and views as they are (``emit`` makes them access patterns), scalar operands by
``scalar_operand``, ops by their enum (None: the field's default), numbers and flags by their
type. The call is generated once as plain Python (as ``@dataclass`` makes its methods), so it
costs what a hand-written one does; it is compiled under this file's name, which the kernel
language's source locations skip like its own frames.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hwsim.isa.base import ISA, Instruction
from hwsim.isa.engine_state import ReduceCmd
from hwsim.isa.operands import nki_name
from hwsim.isa.tensor_ops import MatmulPerfMode
from hwsim.kernels.ops import ActivationFunction, AluOp, ReduceOp
from hwsim.lang.emit import emit, enum_arg, scalar_operand

#: Fields every instruction has that no call names (``emit`` sets the engine and the tag).
_NOT_ARGUMENTS = frozenset({"engine", "waits", "signals", "tag", "name"})
#: Ops converted by their enum's constructor; kinds converted by ``enum_arg`` (a one-line error
#: listing the valid values).
_OPS: dict[str, type] = {
    "AluOp": AluOp,
    "ReduceOp": ReduceOp,
    "ActivationFunction": ActivationFunction,
}
_KINDS: dict[str, type] = {"ReduceCmd": ReduceCmd, "MatmulPerfMode": MatmulPerfMode}
_PLAIN: dict[str, type] = {"float": float, "int": int, "bool": bool, "tuple[int, ...]": tuple}


def isa_call(opcode: str, doc: str) -> Callable[..., Instruction]:
    """The kernel-language call of the instruction registered as ``opcode`` (see the module
    docstring), documented by ``doc``."""
    cls = ISA[opcode]
    fields = {nki_name(f): f for f in dataclasses.fields(cls) if f.name not in _NOT_ARGUMENTS}
    names, keyword_only, engine = _arguments(cls, fields)
    namespace: dict[str, Any] = {"emit": emit}
    params, passed = [], []
    for position, name in enumerate(names):
        if position == keyword_only:
            params.append("*")
        if name == "engine":
            namespace["default_engine"] = engine
            params.append("engine=default_engine")
            continue
        f = fields[name]
        if f.default is not dataclasses.MISSING:
            namespace[f"default_{name}"] = f.default
            params.append(f"{name}=default_{name}")
        else:
            params.append(name)
        convert = _converter(f, cls.OPCODE, name)
        if convert is None:
            passed.append(f"{f.name}={name}")
        else:
            namespace[f"convert_{name}"] = convert
            passed.append(f"{f.name}=convert_{name}({name})")
    engine_argument = "engine" if "engine" in names else repr(engine)
    source = (
        f"def {cls.OPCODE}({', '.join(params)}):\n"
        f"    return emit({cls.OPCODE!r}, {engine_argument}, {', '.join(passed)})\n"
    )
    exec(compile(source, __file__, "exec"), namespace)
    call: Callable[..., Instruction] = namespace[cls.OPCODE]
    call.__doc__ = doc
    call.__module__ = "hwsim.lang.isa"
    call.__qualname__ = cls.OPCODE
    return call


def _arguments(
    cls: type[Instruction], fields: dict[str, dataclasses.Field[Any]]
) -> tuple[list[str], int, str]:
    """(parameter names in order, the position keyword-only ones start at (or past the end),
    the default engine)."""
    engine = cls.ENGINES[0]
    names: list[str]
    if cls.NKI_ARGS:
        names = []
        keyword_only = -1
        for item in (part.strip() for part in cls.NKI_ARGS.split(",")):
            if item == "*":
                keyword_only = len(names)
                continue
            name, _, default = item.partition("=")
            if name == "engine" and default:
                engine = default
            names.append(name)
        unknown = [n for n in names if n != "engine" and n not in fields]
        if unknown:
            raise TypeError(f"{cls.__name__}.NKI_ARGS names no field {', '.join(unknown)}")
    else:
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        optional = [n for n, f in fields.items() if f.default is not dataclasses.MISSING]
        names, keyword_only = [*required, *optional], len(required)
    if len(cls.ENGINES) > 1 and "engine" not in names:
        keyword_only = len(names) if keyword_only < 0 else keyword_only
        names.append("engine")
    return names, keyword_only if keyword_only >= 0 else len(names), engine


def _converter(f: dataclasses.Field[Any], call: str, name: str) -> Callable[[Any], Any] | None:
    """How an argument becomes the field's value, by the field's type (None: as it is)."""
    kind = str(f.type)
    optional = kind.endswith(" | None")
    kind = kind.removesuffix(" | None")
    convert: Callable[[Any], Any] | None
    if kind == "AccessPattern":
        return None
    if kind == "Scalar":
        convert = scalar_operand
    elif kind in _OPS:
        op = _OPS[kind]
        default = f.default
        if default is dataclasses.MISSING:
            return op
        return lambda value: default if value is None else op(value)
    elif kind in _KINDS:
        enum = _KINDS[kind]
        return lambda value: enum_arg(enum, value, call, name)
    elif kind in _PLAIN:
        convert = _PLAIN[kind]
    else:
        raise TypeError(f"{call}: no kernel-language conversion for field {f.name}: {f.type}")
    if optional:
        plain = convert
        return lambda value: None if value is None else plain(value)
    return convert

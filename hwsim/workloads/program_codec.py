"""A ``Program`` as a JSON document plus arrays, and back, every field checked on the way in.

The document (``program.json`` of a ``.hwprog``, see ``program_archive``)::

    {"hbm": [{"name", "shape", "dtype", "kind", "values", "address_bytes"}, ...],
     "cores": [{"streams": {ENGINE: [INSTRUCTION, ...], ...}}, ...],
     "allocations": [{"core", "memory", "name", "start_partition", ...}, ...],
     "meta": {...},
     "origins": [{"tag": TEXT, "origin": {"op", "node", "members"}}, ...]}

An instruction is ``{"opcode": OPCODE, FIELD: VALUE, ...}`` with every dataclass field of the
class registered in ``hwsim.isa.base.ISA`` under OPCODE, each written by ``typed_json`` from its
declared type: access patterns as objects of their plain fields, enums (``AluOp``,
``ActivationFunction``, ``ReduceOp``, ``MemorySpace``) and dtypes by name. Nothing is written per
instruction class: a new instruction is saved as soon as it is registered, and one whose fields
``typed_json`` cannot express is refused when first saved, naming the class and the field.
Array values (HBM initial values, arrays in ``meta``) are ``.npy`` entries referenced by name.
An instruction's tag is written as its text; ``origins`` lists, once per tag text, the graph node
a tag stands for (``hwsim.isa.origin``: a bridge program's), so a loaded program's trace and
report attribute its instructions as the program built in memory would. A format 2 document has
no ``origins`` (its tags load as plain text).

``meta`` is JSON with three tagged forms for what JSON lacks: ``{"$tuple": [...]}``,
``{"$array": REFERENCE}`` and ``{"$float": "Infinity" | "-Infinity" | "NaN"}``; so its keys may
not start with ``$``.

Decoding checks every value's type and the rules a malformed file could break before the
simulator's own checks see it: engine names are the registered engines (``hwsim.engines``)
and an instruction sits in its own engine's stream; HBM shapes, addresses and access patterns
stay within ``MAX_PROGRAM_BYTES``;
initial values match their tensor's shape; HBM operands name declared tensors; allocations name
an on-chip memory and a core of the program. The instruction legality a config decides (bounds,
engine rules, queues) stays with the simulator.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import typing
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hwsim.builder import STATIC_TWIN
from hwsim.engines import engine_names
from hwsim.errors import SavedProgramError
from hwsim.isa.ap import MAX_FREE_DIMS, AccessPattern, MemorySpace
from hwsim.isa.base import ISA, Instruction
from hwsim.isa.origin import Tag
from hwsim.program import Allocation, CoreProgram, HbmTensorDecl, Program
from hwsim.workloads.program_archive import MAX_PROGRAM_BYTES, ArrayReader, ArrayWriter
from hwsim.workloads.program_origins import decode_origins, encode_origins
from hwsim.workloads.program_semaphores import check_semaphores
from hwsim.workloads.typed_json import (
    NON_FINITE,
    Codec,
    FieldError,
    Unsupported,
    article,
    codec_for,
    dataclass_codec,
    decode_fields,
    describe,
    optional,
    register_check,
)

_DOCUMENT_KEYS = ("hbm", "cores", "allocations", "meta")
#: Keys a document may lack: ``origins`` came with format 3 (a format 2 document has none).
_OPTIONAL_KEYS = ("origins",)
_MAX_DIMS = 32  # numpy's limit on array dimensions (before numpy 2)
_MAX_META_DEPTH = 64
_ON_CHIP = ("sbuf", "psum")


# ---- checks beyond field types ------------------------------------------------------------------


def _check_access_pattern(ap: AccessPattern) -> None:
    dims = len(ap.free_sizes)
    if not 1 <= dims <= MAX_FREE_DIMS:
        raise FieldError(f"has {dims} free dims (1 to {MAX_FREE_DIMS})").inside("free_sizes")
    if len(ap.free_strides) != dims:
        raise FieldError(
            f"has {len(ap.free_strides)} strides for {dims} free sizes (one per free dim)"
        ).inside("free_strides")
    numbers = (ap.start_partition, ap.partitions, ap.offset_bytes, ap.partition_stride)
    if max(map(abs, (*numbers, *ap.free_sizes, *ap.free_strides))) > MAX_PROGRAM_BYTES:
        for name in ("start_partition", "partitions", "offset_bytes", "partition_stride"):
            _within_limit(getattr(ap, name), name)
        for name in ("free_sizes", "free_strides"):
            for i, n in enumerate(getattr(ap, name)):
                _within_limit(n, name, i)
    covered = math.prod(ap.free_sizes) * ap.partitions * ap.dtype.itemsize
    if abs(covered) > MAX_PROGRAM_BYTES:
        raise FieldError(
            f"the operand covers {covered} bytes, more than MAX_PROGRAM_BYTES ({MAX_PROGRAM_BYTES})"
        ).inside("free_sizes")


def _within_limit(value: int, name: str, index: int | None = None) -> None:
    if abs(value) > MAX_PROGRAM_BYTES:
        error = FieldError(f"{value} is beyond ±MAX_PROGRAM_BYTES ({MAX_PROGRAM_BYTES})")
        raise (error if index is None else error.inside(index)).inside(name)


def _check_allocation(allocation: Allocation) -> None:
    if allocation.memory not in _ON_CHIP:
        raise FieldError(
            f"unknown memory {allocation.memory!r} (allocations are in sbuf or psum)"
        ).inside("memory")
    for field in ("core", "start_partition", "partitions", "offset_bytes", "size_bytes"):
        value = getattr(allocation, field)
        if not 0 <= value <= MAX_PROGRAM_BYTES:
            raise FieldError(f"{value} is outside 0..{MAX_PROGRAM_BYTES}").inside(field)


register_check(AccessPattern, _check_access_pattern)
register_check(Allocation, _check_allocation)


def _check_decl(decl: HbmTensorDecl) -> int:
    """The declared tensor's bytes, after checking its shape, values and address."""
    if not decl.name:
        raise FieldError("an HBM tensor needs a name").inside("name")
    if len(decl.shape) > _MAX_DIMS:
        raise FieldError(f"has {len(decl.shape)} dims (at most {_MAX_DIMS})").inside("shape")
    if any(n < 0 for n in decl.shape):
        raise FieldError(f"{list(decl.shape)} has a negative size").inside("shape")
    nbytes = math.prod(decl.shape) * decl.dtype.itemsize  # Python ints: no overflow
    if nbytes > MAX_PROGRAM_BYTES:
        raise FieldError(
            f"{list(decl.shape)} {decl.dtype.name} is {nbytes} bytes, more than "
            f"MAX_PROGRAM_BYTES ({MAX_PROGRAM_BYTES})"
        ).inside("shape")
    if decl.values is not None and decl.values.shape != decl.shape:
        raise FieldError(
            f"the array has shape {list(decl.values.shape)}, the tensor is declared "
            f"{list(decl.shape)}"
        ).inside("values")
    if decl.address_bytes is not None and not 0 <= decl.address_bytes <= MAX_PROGRAM_BYTES:
        raise FieldError(f"{decl.address_bytes} is outside 0..{MAX_PROGRAM_BYTES}").inside(
            "address_bytes"
        )
    return nbytes


# ---- instructions -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _InstructionCodec:
    cls: type[Instruction]
    fields: list[tuple[str, Codec]]
    names: frozenset[str]


_INSTRUCTION_CODECS: dict[type, _InstructionCodec] = {}


def instruction_codec(cls: type[Instruction]) -> _InstructionCodec:
    """How instructions of ``cls`` are written (compiled once per class); ``SavedProgramError``
    naming the class and field if one cannot be expressed as data."""
    found = _INSTRUCTION_CODECS.get(cls)
    if found is not None:
        return found
    hints = _type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.name == "opcode" or not f.init:
            why = "'opcode' is the key of the opcode" if f.name == "opcode" else "init=False"
            raise SavedProgramError(f"instruction {cls.__name__}.{f.name} cannot be saved: {why}")
        try:
            fields.append((f.name, codec_for(hints[f.name])))
        except Unsupported as exc:
            raise SavedProgramError(
                f"instruction {cls.__name__} ({cls.OPCODE}) cannot be saved: field {f.name}: {exc}"
            ) from None
    codec = _InstructionCodec(cls, fields, frozenset({"opcode", *(n for n, _ in fields)}))
    _INSTRUCTION_CODECS[cls] = codec
    return codec


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError) as exc:
        raise SavedProgramError(
            f"instruction {cls.__name__}: its field types cannot be resolved ({exc})"
        ) from None


def encode_instruction(
    instruction: Instruction, memo: dict[Any, Any] | None = None
) -> dict[str, Any]:
    """The instruction as JSON data. ``memo``: encodings of hashable field values already
    made for this document (a program's instructions repeat the same access patterns many
    times; each is encoded once and its JSON shared, never mutated)."""
    cls = type(instruction)
    if ISA.get(cls.OPCODE) is not cls:
        raise FieldError(f"{cls.__name__} is not the instruction registered as {cls.OPCODE!r}")
    codec = instruction_codec(cls)
    out: dict[str, Any] = {"opcode": cls.OPCODE}
    for name, field_codec in codec.fields:
        value = getattr(instruction, name)
        key = (field_codec, type(value), value) if type(value) is AccessPattern else None
        try:
            if key is not None and memo is not None and key in memo:
                out[name] = memo[key]
                continue
            out[name] = field_codec.encode(value)
        except FieldError as exc:
            raise exc.inside(name) from None
        if key is not None and memo is not None:
            memo[key] = out[name]
    return out


def decode_instruction(data: Any, tags: dict[str, Tag] | None = None) -> Instruction:
    """The instruction ``data`` describes; ``tags``: the typed tag of each tag text that has
    one (the document's ``origins``)."""
    if type(data) is not dict:
        raise FieldError(f"expected an instruction object, got {describe(data)}")
    opcode = data.get("opcode")
    if type(opcode) is not str:
        raise FieldError(f"expected an opcode string, got {describe(opcode)}").inside("opcode")
    cls = ISA.get(opcode)
    if cls is None:
        close = difflib.get_close_matches(opcode, list(ISA), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise FieldError(f"unknown opcode {opcode!r}{hint}").inside("opcode")
    codec = instruction_codec(cls)
    values = decode_fields(data, codec.fields, codec.names, f"a {opcode} instruction")
    if tags:
        values["tag"] = tags.get(values["tag"], values["tag"])
    try:
        return cls(**values)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise FieldError(f"not a valid {opcode} instruction: {exc}") from None


# ---- meta ---------------------------------------------------------------------------------------


def _encode_meta(value: Any, arrays: ArrayWriter, depth: int = 0) -> Any:
    if depth > _MAX_META_DEPTH:
        raise FieldError(f"nested deeper than {_MAX_META_DEPTH} levels")
    if value is None or type(value) is bool:
        return value
    if isinstance(value, enum.Enum):
        raise FieldError(f"{value!r}: save enum members by name (a string) in meta")
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return codec_for(int).encode(value)
    if isinstance(value, float | np.floating):
        encoded = codec_for(float).encode(value)
        return {"$float": encoded} if isinstance(encoded, str) else encoded
    if isinstance(value, str):
        return str(value)
    if isinstance(value, np.ndarray):
        return {"$array": arrays.add(value)}
    if isinstance(value, list | tuple):
        items = _each_item(value, lambda item: _encode_meta(item, arrays, depth + 1))
        return {"$tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or key.startswith("$"):
                raise FieldError(f"key {key!r}: meta keys are strings not starting with '$' (tags)")
            try:
                out[key] = _encode_meta(item, arrays, depth + 1)
            except FieldError as exc:
                raise exc.inside(key) from None
        return out
    raise FieldError(
        f"{article(type(value).__name__)} cannot be saved in meta (it holds JSON values, tuples "
        "and numpy arrays)"
    )


def _decode_meta(data: Any, arrays: ArrayReader, depth: int = 0) -> Any:
    if depth > _MAX_META_DEPTH:
        raise FieldError(f"nested deeper than {_MAX_META_DEPTH} levels")
    kind = type(data)
    if kind is list:
        return _decode_items(data, arrays, depth)
    if kind is not dict:
        if kind is int:
            return codec_for(int).decode(data)
        return data  # null, bool, float or string: JSON's own
    if len(data) == 1:
        ((key, item),) = data.items()
        if key.startswith("$"):
            try:
                return _decode_tag(key, item, arrays, depth)
            except FieldError as exc:
                raise exc.inside(key) from None
    out = {}
    for key, item in data.items():
        try:
            if key.startswith("$"):
                raise FieldError("tags ($...) stand alone in an object of one key")
            out[key] = _decode_meta(item, arrays, depth + 1)
        except FieldError as exc:
            raise exc.inside(key) from None
    return out


def _decode_tag(key: str, item: Any, arrays: ArrayReader, depth: int) -> Any:
    if key == "$tuple":
        if type(item) is not list:
            raise FieldError(f"expected a list, got {describe(item)}")
        return tuple(_decode_items(item, arrays, depth))
    if key == "$array":
        return arrays.take(item)
    if key == "$float":
        if type(item) is not str or item not in NON_FINITE:
            raise FieldError(f"expected one of {', '.join(NON_FINITE)}, got {describe(item)}")
        return NON_FINITE[item]
    raise FieldError("unknown tag (meta tags are $tuple, $array and $float)")


def _decode_items(items: list[Any], arrays: ArrayReader, depth: int) -> list[Any]:
    return _each_item(items, lambda item: _decode_meta(item, arrays, depth + 1))


def _each_item(items: Iterable[Any], convert: Callable[[Any], Any]) -> list[Any]:
    """``convert`` of each item in turn; its error says at which index."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(convert(item))
        except FieldError as exc:
            raise exc.inside(i) from None
    return out


# ---- the program --------------------------------------------------------------------------------


def _array_codec(writer: ArrayWriter | None, reader: ArrayReader | None) -> Codec:
    def encode(value: Any) -> Any:
        assert writer is not None
        return writer.add(value)

    def decode(data: Any) -> Any:
        assert reader is not None
        return reader.take(data)

    return Codec(encode, decode, frozenset({"object"}), "an array reference", "array references")


def _decl_codec(writer: ArrayWriter | None, reader: ArrayReader | None) -> Codec:
    values = optional(_array_codec(writer, reader))
    return dataclass_codec(HbmTensorDecl, overrides={"values": values})


def encode_program(program: Program) -> tuple[dict[str, Any], ArrayWriter]:
    """The document and arrays of ``program``; ``FieldError`` at the first value that cannot be
    saved or would not load (``SavedProgramError`` for an instruction class that cannot be)."""
    arrays = ArrayWriter()
    for i, (name, decl) in enumerate(program.hbm.items()):
        if name != decl.name:
            raise _error_at(f"{decl.name!r}, but the program keys it {name!r}", "hbm", i, "name")
    hbm = _checked_hbm(list(program.hbm.values()))
    decls = _decl_codec(arrays, None)
    document: dict[str, Any] = {
        "hbm": [_at(decls.encode, decl, "hbm", i) for i, decl in enumerate(hbm.values())]
    }
    cores = []
    memo: dict[Any, Any] = {}  # access patterns already encoded (``encode_instruction``)
    for c, core in enumerate(program.cores):
        streams = {}
        for engine, stream in core.streams.items():
            _at(_check_engine, engine, "cores", c)
            encoded = []
            for pc, instruction in enumerate(stream):
                where = ("cores", c, "streams", engine, pc)
                _at(_check_placed, instruction, *where, engine=engine, hbm=hbm)
                encoded.append(_at(encode_instruction, instruction, *where, memo=memo))
            streams[engine] = encoded
        cores.append({"streams": streams})
    document["cores"] = cores
    allocation = codec_for(Allocation)
    document["allocations"] = []
    for i, item in enumerate(program.allocations):
        _check_core(item, i, len(cores))
        document["allocations"].append(_at(allocation.encode, item, "allocations", i))
    document["meta"] = _at(lambda m: _encode_meta(m, arrays), program.meta, "meta")
    document["origins"] = encode_origins(program)
    return document, arrays


def decode_program(document: Any, arrays: ArrayReader) -> Program:
    """The program a checked document describes; ``FieldError`` naming the first bad field."""
    if type(document) is not dict:
        raise FieldError(f"expected the program object, got {describe(document)}")
    given = set(document) - set(_OPTIONAL_KEYS)
    if given != set(_DOCUMENT_KEYS):
        odd = sorted(given ^ set(_DOCUMENT_KEYS))[0]
        what = "missing" if odd in _DOCUMENT_KEYS else "unknown key"
        keys = ", ".join(_DOCUMENT_KEYS) + ("" if what == "missing" else "; origins is optional")
        raise FieldError(f"{what} (a program has {keys})").inside(odd)
    tags = _at(decode_origins, document.get("origins", []), "origins")
    decls = _decl_codec(None, arrays)
    hbm = _checked_hbm(
        [_at(decls.decode, data, "hbm", i) for i, data in enumerate(_list_at(document, "hbm"))]
    )
    cores = [
        _at(_decode_core, data, "cores", c, hbm=hbm, tags=tags)
        for c, data in enumerate(_list_at(document, "cores"))
    ]
    allocation = codec_for(Allocation)
    allocations = []
    for i, data in enumerate(_list_at(document, "allocations")):
        allocations.append(_at(allocation.decode, data, "allocations", i))
        _check_core(allocations[-1], i, len(cores))
    meta = _at(lambda m: _decode_meta(m, arrays), document["meta"], "meta")
    if type(meta) is not dict:
        raise _error_at(f"expected an object, got {describe(document['meta'])}", "meta")
    unused = arrays.unused()
    if unused:
        raise FieldError(f"array entry {unused[0]} is not referenced by the program")
    _link_twins(cores)
    return Program(hbm=hbm, cores=cores, allocations=allocations, meta=meta)


def _decode_core(
    data: Any, hbm: dict[str, HbmTensorDecl], tags: dict[str, Tag] | None = None
) -> CoreProgram:
    if type(data) is not dict or set(data) != {"streams"}:
        raise FieldError(f'expected {{"streams": {{ENGINE: [...]}}}}, got {describe(data)}')
    streams_data = data["streams"]
    if type(streams_data) is not dict:
        raise _error_at(f"expected an object of engine streams, got {describe(data)}", "streams")
    streams: dict[str, list[Instruction]] = {}
    for engine, stream in streams_data.items():
        _check_engine(engine)
        if type(stream) is not list:
            raise _error_at(f"expected a list of instructions, got {describe(stream)}", engine)
        decoded = []
        for pc, item in enumerate(stream):
            where = ("streams", engine, pc)
            instruction = _at(decode_instruction, item, *where, tags=tags)
            _at(_check_placed, instruction, *where, engine=engine, hbm=hbm)
            _at(check_semaphores, instruction, *where)
            decoded.append(instruction)
        streams[engine] = decoded
    return CoreProgram(streams)


def _checked_hbm(decls: list[HbmTensorDecl]) -> dict[str, HbmTensorDecl]:
    """The HBM table, each tensor checked (``_check_decl``), names unique, bytes in the limit."""
    hbm: dict[str, HbmTensorDecl] = {}
    total_bytes = 0
    for i, decl in enumerate(decls):
        total_bytes += _at(_check_decl, decl, "hbm", i)
        if decl.name in hbm:
            raise _error_at(f"HBM tensor {decl.name!r} is declared twice", "hbm", i, "name")
        if total_bytes > MAX_PROGRAM_BYTES:
            raise _error_at(
                f"the HBM tensors declared so far hold {total_bytes} bytes, more than "
                f"MAX_PROGRAM_BYTES ({MAX_PROGRAM_BYTES})",
                "hbm",
                i,
            )
        hbm[decl.name] = decl
    return hbm


def _check_engine(engine: str) -> None:
    if engine not in engine_names():
        raise _error_at(
            f"unknown engine {engine!r} (the engines are {', '.join(engine_names())})",
            "streams",
            engine,
        )


def _check_placed(instruction: Instruction, engine: str, hbm: dict[str, HbmTensorDecl]) -> None:
    """An instruction sits in its own engine's stream; its HBM operands name declared tensors."""
    if instruction.engine != engine:
        raise FieldError(
            f"the {instruction.OPCODE} says engine {instruction.engine!r} but sits in the "
            f"{engine} stream"
        ).inside("engine")
    for name, ap in instruction.operand_names().items():
        if ap.memory is MemorySpace.HBM and ap.tensor not in hbm:
            raise _error_at(
                f"names HBM tensor {ap.tensor!r}, which the program does not declare",
                *(name, "tensor"),
            )


def _check_core(allocation: Allocation, index: int, cores: int) -> None:
    if allocation.core >= cores:
        raise _error_at(
            f"core {allocation.core} does not exist (the program has {cores})",
            *("allocations", index, "core"),
        )


def _link_twins(cores: list[CoreProgram]) -> None:
    """Name each instruction's static twin as the builder does, so the simulator works out
    legality and cost once per distinct instruction by identity (``hwsim.builder``)."""
    twins: dict[tuple[Any, ...], Instruction] = {}
    for core in cores:
        for _, _, instruction in core.instructions():
            instruction.__dict__[STATIC_TWIN] = twins.setdefault(
                instruction.static_key(), instruction
            )


def _list_at(document: dict[str, Any], key: str) -> list[Any]:
    value = document[key]
    if type(value) is not list:
        raise _error_at(f"expected a list, got {describe(value)}", key)
    return value


def _at(function: Any, value: Any, *path: str | int, **kwargs: Any) -> Any:
    """``function(value)``, a ``FieldError`` it raises placed at ``path``."""
    try:
        return function(value, **kwargs)
    except FieldError as exc:
        for part in reversed(path):
            exc = exc.inside(part)
        raise exc from None


def _error_at(message: str, *path: str | int) -> FieldError:
    error = FieldError(message)
    for part in reversed(path):
        error = error.inside(part)
    return error

"""Values to JSON and back, driven by their declared types: the data-only core of saved programs.

``codec_for(T)`` compiles, once per type, a ``Codec`` whose ``encode`` turns a value of type ``T``
into JSON data and whose ``decode`` checks JSON data strictly and rebuilds the value. Supported:
``bool``, ``int``, ``float``, ``str``, ``None``, enums (by member name), ``DType`` (by name),
``Literal`` of strings, ``tuple[T, ...]`` and fixed tuples (JSON lists), unions whose members are
written as different JSON kinds (``float | AccessPattern``: a number or an object), and frozen
dataclasses (a JSON object holding exactly their fields, each by its own type). Any other type is
``Unsupported`` when its codec is compiled, so a dataclass that cannot be written is refused when
it is first saved, naming the class and the field.

Decoding never trusts the data: a wrong JSON kind, a missing or unknown key, an unknown enum or
dtype name or an int outside int64 raises ``FieldError`` with what was expected; the enclosing
containers add their key or index as it propagates, so the message names the field path
(``cores[0].streams.vector[12].src.free_sizes: expected a list of ints``).

Floats that JSON cannot hold are written as the strings ``"Infinity"``, ``"-Infinity"`` and
``"NaN"``; a float field may hold an int, which stays an int.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from hwsim.dtypes import DTYPES, DType
from hwsim.errors import SavedProgramError
from hwsim.strict_json import NON_FINITE, finite

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class FieldError(SavedProgramError):
    """Bad data at a field path; ``str()`` is ``path: message``."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def inside(self, part: str | int) -> FieldError:
        """The same error one level further out (``part`` a key or a list index)."""
        step = f"[{part}]" if isinstance(part, int) else part
        return FieldError(self.message, (step, *self.path))

    def __str__(self) -> str:
        path = "".join(
            p if p.startswith("[") or i == 0 else "." + p for i, p in enumerate(self.path)
        )
        return f"{path}: {self.message}" if path else self.message


class Unsupported(Exception):
    """A type the codec cannot express (an error in the code that declares it, not in a file)."""


@dataclass(frozen=True)
class Codec:
    """How one type is written: ``encode`` value -> JSON data, ``decode`` the checked reverse.

    kinds: the JSON kinds it writes (``null bool int float string list object``), which tells
    the members of a union apart; what/plural: how messages name it ("an int", "ints").
    """

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    kinds: frozenset[str]
    what: str
    plural: str


def expected(codec: Codec, got: Any) -> FieldError:
    """The error for data that is not what ``codec`` reads."""
    return FieldError(f"expected {codec.what}, got {describe(got)}")


def describe(value: Any) -> str:
    """A JSON value as messages name it: its kind and a short excerpt."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, int | float):
        text = repr(value)
        return f"the number {text[:40]}"
    return f"a {type(value).__name__}"


# ---- scalars ------------------------------------------------------------------------------------


def _checked_int(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise FieldError(f"{value} is outside the int64 range")
    return value


def _int_codec() -> Codec:
    def encode(value: Any) -> int:
        if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
            return _checked_int(int(value))
        raise FieldError(f"expected an int, got {type(value).__name__} {value!r}")

    def decode(data: Any) -> int:
        if type(data) is not int:
            raise expected(codec, data)
        return _checked_int(data)

    codec = Codec(encode, decode, frozenset({"int"}), "an int", "ints")
    return codec


_INT = _int_codec()


def _float_codec() -> Codec:
    def encode(value: Any) -> int | float | str:
        if isinstance(value, bool | np.bool_):
            raise FieldError(f"expected a number, got {type(value).__name__} {value!r}")
        if isinstance(value, int | np.integer):
            return _checked_int(int(value))
        if isinstance(value, float | np.floating):
            return finite(float(value))
        raise FieldError(f"expected a number, got {type(value).__name__} {value!r}")

    def decode(data: Any) -> int | float:
        kind = type(data)
        if kind is float:
            return data
        if kind is int:
            return _checked_int(data)
        if kind is str and data in NON_FINITE:
            return NON_FINITE[data]
        raise expected(codec, data)

    what = 'a number (or "Infinity", "-Infinity", "NaN")'
    codec = Codec(encode, decode, frozenset({"int", "float", "string"}), what, "numbers")
    return codec


def _exact_codec(kind: type[bool] | type[str], json_kind: str, what: str, plural: str) -> Codec:
    """``bool`` or ``str``: JSON's own (a str subclass is written as its text)."""

    def encode(value: Any) -> Any:
        if isinstance(value, kind) or (kind is bool and isinstance(value, np.bool_)):
            return kind(value)
        raise FieldError(f"expected {what}, got {type(value).__name__} {value!r}")

    def decode(data: Any) -> Any:
        if type(data) is not kind:
            raise expected(codec, data)
        return data

    codec = Codec(encode, decode, frozenset({json_kind}), what, plural)
    return codec


def _none_codec() -> Codec:
    def encode(value: Any) -> None:
        if value is not None:
            raise FieldError(f"expected None, got {type(value).__name__}")

    def decode(data: Any) -> None:
        if data is not None:
            raise expected(codec, data)

    codec = Codec(encode, decode, frozenset({"null"}), "null", "nulls")
    return codec


def _named_codec(names: dict[str, Any], name_of: Callable[[Any], str], title: str) -> Codec:
    """Values written by name (enum members, dtypes, literal strings)."""

    def encode(value: Any) -> str:
        name = name_of(value)
        if names.get(name) is None:
            raise FieldError(f"{value!r} is not {article(title)}")
        return name

    def decode(data: Any) -> Any:
        if type(data) is not str:
            raise expected(codec, data)
        try:
            return names[data]
        except KeyError:
            raise FieldError(f"unknown {title} {data!r}{_valid(data, list(names))}") from None

    codec = Codec(encode, decode, frozenset({"string"}), f"{article(title)} name", f"{title} names")
    return codec


def _valid(name: str, names: list[str]) -> str:
    if len(names) <= 12:
        return f" (valid: {', '.join(names)})"
    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" ({len(names)} names are valid)"


def _enum_codec(cls: type[enum.Enum]) -> Codec:
    def name_of(value: Any) -> str:
        if isinstance(value, cls):
            return value.name
        try:  # a plain int for an IntEnum field: the member it means
            return cls(value).name
        except (ValueError, TypeError):
            raise FieldError(f"{value!r} is not {article(cls.__name__)}") from None

    return _named_codec(dict(cls.__members__), name_of, cls.__name__)


def _dtype_codec() -> Codec:
    def name_of(value: Any) -> str:
        if not isinstance(value, DType):
            raise FieldError(f"expected a DType, got {type(value).__name__}")
        return value.name

    return _named_codec(dict(DTYPES), name_of, "dtype")


def _literal_codec(values: tuple[Any, ...]) -> Codec:
    if not all(isinstance(v, str) for v in values):
        raise Unsupported(f"Literal{list(values)}: only string literals are supported")
    return _named_codec({v: v for v in values}, lambda v: v if isinstance(v, str) else "", "value")


# ---- containers ---------------------------------------------------------------------------------


def _convert_each(converters: Iterable[Callable[[Any], Any]], values: Iterable[Any]) -> list[Any]:
    """Each value through its converter (pairs in order, as many as there are values); a
    ``FieldError`` names the position it came from."""
    out: list[Any] = []
    try:
        for convert, value in zip(converters, values, strict=False):  # converters may repeat
            out.append(convert(value))
    except FieldError as exc:
        raise exc.inside(len(out)) from None
    return out


def _tuple_codec(args: tuple[Any, ...]) -> Codec:
    if len(args) == 2 and args[1] is Ellipsis:
        return _variadic_tuple_codec(codec_for(args[0]))
    members = [codec_for(a) for a in args]
    encoders, decoders = [m.encode for m in members], [m.decode for m in members]

    def encode(value: Any) -> list[Any]:
        if not isinstance(value, tuple | list) or len(value) != len(members):
            raise FieldError(f"expected {codec.what}, got {type(value).__name__} {value!r}")
        return _convert_each(encoders, value)

    def decode(data: Any) -> tuple[Any, ...]:
        if type(data) is not list or len(data) != len(members):
            raise expected(codec, data)
        return tuple(_convert_each(decoders, data))

    inner = ", ".join(m.what.split(" ", 1)[-1] for m in members)
    what = f"a [{inner}] list"
    codec = Codec(encode, decode, frozenset({"list"}), what, f"[{inner}] lists")
    return codec


def _variadic_tuple_codec(item: Codec) -> Codec:
    def encode(value: Any) -> list[Any]:
        if not isinstance(value, tuple | list):
            raise FieldError(f"expected {codec.what}, got {type(value).__name__} {value!r}")
        return _convert_each(repeat(item.encode), value)

    def decode(data: Any) -> tuple[Any, ...]:
        if type(data) is not list:
            raise expected(codec, data)
        if item is _INT and all(type(n) is int and INT64_MIN <= n <= INT64_MAX for n in data):
            return tuple(data)  # the common case (sizes, strides), without a call per element
        return tuple(_convert_each(repeat(item.decode), data))

    codec = Codec(
        encode, decode, frozenset({"list"}), f"a list of {item.plural}", f"lists of {item.plural}"
    )
    return codec


_JSON_KIND_OF = {type(None): "null", bool: "bool", int: "int", float: "float", str: "string"}
_JSON_KIND_OF.update({list: "list", dict: "object"})


def _union_codec(args: tuple[Any, ...]) -> Codec:
    members = [codec_for(a) for a in args]
    by_kind: dict[str, Codec] = {}
    for member in members:
        for kind in member.kinds:
            if kind in by_kind:
                raise Unsupported(
                    f"union members {by_kind[kind].what} and {member.what} are both written as "
                    f"JSON {kind}s: a file could not say which one it holds"
                )
            by_kind[kind] = member

    def encode(value: Any) -> Any:
        for member in members:
            try:
                return member.encode(value)
            except FieldError:
                continue
        raise FieldError(f"expected {codec.what}, got {type(value).__name__} {value!r}")

    def decode(data: Any) -> Any:
        member = by_kind.get(_JSON_KIND_OF.get(type(data), ""))
        if member is None:
            raise expected(codec, data)
        return member.decode(data)

    what = " or ".join(m.what for m in members)
    plural = " or ".join(m.plural for m in members)
    codec = Codec(encode, decode, frozenset(by_kind), what, plural)
    return codec


#: Checks a decoded dataclass value must pass beyond its field types, by class (e.g. an access
#: pattern's free sizes and strides have one entry per free dim); raise ``FieldError``.
Check = Callable[[Any], None]


def dataclass_codec(
    cls: type, overrides: dict[str, Codec] | None = None, check: Check | None = None
) -> Codec:
    """A dataclass as a JSON object of exactly its fields (``overrides``: codecs by field name);
    ``check`` runs on every value written and read."""
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Codec]] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise Unsupported(f"{cls.__name__}.{f.name}: a field set by the class, not its caller")
        if overrides and f.name in overrides:
            fields.append((f.name, overrides[f.name]))
            continue
        try:
            fields.append((f.name, codec_for(hints[f.name])))
        except Unsupported as exc:
            raise Unsupported(f"{cls.__name__}.{f.name}: {exc}") from None
    names = frozenset(name for name, _ in fields)
    title = cls.__name__

    def encode(value: Any) -> dict[str, Any]:
        if type(value) is not cls:
            raise FieldError(f"expected {title}, got {type(value).__name__}")
        if check is not None:  # what is written must load
            check(value)
        out = {}
        for name, field_codec in fields:
            try:
                out[name] = field_codec.encode(getattr(value, name))
            except FieldError as exc:
                raise exc.inside(name) from None
        return out

    def decode(data: Any) -> Any:
        if type(data) is not dict:
            raise expected(codec, data)
        values = decode_fields(data, fields, names, codec.what)
        try:
            value = cls(**values)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise FieldError(f"not a valid {title}: {exc}") from None
        if check is not None:
            check(value)
        return value

    codec = Codec(encode, decode, frozenset({"object"}), f"{article(title)} object", f"{title}s")
    return codec


def decode_fields(
    data: dict[str, Any], fields: list[tuple[str, Codec]], names: frozenset[str], what: str
) -> dict[str, Any]:
    """Each field of ``data`` decoded by its codec; a missing key, or one not in ``names`` (the
    fields plus any keys the caller reads itself), is an error."""
    values = {}
    for name, field_codec in fields:
        try:
            item = data[name]
        except KeyError:
            raise FieldError(f"missing (every field of {what} is required)").inside(name) from None
        try:
            values[name] = field_codec.decode(item)
        except FieldError as exc:
            raise exc.inside(name) from None
    if len(data) != len(names):
        unknown = sorted(set(data) - names)
        raise FieldError(f"unknown field (the fields are {', '.join(sorted(names))})").inside(
            unknown[0]
        )
    return values


def article(word: str) -> str:
    """``word`` with its indefinite article."""
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def optional(codec: Codec) -> Codec:
    """``codec``'s values or None (null)."""

    def encode(value: Any) -> Any:
        return None if value is None else codec.encode(value)

    def decode(data: Any) -> Any:
        return None if data is None else codec.decode(data)

    if "null" in codec.kinds:
        raise Unsupported(f"{codec.what} is already written as null")
    return Codec(
        encode, decode, codec.kinds | {"null"}, f"{codec.what} or null", f"{codec.plural} or nulls"
    )


# ---- the dispatch -------------------------------------------------------------------------------

_CACHE: dict[Any, Codec] = {}
_CHECKS: dict[type, Check] = {}


def register_check(cls: type, check: Check) -> None:
    """Run ``check`` on every decoded ``cls`` value (before any codec of ``cls`` is compiled)."""
    if cls in _CACHE:
        raise RuntimeError(f"a codec of {cls.__name__} was compiled before its check was added")
    _CHECKS[cls] = check


def codec_for(tp: Any) -> Codec:
    """The codec of a type annotation (compiled once per type); ``Unsupported`` if none."""
    codec = _CACHE.get(tp)
    if codec is None:
        codec = _CACHE[tp] = _compile(tp)
    return codec


def _compile(tp: Any) -> Codec:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int:
        return _INT
    scalar = {
        float: _float_codec,
        type(None): _none_codec,
        DType: _dtype_codec,
    }
    if tp in scalar:
        return scalar[tp]()
    if tp is bool:
        return _exact_codec(bool, "bool", "true or false", "booleans")
    if tp is str:
        return _exact_codec(str, "string", "a string", "strings")
    if tp is None:
        return _none_codec()
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_codec(tp)
    if origin is tuple:
        if not args:
            raise Unsupported("a bare tuple: say what it holds (tuple[int, ...])")
        return _tuple_codec(args)
    if origin is typing.Union or origin is types.UnionType:
        return _union_codec(args)
    if origin is typing.Literal:
        return _literal_codec(args)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not tp.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise Unsupported(f"{tp.__name__} is not a frozen dataclass")
        return dataclass_codec(tp, check=_CHECKS.get(tp))
    name = getattr(tp, "__name__", None) or repr(tp)
    raise Unsupported(
        f"type {name} cannot be saved as data (supported: bool, int, float, str, None, enums, "
        "DType, string Literals, tuples, unions of different JSON kinds, frozen dataclasses)"
    )

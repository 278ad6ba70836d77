"""The checking composer under hwsim's YAML loader (``yaml_safe``), and construction of values.

PyYAML's composer, tracking the dotted path, nesting depth and expanded size of what it composes.
Everything is checked while the node tree is composed, before anything is constructed:

- nesting is at most ``MAX_DEPTH`` levels, counted through aliases too;
- the document expands to at most ``MAX_NODES`` nodes, aliases counted at their expanded size
  (a "billion laughs" file is refused at the alias that crosses the limit, never expanded);
  an alias inside the node it names (a recursive alias) is an error;
- a key given twice in one mapping is an error naming both lines; keys are strings;
- only JSON types: dates, ``!!binary``, ``!!set``, ``!!omap``, ``!!python/...`` and other tags
  are errors; integers have at most ``MAX_INT_DIGITS`` digits and floats must be finite.

Construction then builds fresh containers: an alias gives a copy of the node it names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from hwsim.errors import HwsimError

try:  # libyaml's parser, about 5x faster than PyYAML's own; the composer above it is ours
    from yaml._yaml import CParser as _CParser

    CParser: type | None = _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CParser = None

#: Deepest nesting of lists and mappings (configs have 3 levels, sweep specs 6).
MAX_DEPTH = 32
#: Most nodes a document may expand to, aliases counted at their expanded size (composing one
#: costs ~10 us, so a document at the limit loads in about a second).
MAX_NODES = 100_000
#: Most digits of an integer (2**64 has 20): no config or spec field needs more.
MAX_INT_DIGITS = 20

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_SEQ, _MAP, _MERGE, _VALUE = (_TAG + t for t in ("seq", "map", "merge", "value"))
_SCALAR_TAGS = frozenset({_STR, _INT, _FLOAT, _BOOL, _NULL, _VALUE})
#: What the tags YAML has beyond JSON's types are, for the error message.
_NON_JSON_TAGS = {
    _TAG + "timestamp": "a date or time",
    _TAG + "binary": "binary data (!!binary)",
    _TAG + "set": "a set (!!set)",
    _TAG + "omap": "an ordered map (!!omap)",
    _TAG + "pairs": "a list of pairs (!!pairs)",
}
_JSON_TYPES = "strings, numbers, true/false, null, lists and mappings"
_Collection = TypeVar("_Collection", SequenceNode, MappingNode)
#: Longest text of a value or key quoted in a message.
_QUOTE_CHARS = 40


def describe_value(text: str) -> str:
    """``text`` quoted for a message, shortened when long."""
    if len(text) <= _QUOTE_CHARS:
        return repr(text)
    return repr(text[:_QUOTE_CHARS]) + f"... ({len(text)} characters)"


# ---- composition: every check happens here, before anything is constructed ----------------------


class _CheckingComposer(Composer):
    """PyYAML's composer, tracking the dotted path, depth and expanded size of what it composes."""

    source: str
    error: type[HwsimError]
    # From the parser and resolver classes each loader combines this with (make_loader_class).
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]
    get_event: Callable[[], Any]
    resolve: Callable[..., str]
    descend_resolver: Callable[[Node | None, Any], None]
    ascend_resolver: Callable[[], None]

    def _setup(
        self,
        source: str,
        error: type[HwsimError],
        path: tuple[str | int, ...],
        show_lines: bool,
    ) -> None:
        Composer.__init__(self)
        SafeConstructor.__init__(self)  # type: ignore[arg-type]
        Resolver.__init__(self)  # type: ignore[arg-type]
        self.source, self.error, self._show_lines = source, error, show_lines
        self._path: list[str | int] = list(path)
        self._depth = self._deepest = self._nodes = 0
        self._open_anchors: set[str] = set()
        #: anchor -> (nodes it expands to, levels of nesting it has)
        self._extent: dict[str, tuple[int, int]] = {}

    def fail(self, node_or_mark: Any, what: str, hint: str) -> NoReturn:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        where = f"{self.source}:{mark.line + 1}" if self._show_lines else self.source
        raise self.error(f"{where}: {what} at {dotted_path(self._path)} ({hint})")

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        depth = self._depth + 1
        if self.check_event(AliasEvent):
            return self._alias(self.get_event(), depth)
        event = self.peek_event()
        if depth > MAX_DEPTH:
            self.fail(event, f"nesting deeper than {MAX_DEPTH} levels", "flatten the structure")
        self._count(1, event, None)
        anchor = event.anchor
        if anchor is not None:
            if anchor in self.anchors:
                first = self.anchors[anchor].start_mark.line + 1
                self.fail(event, f"anchor &{anchor} defined again", f"first at line {first}")
            self._open_anchors.add(anchor)
        start_nodes, outer_deepest = self._nodes - 1, self._deepest
        self._depth = self._deepest = depth
        self.descend_resolver(parent, index)
        if self.check_event(ScalarEvent):
            node: Node = self.compose_scalar_node(anchor)
        elif self.check_event(SequenceStartEvent):
            node = self.compose_sequence_node(anchor)
        else:
            node = self.compose_mapping_node(anchor)
        self.ascend_resolver()
        if anchor is not None:
            self._open_anchors.discard(anchor)
            self._extent[anchor] = (self._nodes - start_nodes, self._deepest - depth + 1)
        self._depth, self._deepest = depth - 1, max(outer_deepest, self._deepest)
        self._check_tag(node)
        return node

    def _alias(self, event: Any, depth: int) -> Node:
        anchor = event.anchor
        if anchor in self._open_anchors:
            self.fail(
                event,
                f"recursive alias *{anchor}",
                f"it is inside the node &{anchor} names; an alias must name a complete node",
            )
        if anchor not in self.anchors:
            self.fail(event, f"alias *{anchor} names no anchor", f"define &{anchor} before it")
        nodes, levels = self._extent[anchor]
        if depth + levels - 1 > MAX_DEPTH:
            self.fail(
                event,
                f"nesting deeper than {MAX_DEPTH} levels through alias *{anchor}",
                "flatten the structure",
            )
        self._count(nodes, event, anchor)
        self._deepest = max(self._deepest, depth + levels - 1)
        return self.anchors[anchor]

    def _count(self, nodes: int, event: Any, alias: str | None) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            what = f"alias *{alias} expands" if alias else "the document grows"
            self.fail(
                event,
                f"{what} past {MAX_NODES} values",
                "use fewer aliases or write the values out" if alias else "split it",
            )

    def _open_collection(self, kind: type[_Collection], anchor: Any) -> _Collection:
        """The node a sequence or mapping start event opens (tagged as PyYAML would), anchored."""
        start = self.get_event()
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, start.implicit)
        node = kind(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        return node

    def compose_sequence_node(self, anchor: Any) -> SequenceNode:
        node = self._open_collection(SequenceNode, anchor)
        while not self.check_event(SequenceEndEvent):
            self._path.append(len(node.value))
            node.value.append(self.compose_node(node, len(node.value)))
            self._path.pop()
        node.end_mark = self.get_event().end_mark
        return node

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node = self._open_collection(MappingNode, anchor)
        first_line: dict[str, int] = {}
        while not self.check_event(MappingEndEvent):
            key = self.compose_node(node, None)
            name = self._key_name(key)
            if name in first_line:
                self._path.append(name)
                self.fail(
                    key,
                    f"duplicate key {describe_value(name)}",
                    f"first at line {first_line[name]}; give each key once",
                )
            if key.tag != _MERGE:
                first_line[name] = key.start_mark.line + 1
            self._path.append(name)
            value = self.compose_node(node, key)
            if key.tag == _MERGE:
                self._check_merge(value)
            self._path.pop()
            node.value.append((key, value))
        node.end_mark = self.get_event().end_mark
        return node

    def _key_name(self, key: Node) -> str:
        """A mapping key as text; keys are strings (or ``<<``, YAML's merge key)."""
        if not isinstance(key, ScalarNode):
            kind = "a list" if isinstance(key, SequenceNode) else "a mapping"
            self.fail(key, f"{kind} as a key", "keys are strings")
        if key.tag in (_STR, _MERGE, _VALUE):
            return str(key.value)
        kinds = {_INT: "an integer", _FLOAT: "a number", _BOOL: "a boolean", _NULL: "null"}
        self.fail(
            key,
            f"key {describe_value(key.value)} reads as {kinds.get(key.tag, key.tag)}",
            f'keys are strings; quote it: "{key.value}"',
        )

    def _check_merge(self, value: Node) -> None:
        sources = value.value if isinstance(value, SequenceNode) else [value]
        if not all(isinstance(source, MappingNode) for source in sources):
            self.fail(value, "a merge key (<<) given a non-mapping", "give a mapping or list")

    def _check_tag(self, node: Node) -> None:
        tag = node.tag
        if isinstance(node, ScalarNode):
            if tag in (_INT, _FLOAT):
                self._check_number(node)
            if tag in _SCALAR_TAGS or tag == _MERGE:
                return
        elif tag == (_SEQ if isinstance(node, SequenceNode) else _MAP):
            return
        if tag == _TAG + "timestamp":
            self.fail(
                node,
                f"{node.value} reads as a date or time",
                f'dates are not values here; to give a string, quote it: "{node.value}"',
            )
        what = _NON_JSON_TAGS.get(tag, f"a value tagged {tag.replace(_TAG, '!!')}")
        never = "a data file never makes Python objects; " if "python/" in tag else ""
        self.fail(node, what, f"{never}only {_JSON_TYPES}; remove the tag")

    def _check_number(self, node: ScalarNode) -> None:
        if node.tag == _INT:
            digits = node.value.lstrip("+-").replace("_", "").replace(":", "")
            digits = digits[2:] if digits[:2].lower() in ("0x", "0b", "0o") else digits
            if len(digits) > MAX_INT_DIGITS:
                self.fail(
                    node,
                    f"an integer of {len(digits)} digits",
                    f"at most {MAX_INT_DIGITS} digits",
                )
        elif not math.isfinite(SafeConstructor.construct_yaml_float(self, node)):  # type: ignore[arg-type]
            self.fail(
                node, f"{describe_value(node.value)} is not a finite number", "give a finite number"
            )


def dotted_path(path: list[str | int] | tuple[str | int, ...]) -> str:
    """``['set', 'points', 2, 'rows']`` as ``set.points[2].rows`` (keys shortened if long)."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if len(part) <= _QUOTE_CHARS else part[:_QUOTE_CHARS] + "..."
            text += f".{name}" if text else name
    return text or "the top level"


def make_loader_class(c_parser: bool) -> type:
    """The loader: our composer over libyaml's parser (``c_parser``, when installed), or over
    PyYAML's own (where PyYAML was built without libyaml)."""
    c_base = CParser if c_parser else None
    parser_bases = (c_base,) if c_base is not None else (Reader, Scanner, Parser)

    def __init__(self: Any, text: str, *setup: Any) -> None:
        if c_base is not None:
            c_base.__init__(self, text)  # type: ignore[misc]
        else:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)
        self._setup(*setup)

    bases = (_CheckingComposer, *parser_bases, SafeConstructor, Resolver)
    return type("SafeLoader", bases, {"__init__": __init__})


# ---- construction: fresh containers, JSON types only -------------------------------------------

_SCALAR_CONSTRUCTORS = {
    _STR: SafeConstructor.construct_scalar,
    _VALUE: SafeConstructor.construct_scalar,
    _MERGE: SafeConstructor.construct_scalar,
    _INT: SafeConstructor.construct_yaml_int,
    _FLOAT: SafeConstructor.construct_yaml_float,
    _BOOL: SafeConstructor.construct_yaml_bool,
    _NULL: SafeConstructor.construct_yaml_null,
}


def construct(loader: Any, node: Node) -> Any:
    """The value of a checked node; each alias becomes its own copy (at most MAX_NODES values)."""
    if isinstance(node, ScalarNode):
        return _SCALAR_CONSTRUCTORS[node.tag](loader, node)
    if isinstance(node, SequenceNode):
        return [construct(loader, item) for item in node.value]
    merged: dict[str, Any] = {}
    explicit: dict[str, Any] = {}
    for key, value in node.value:
        if key.tag == _MERGE:
            for source in value.value if isinstance(value, SequenceNode) else [value]:
                for name, item in construct(loader, source).items():
                    merged.setdefault(name, item)  # the first mapping listed wins
        else:
            explicit[str(key.value)] = construct(loader, value)
    return merged | explicit

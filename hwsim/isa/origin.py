"""An instruction's tag: the text traces show, with its parts typed (scope, source line, origin).

Every instruction carries a ``tag`` saying where it came from. Its text is what traces, tables and
error messages show: ``SCOPE:LOCATION``, where SCOPE is the kernel's name (or the name a
``lang.tag_scope`` block gave) and LOCATION the ``file:line`` of the kernel author's line. The
kernel language tags with a ``Tag``: that text, with ``scope``, ``location`` and ``origin`` as
fields, so nothing reads them back by splitting the text.

``origin`` is what a front end says produced the instruction: an ``Origin`` naming a graph node
(``op``, ``node``) and, for a group of nodes fused into one, the ``members`` it stands for. The
simulator knows no front end: the PyTorch bridge fills it (``hwsim.bridge.identity``) and the
trace, its Ops track, the plots' colours and the bridge's per-op report read it. A tag without one
(an NKI or library kernel's) is attributed to its text.

One ``Tag`` object exists per (scope, origin, source line), not per instruction, and a tag is a
``str``: code that only shows or compares tags treats it as the text it is. A tag read back from
a file or written by hand is a plain ``str``; ``origin_of`` gives None for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Origin:
    """The graph node an instruction was emitted for.

    op:      the operation, what a timeline colours by (the bridge: the ATen op, ``addmm``, or a
             fused group's kind, ``fused[add+gelu]``).
    node:    the node, what a report attributes time to (``addmm_1``; a fused group: its
             members joined by ``+``).
    members: the nodes a fused group stands for, in graph order (``()`` for a single node).
    """

    op: str
    node: str
    members: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The tag scope this origin's instructions show: ``op/node``."""
        return f"{self.op}/{self.node}"


class Tag(str):
    """An instruction's tag: its text ``scope:location``, and the parts as fields.

    scope:    the kernel's name, or the ``tag_scope`` block's (for a bridge node ``op/node``).
    location: ``file:line`` of the line that emitted the instruction ("" if unknown).
    origin:   the graph node it was emitted for, or None.
    """

    scope: str
    location: str
    origin: Origin | None

    def __new__(cls, scope: str, location: str = "", origin: Origin | None = None) -> Tag:
        tag = super().__new__(cls, f"{scope}:{location}" if location else scope)
        tag.scope = scope
        tag.location = location
        tag.origin = origin
        return tag

    def at(self, location: str) -> Tag:
        """The same scope and origin at another location (a compiler-made instruction's)."""
        return Tag(self.scope, location, self.origin)


def origin_of(tag: str) -> Origin | None:
    """The origin a tag carries (None for a plain string tag or one without an origin)."""
    return tag.origin if type(tag) is Tag else None

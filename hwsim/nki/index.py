"""NKI index expressions: ``nl.arange``, ``nl.mgrid``, ``nl.ds`` and the masks built from them.

An index expression is affine in one iterator, ``a * v + b`` for ``v`` in ``0..n-1``, placed at
one position of an index grid (``nl.arange(128)[:, None]`` is position 0 of a 2-D grid,
``[None, :]`` position 1). Indexing a tensor with expressions gives the tensor of the grid's
shape (NKI's broadcasting rule): each expression becomes a strided slice of its axis, and an
int-indexed axis keeps a size-1 dimension where the grid has one for it.

A comparison of an expression with an int (``i_p < n - 128 * k``) is a ``Mask``: the range of
``v`` that is kept. ``mask=`` on a call narrows every operand axis indexed by that iterator to
the kept range, which is what the NKI compiler does with compile-time masks. A comparison of two
iterators (a triangle) is not a range; ``nisa.affine_select`` builds such masks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np

from hwsim.errors import IllegalInstructionError

_IDS = itertools.count()


def _where() -> str:
    from hwsim.lang.kernel import source_location

    return source_location()


@dataclass(frozen=True)
class IndexExpr:
    """``scale * v + offset`` for the iterator ``var`` (``v`` in 0..count-1), at grid position
    ``position`` of a grid of ``ndim`` dimensions."""

    var: int
    count: int
    scale: int = 1
    offset: int = 0
    position: int = 0
    ndim: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.count if d == self.position else 1 for d in range(self.ndim))

    def as_slice(self) -> slice:
        if self.scale < 1:
            raise IllegalInstructionError(
                f"{_where()}: index expression with step {self.scale}: only positive steps map "
                "to an access pattern"
            )
        return slice(self.offset, self.offset + (self.count - 1) * self.scale + 1, self.scale)

    def __getitem__(self, key: Any) -> IndexExpr:
        """``[:, None]`` / ``[None, :]``: place a 1-D expression in a 2-D (or N-D) grid."""
        items = key if isinstance(key, tuple) else (key,)
        full = [i for i, item in enumerate(items) if isinstance(item, slice)]
        if (
            self.ndim != 1
            or len(full) != 1
            or any(item is not None and not isinstance(item, slice) for item in items)
        ):
            raise IllegalInstructionError(
                f"{_where()}: index expression [{key!r}]: write arange(n)[:, None] or [None, :]"
            )
        return replace(self, position=full[0], ndim=len(items))

    def _affine(self, scale: int, offset: int) -> IndexExpr:
        return replace(self, scale=self.scale * scale, offset=self.offset * scale + offset)

    def __add__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return IndexSum.of(self) + other
        return replace(self, offset=self.offset + _int(other, "+"))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return IndexSum.of(self) + other * -1
        return replace(self, offset=self.offset - _int(other, "-"))

    def __rsub__(self, other: Any) -> IndexExpr:
        return self._affine(-1, _int(other, "-"))

    def __mul__(self, other: Any) -> IndexExpr:
        return self._affine(_int(other, "*"), 0)

    __rmul__ = __mul__

    def __neg__(self) -> IndexExpr:
        return self._affine(-1, 0)

    # Comparisons give the kept range of the iterator (the mask).
    def __lt__(self, other: Any) -> Mask:
        return self._bound(other, "<")

    def __le__(self, other: Any) -> Mask:
        return self._bound(other, "<=")

    def __gt__(self, other: Any) -> Mask:
        return self._bound(other, ">")

    def __ge__(self, other: Any) -> Mask:
        return self._bound(other, ">=")

    def _bound(self, other: Any, op: str) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return Affine.compare(self, other, op)
        bound = _int(other, op)
        if self.scale < 1:
            raise IllegalInstructionError(f"{_where()}: mask on a non-increasing expression")
        # scale * v + offset OP bound, solved for v (integers).
        lo, hi = 0, self.count
        rel = bound - self.offset
        if op == "<":
            hi = min(hi, -(-rel // self.scale))
        elif op == "<=":
            hi = min(hi, rel // self.scale + 1)
        elif op == ">":
            lo = max(lo, rel // self.scale + 1)
        else:
            lo = max(lo, -(-rel // self.scale))
        return Mask({self.var: (lo, hi)}, {self.var: (self.position, self.count)})


@dataclass(frozen=True)
class IndexSum:
    """A sum of index expressions of different iterators and a constant (``2 * i + j``,
    ``512 * i_p + i_f``): indexes one tensor axis with several grid dimensions
    (``hwsim.nki.pattern``)."""

    terms: tuple[IndexExpr, ...]
    offset: int = 0

    @staticmethod
    def of(expr: IndexExpr) -> IndexSum:
        return IndexSum((replace(expr, offset=0),), expr.offset)

    @property
    def ndim(self) -> int:
        return max(t.ndim for t in self.terms)

    def __add__(self, other: Any) -> IndexSum:
        if isinstance(other, IndexExpr):
            other = IndexSum.of(other)
        if isinstance(other, IndexSum):
            merged = list(self.terms)
            for term in other.terms:
                same = next((i for i, t in enumerate(merged) if t.var == term.var), None)
                if same is None:
                    merged.append(term)
                else:
                    merged[same] = replace(merged[same], scale=merged[same].scale + term.scale)
            return IndexSum(tuple(merged), self.offset + other.offset)
        return IndexSum(self.terms, self.offset + _int(other, "+"))

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexSum:
        return self + (
            other * -1 if isinstance(other, (IndexExpr, IndexSum)) else -_int(other, "-")
        )

    def __rsub__(self, other: Any) -> IndexSum:
        return self * -1 + _int(other, "-")

    def __mul__(self, other: Any) -> IndexSum:
        k = _int(other, "*")
        return IndexSum(tuple(replace(t, scale=t.scale * k) for t in self.terms), self.offset * k)

    __rmul__ = __mul__

    def __lt__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return Affine.compare(self, other, "<")
        return _sum_mask(self, _int(other, "<"), lambda value, bound: value < bound)

    def __le__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return Affine.compare(self, other, "<=")
        return _sum_mask(self, _int(other, "<="), lambda value, bound: value <= bound)

    def __gt__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return Affine.compare(self, other, ">")
        return _sum_mask(self, _int(other, ">"), lambda value, bound: value > bound)

    def __ge__(self, other: Any) -> Any:
        if isinstance(other, (IndexExpr, IndexSum)):
            return Affine.compare(self, other, ">=")
        return _sum_mask(self, _int(other, ">="), lambda value, bound: value >= bound)


@dataclass(frozen=True)
class Affine:
    """A comparison of index expressions of several iterators (``q_pos >= k_pos``): not a box,
    so not a mask here, but the predicate of ``nisa.affine_select`` (``pred=``), which GpSimdE
    evaluates per element as ``offset + p * channel_multiplier + sum(i_k * steps[k]) OP 0``."""

    expr: IndexSum
    op: str

    @staticmethod
    def compare(left: Any, right: Any, op: str) -> Affine:
        as_sum = IndexSum.of(left) if isinstance(left, IndexExpr) else left
        return Affine(as_sum - right, op)

    def select_args(self, shape: tuple[int, ...]) -> dict[str, Any]:
        """``affine_select``'s (offset, channel_multiplier, steps, cmp_op) over a tile of
        ``shape`` indexed by the predicate's grid (position 0 the partitions)."""
        from hwsim.kernels.ops import AluOp

        steps = [0] * (len(shape) - 1)
        multiplier, offset = 0, self.expr.offset
        for t in self.expr.terms:
            offset += t.scale * t.offset
            if t.position == 0:
                multiplier += t.scale
            elif t.position - 1 < len(steps):
                steps[t.position - 1] += t.scale
            else:
                raise IllegalInstructionError(
                    f"{_where()}: predicate over grid position {t.position} of a "
                    f"{len(shape)}-D tile"
                )
        ops = {"<": AluOp.is_lt, "<=": AluOp.is_le, ">": AluOp.is_gt, ">=": AluOp.is_ge}
        return {
            "offset": offset,
            "channel_multiplier": multiplier,
            "steps": tuple(steps),
            "cmp_op": ops[self.op],
        }

    def __and__(self, other: Any) -> Any:
        raise IllegalInstructionError(
            f"{_where()}: & of a two-iterator predicate: apply the predicates one after another"
        )


def _sum_mask(total: IndexSum, bound: int, keep: Any) -> Mask:
    """The mask ``total OP bound`` when what it keeps is a range of the outermost iterator (the
    one of largest step) with every value of the others: a box, as masks are here."""
    terms = sorted(total.terms, key=lambda t: abs(t.scale), reverse=True)
    outer, rest = terms[0], terms[1:]
    rest_lo = sum(min(0, t.scale * (t.count - 1)) for t in rest)
    rest_hi = sum(max(0, t.scale * (t.count - 1)) for t in rest)
    kept = []
    for v in range(outer.count):
        base = total.offset + outer.scale * v
        lo, hi = base + rest_lo, base + rest_hi
        low_in, high_in = keep(lo, bound), keep(hi, bound)
        if low_in != high_in:
            raise IllegalInstructionError(
                f"{_where()}: the mask keeps part of the range of iteration {v} of the outer "
                "iterator: masks over several iterators must keep whole rows (a box)"
            )
        if low_in:
            kept.append(v)
    if kept and kept != list(range(kept[0], kept[-1] + 1)):
        raise IllegalInstructionError(f"{_where()}: the mask keeps a non-contiguous range")
    lo, hi = (kept[0], kept[-1] + 1) if kept else (0, 0)
    return Mask({outer.var: (lo, hi)}, {outer.var: (outer.position, outer.count)})


def terms_of(item: Any) -> tuple[int, list[tuple[int, int, int, int, int]]]:
    """(constant, [(iterator, scale, count, grid position, grid ndim)]) of an index item."""
    if isinstance(item, IndexExpr):
        item = IndexSum.of(item)
    if isinstance(item, IndexSum):
        terms = [(t.var, t.scale, t.count, t.position, t.ndim) for t in item.terms if t.scale]
        return item.offset, terms
    return _int(item, "index"), []


@dataclass(frozen=True)
class Mask:
    """The kept range [lo, hi) of each masked iterator; ``&`` intersects."""

    ranges: dict[int, tuple[int, int]]
    #: Each masked iterator's grid position and count: operands with no iterator on an axis
    #: (tiles allocated by the kernel) are narrowed on that grid position when it has that size.
    places: dict[int, tuple[int, int]]

    def __and__(self, other: Any) -> Any:
        if isinstance(other, bool | np.bool_):  # a constant comparison: all or nothing
            return self if other else False
        if not isinstance(other, Mask):
            raise IllegalInstructionError(f"{_where()}: mask & {type(other).__name__}")
        merged = dict(self.ranges)
        for var, (lo, hi) in other.ranges.items():
            old = merged.get(var, (lo, hi))
            merged[var] = (max(old[0], lo), min(old[1], hi))
        return Mask(merged, {**self.places, **other.places})

    __rand__ = __and__

    def narrowed(self, expr: IndexExpr) -> IndexExpr:
        """``expr`` over the kept range of its iterator."""
        if expr.var not in self.ranges:
            return expr
        lo, hi = self.ranges[expr.var]
        return replace(expr, count=max(0, hi - lo), offset=expr.offset + lo * expr.scale)

    def __or__(self, other: Any) -> Mask:
        raise IllegalInstructionError(
            f"{_where()}: mask | mask is not a range; split the call into two"
        )

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.ranges.items())))


def _int(value: Any, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import operator

            return operator.index(value)
        except TypeError:
            raise IllegalInstructionError(
                f"{_where()}: index expression {op} {type(value).__name__}: only ints combine "
                "with index expressions"
            ) from None
    return value


def arange(*args: int) -> IndexExpr:
    """``nl.arange(n)`` / ``nl.arange(start, stop[, step])``: a 1-D index expression."""
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    count = len(range(start, stop, step))
    if count < 1:
        raise IllegalInstructionError(f"{_where()}: arange{args} is empty")
    return IndexExpr(next(_IDS), count, step, start)


class Grid(tuple):
    """What ``nl.mgrid[...]`` gives: a tuple of index expressions, also as ``.p`` (the
    partition index) and ``.x``, ``.y``, ``.z`` (the free indices), as NKI kernels write them."""

    p = property(itemgetter(0))
    x = property(itemgetter(1))
    y = property(itemgetter(2))
    z = property(itemgetter(3))


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per dimension (like numpy.mgrid)."""

    def __getitem__(self, key: Any) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        out = []
        for position, item in enumerate(items):
            if not isinstance(item, slice) or item.stop is None:
                raise IllegalInstructionError(f"{_where()}: mgrid[{key!r}]: use start:stop slices")
            start, step = item.start or 0, item.step or 1
            count = len(range(start, item.stop, step))
            out.append(IndexExpr(next(_IDS), count, step, start, position, len(items)))
        return Grid(out) if len(out) > 1 else out[0]


mgrid = _MGrid()


def ds(start: int, size: int) -> slice:
    """``nl.ds(start, size)``: the dynamic slice start:start+size (a compile-time int here)."""
    return slice(int(start), int(start) + int(size))


def needs_pattern(items: tuple[Any, ...]) -> bool:
    """Whether an index needs an access-pattern view (``hwsim.nki.pattern``): a sum of index
    expressions, a negative step, two expressions at one grid position, or expressions whose
    grid positions are not in the order of the axes they index (a transposed view)."""
    if any(isinstance(i, IndexSum) for i in items):
        return True
    exprs = [i for i in items if isinstance(i, IndexExpr)]
    if any(e.scale < 1 for e in exprs):
        return True
    positions = [e.position for e in exprs]
    # positions out of axis order transpose the view (x[i_f, i_p]): a pattern's dimensions
    return positions != sorted(set(positions))


def resolve(shape: tuple[int, ...], key: Any) -> tuple[tuple[Any, ...], tuple[int | None, ...]]:
    """A tensor index ``key`` as (plain numpy-style index, iterator of each result axis).

    Without index expressions the key is numpy's. With them the result has the grid's
    dimensions: expressions become slices, and ints become size-1 slices where the grid has a
    dimension no expression covers (``x[i_p, 0]`` with i_p [128, 1] is [128, 1])."""
    items = key if isinstance(key, tuple) else (key,)
    if any(item is Ellipsis for item in items):
        at = items.index(Ellipsis)
        fill = (slice(None),) * (len(shape) - len(items) + 1)
        items = items[:at] + fill + items[at + 1 :]
    exprs = [item for item in items if isinstance(item, IndexExpr)]
    if not exprs:
        kept = sum(isinstance(item, slice) for item in items) + len(shape) - len(items)
        return tuple(items), (None,) * kept
    ndim = max(e.ndim for e in exprs)
    covered = {e.position for e in exprs}  # grid positions given by expressions
    slices = sum(isinstance(item, slice) for item in items)
    ints = [i for i, item in enumerate(items) if not isinstance(item, (IndexExpr, slice))]
    uncovered = ndim - len(covered) - slices
    keep_ints = uncovered == len(ints) and uncovered > 0
    plain_items: list[Any] = []
    axis_vars: list[int | None] = []
    for item in items:
        if isinstance(item, IndexExpr):
            plain_items.append(item.as_slice())
            axis_vars.append(item.var)
        elif isinstance(item, slice):
            plain_items.append(item)
            axis_vars.append(None)
        elif keep_ints:
            value = _int(item, "index")
            plain_items.append(slice(value, value + 1))
            axis_vars.append(None)
        else:
            plain_items.append(item)
    axis_vars += [None] * (len(shape) - len(items))
    return tuple(plain_items), tuple(axis_vars)

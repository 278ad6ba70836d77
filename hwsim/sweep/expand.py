"""Expanding a spec's parameter blocks into points (one dict of dotted path -> value per config).

Blocks combine by Cartesian product, in the order grid, zip, random, points:

- ``grid``: every combination of the listed values (the first path varies slowest);
- ``zip``: the lists taken side by side (equal lengths), one axis of the product;
- ``random``: ``samples`` draws with a fixed ``seed``, sample by sample, so a larger ``samples``
  keeps the earlier draws (and a resumed sweep finds them finished);
- ``points``: an explicit list of assignments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Point = dict[str, Any]
#: Random float samples are rounded to this many significant digits (readable labels, and the
#: same value whatever the platform's last-bit float formatting).
SIGNIFICANT_DIGITS = 6


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[Point]:
    """Every combination of the values, first path slowest: {a: [1, 2], b: [3]} -> a1b3, a2b3."""
    paths = list(grid)
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*grid.values())]


def zip_points(zipped: Mapping[str, Sequence[Any]]) -> list[Point]:
    """The lists side by side: {a: [1, 2], b: [3, 4]} -> {a: 1, b: 3}, {a: 2, b: 4}."""
    lengths = {len(values) for values in zipped.values()}
    if len(lengths) > 1:
        sizes = ", ".join(f"{path}: {len(values)}" for path, values in zipped.items())
        raise ValueError(f"zip lists must have equal lengths ({sizes})")
    paths = list(zipped)
    return [dict(zip(paths, combo, strict=True)) for combo in zip(*zipped.values(), strict=True)]


def random_points(
    samples: int,
    seed: int,
    ranges: Mapping[str, Any],
    is_integer: Callable[[str], bool],
) -> list[Point]:
    """``samples`` points drawn with ``numpy.random.default_rng(seed)``.

    Each range is a mapping with either ``choices`` (picked uniformly) or ``low``/``high``
    (uniform, or log-uniform with ``log``), optionally snapped to ``low + k * step``; values of
    integer fields (``is_integer(path)``, or ``integer: true``) are rounded to ints.
    """
    rng = np.random.default_rng(seed)
    points = []
    for _ in range(samples):
        point: Point = {}
        for path, spec in ranges.items():
            point[path] = _draw(
                rng, spec, is_integer(path) if spec.integer is None else spec.integer
            )
        points.append(point)
    return points


def _draw(rng: np.random.Generator, spec: Any, integer: bool) -> Any:
    if spec.choices is not None:
        return spec.choices[int(rng.integers(len(spec.choices)))]
    low, high = float(spec.low), float(spec.high)
    if spec.log:
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = float(rng.uniform(low, high))
    if spec.step:
        value = low + round((value - low) / spec.step) * spec.step
    value = min(max(value, low), high)
    return round(value) if integer else float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def product(factors: Sequence[list[Point]]) -> list[Point]:
    """The Cartesian product of lists of points, merging dicts (earlier factors vary slowest)."""
    points: list[Point] = [{}]
    for factor in factors:
        points = [{**a, **b} for a in points for b in factor]
    return points

"""Search spaces declared next to a kernel: ``@tune.space(NAME=[values], ...)``.

The form is the one NKI authors already write to benchmark a kernel over its knobs, pytest's
``@pytest.mark.parametrize("TILES_IN_BLOCK_M, ...", [...])`` beside ``nki.benchmark``: each knob
is a keyword argument of the kernel with the list of values worth trying. The space is the
grid of those lists, less the points a ``where`` predicate refuses (say, blocks that cannot fit
SBUF; a ``where`` of two arguments also gets the config tuned for). Nothing here imports the
optimiser, so a kernel module can declare its space for free.

::

    @tune.space(TILES_IN_BLOCK_M=[1, 2, 4, 8, 16], BUFFERS=[1, 2, 3, 4],
                where=lambda p: p["TILES_IN_BLOCK_M"] * 128 <= 4096)
    @lang.kernel
    def my_matmul(lhsT, rhs, TILES_IN_BLOCK_M=1, BUFFERS=2): ...
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hwsim.errors import HwsimError

#: The attribute a declared space is kept under on the kernel object.
SPACE_ATTRIBUTE = "hwsim_tune_space"
#: Values a knob may take: they go into cache keys and JSON results as they are.
Value = int | float | str | bool


class TuneError(HwsimError):
    """A search space, a kernel to tune or a tuning run that cannot be used (says why)."""


@dataclass(frozen=True)
class SearchSpace:
    """Knob name -> the values to try (in the order given); ``where`` refuses points."""

    params: dict[str, tuple[Value, ...]]
    #: where(point) or where(point, config): False refuses the point (config: the
    #: HardwareConfig tuned for, so a predicate can say what fits its SBUF)
    where: Callable[..., bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.params:
            raise TuneError("a search space needs at least one knob (NAME=[values])")
        for name, values in self.params.items():
            if not values:
                raise TuneError(f"search space knob {name}: give at least one value")
            for value in values:
                if not isinstance(value, (int, float, str, bool)):
                    raise TuneError(
                        f"search space knob {name}: value {value!r} is a "
                        f"{type(value).__name__}; use numbers, strings or booleans"
                    )
            if len(set(values)) != len(values):
                raise TuneError(f"search space knob {name}: values repeat in {list(values)}")

    def admits(self, point: Mapping[str, Value], config: Any = None) -> bool:
        """Is ``point`` (one value per knob) in the space and allowed by ``where``?"""
        if set(point) != set(self.params):
            return False
        if any(point[k] not in self.params[k] for k in self.params):
            return False
        return self._allowed(dict(point), config)

    def _allowed(self, point: dict[str, Value], config: Any) -> bool:
        if self.where is None:
            return True
        takes_config = len(inspect.signature(self.where).parameters) >= 2
        return bool(self.where(point, config) if takes_config else self.where(point))

    def points(self, config: Any = None) -> Iterator[dict[str, Value]]:
        """Every admitted point of the grid, in the order the lists give."""
        names = list(self.params)
        for values in itertools.product(*(self.params[n] for n in names)):
            point = dict(zip(names, values, strict=True))
            if self._allowed(point, config):
                yield point

    def size(self, config: Any = None) -> int:
        return sum(1 for _ in self.points(config))

    def check_against(self, function: Callable[..., Any], name: str) -> None:
        """Every knob must be a keyword parameter of the kernel: a typo is an error here,
        not a crash in the first candidate."""
        params = inspect.signature(function).parameters
        unknown = [k for k in self.params if k not in params]
        if unknown:
            raise TuneError(
                f"{name}: search space knob(s) {', '.join(unknown)} are not parameters of the "
                f"kernel (it takes {', '.join(params)})"
            )


def space(
    where: Callable[..., bool] | None = None, **params: Sequence[Value]
) -> Callable[[Any], Any]:
    """Decorator: declare the search space of the kernel below it (see the module docstring)."""
    declared = SearchSpace({k: tuple(v) for k, v in params.items()}, where)

    def attach(kernel: Any) -> Any:
        function = getattr(kernel, "fn", None) or getattr(kernel, "func", None) or kernel
        declared.check_against(function, getattr(kernel, "name", None) or function.__name__)
        setattr(kernel, SPACE_ATTRIBUTE, declared)
        return kernel

    return attach


def space_of(kernel: Any) -> SearchSpace | None:
    """The space declared on ``kernel`` with ``@space``, if any."""
    found = getattr(kernel, SPACE_ATTRIBUTE, None)
    return found if isinstance(found, SearchSpace) else None


def point_key(point: Mapping[str, Value]) -> str:
    """A point as canonical JSON (sorted keys): how caches and databases name it."""
    return json.dumps(dict(point), sort_keys=True, separators=(",", ":"))


def parse_point(text: str, declared: SearchSpace) -> dict[str, Value]:
    """``NAME=VALUE,NAME=VALUE`` (a start point on the command line) typed as the space's values."""
    point: dict[str, Value] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, raw = item.partition("=")
        if not eq or name not in declared.params:
            raise TuneError(
                f"start point {item!r}: expected NAME=VALUE with NAME one of "
                f"{', '.join(declared.params)}"
            )
        matches = [v for v in declared.params[name] if str(v) == raw.strip()]
        if not matches:
            raise TuneError(
                f"start point {name}={raw}: not among its values {list(declared.params[name])}"
            )
        point[name] = matches[0]
    return point

"""The integer time base: one base clock in which every engine clock is a whole number of ticks."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from hwsim.engines import engine_names, engine_spec
from hwsim.errors import ConfigError

if TYPE_CHECKING:  # the schema checks its clocks with clock_problem below
    from hwsim.config.schema import HardwareConfig

#: Fastest base clock (a 1 fs tick). Clocks with little in common give a huge LCM: at this bound
#: the int64 ticks of a trace still hold 2.5 hours of simulated time.
MAX_BASE_MHZ = 1_000_000_000


def clock_problem(clocks_mhz: Mapping[str, int]) -> str | None:
    """Why these engine clocks (dotted name -> MHz) give no usable base clock, or None."""
    base = math.lcm(*clocks_mhz.values())
    if base <= MAX_BASE_MHZ:
        return None
    listed = ", ".join(f"{name}={mhz}" for name, mhz in clocks_mhz.items())
    return (
        f"the time base (the LCM of the engine clocks {listed}) would be {base} MHz, above "
        f"{MAX_BASE_MHZ} MHz; pick clocks with a larger common factor (e.g. multiples of 10 MHz)"
    )


@dataclass(frozen=True, slots=True)
class TimeBase:
    """Simulated time is an integer count of ticks of ``base_mhz``.

    ``base_mhz`` is the least common multiple of the engine clocks, so one cycle of every engine
    is an integer number of ticks. DMA and HBM durations, given in ns, are rounded up to ticks.
    """

    base_mhz: int
    ticks_per_cycle: dict[str, int]

    @classmethod
    def from_config(cls, config: HardwareConfig) -> TimeBase:
        clocks = {  # every registered engine, on its clock section's clock
            name: getattr(config, engine_spec(name).clock_section).clock_mhz
            for name in engine_names()
        }
        problem = clock_problem(clocks)
        if problem:  # a validated config never gets here: its schema checks the same
            raise ConfigError(f"{config.chip.name}: {problem}")
        base = math.lcm(*clocks.values())
        return cls(base, {name: base // mhz for name, mhz in clocks.items()})

    def cycles_to_ticks(self, engine: str, cycles: int) -> int:
        return cycles * self.ticks_per_cycle[engine]

    def ns_to_ticks(self, ns: float | Fraction) -> int:
        """Round a duration in ns up to whole ticks (exact rational arithmetic)."""
        exact = Fraction(str(ns)) if isinstance(ns, float) else Fraction(ns)
        return math.ceil(exact * self.base_mhz / 1000)

    def ticks_to_ns(self, ticks: int) -> float:
        return ticks * 1000 / self.base_mhz

    def ticks_to_us(self, ticks: int) -> float:
        return ticks / self.base_mhz

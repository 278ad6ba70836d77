"""The integer time base: one base clock in which every engine clock is a whole number of ticks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from hwsim.config.schema import HardwareConfig

#: The engines whose clocks define the base, in hardware order.
CLOCKED_ENGINES = ("tensor", "vector", "scalar", "gpsimd")


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
        clocks = {
            "tensor": config.tensor_engine.clock_mhz,
            "vector": config.vector_engine.clock_mhz,
            "scalar": config.scalar_engine.clock_mhz,
            "gpsimd": config.gpsimd_engine.clock_mhz,
        }
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

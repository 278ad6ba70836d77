"""Pseudo-random instructions: rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state.

The generators are xorwow (NeuronCore-v4 [S3]; assumed for v2/v3, whose algorithm is
unpublished), kept per lane as engine state (``isa.engine_state``: 4 per VectorE lane, one per
GpSimdE lane [S15]); every value of this module is deterministic given the seeds. Lane p is
partition p: an instruction on partitions [s, s + P) draws from lanes s .. s + P - 1, element i
of a partition (its flattened free index) from generator ``i % generators`` (``kernels.prng``).

Costs: [S3] gives v4 VectorE's rate, 4 x 32-bit values per lane per cycle
(``prng_values_per_cycle_per_lane``); [S16] gives dropout ``max(MIN_II, N)``. The others have no
published figure: assumptions named in each docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import (
    ComputeInstruction,
    Scalar,
    read_2d,
    read_bits,
    read_scalar,
    write_bits,
    write_result,
)
from hwsim.isa.copy_ops import same_shape
from hwsim.isa.engine_state import PRNG_GENERATORS, draw, prng_state
from hwsim.isa.operands import READ, WRITE, aps, maybe_operand, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

RNG_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
RAND2_DTYPES = ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "fp32", *RNG_DTYPES)


def _truncate(bits: np.ndarray, ap: AccessPattern) -> np.ndarray:
    """32-bit values -> the least significant bits of ap's integer dtype, as signed or unsigned
    values of that dtype (no saturation: a truncation)."""
    width = 8 * ap.dtype.itemsize
    low = bits & ((1 << width) - 1)
    if ap.dtype.is_signed_int:
        low = np.where(low >= 1 << (width - 1), low - (1 << width), low)
    return low


@register("rng", engines=("vector", "gpsimd"), profiler="RNG")
@dataclass(frozen=True, kw_only=True)
class Rng(ComputeInstruction):
    """dst = 32 random bits per element, truncated to dst's integer dtype's least significant
    bits [S15]. VectorE (every generation) or GpSimdE (NeuronCore-v3+) [S15].

    Cost: max(MIN_II, ceil(N / prng_values_per_cycle_per_lane)) cycles: 4 values per lane per
    cycle on v4 VectorE [S3]; 1 elsewhere (an assumption, the rate is unpublished). The output
    stream is not modelled separately ([S3]'s figure is the generation rate).
    """

    NKI_ARGS = "dst, engine"
    ENGINE_STATE = "prng"

    dst: AccessPattern = operand(WRITE)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.check_dtype("dst", self.dst, RNG_DTYPES)
        if self.engine == "gpsimd":
            self.require_generation(spec, "v3", "v4")

    def execute(self, state: CoreState) -> None:
        dst = self.dst
        bits = draw(state, self.engine, dst.start_partition, dst.partitions, dst.free_elements)
        state.write(dst, _truncate(bits, dst).reshape(dst.shape))


@register("rand2", engines=("vector",), profiler="RAND2")
@dataclass(frozen=True, kw_only=True)
class Rand2(ComputeInstruction):
    """dst = uniform random values in [min, max] (fp32, then cast to dst's dtype with RNE and
    integer saturation): ``min + u * (max - min)``, u the top 24 bits of a 32-bit draw times
    2^-24 (the simulator's mapping; [S15] says only "uniform"). min/max are fp32 immediates or
    [P, 1] tiles, min < max (checked for immediates; tiles at run time). NeuronCore-v4 VectorE.

    Cost: as rng (v4 VectorE: 4 values per lane per cycle [S3]).
    """

    ENGINE_STATE = "prng"

    dst: AccessPattern = operand(WRITE)
    min: Scalar = maybe_operand(READ)
    max: Scalar = maybe_operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v4")
        self.check_dtype("dst", self.dst, RAND2_DTYPES)
        for name, bound in (("min", self.min), ("max", self.max)):
            self.check_scalar(name, bound, self.dst)
            if isinstance(bound, AccessPattern):
                self.check_dtype(name, bound, ("fp32",))
        immediates = not aps(self.min, self.max)
        if immediates and not float(self.min) < float(self.max):  # type: ignore[arg-type]
            self.fail(f"min={self.min!r} must be less than max={self.max!r} [S15]")

    def execute(self, state: CoreState) -> None:
        shape = (self.dst.partitions,)
        low = np.broadcast_to(np.float32(read_scalar(state, self.min, False)), shape)
        high = np.broadcast_to(np.float32(read_scalar(state, self.max, False)), shape)
        if not (low < high).all():
            p = int(np.flatnonzero(~(low < high))[0])
            self.fail(f"min {low[p]!r} is not below max {high[p]!r} at partition {p} [S15]")
        dst = self.dst
        bits = draw(state, "vector", dst.start_partition, dst.partitions, dst.free_elements)
        write_result(state, dst, kernels.uniform(bits, low, high), False)


@register("dropout", engines=("vector",), profiler="DROPOUT")
@dataclass(frozen=True, kw_only=True)
class Dropout(ComputeInstruction):
    """dst = data with each element replaced by 0 with probability prob (an immediate or a [P,
    1] tile per partition): dropped where the draw's u (as rand2's) is below prob, so prob 1
    drops all and 0 none [S15]. dst has data's dtype [S15]; an integer data's tile prob must be
    fp32 [S15]. No rescaling. VectorE.

    Cost: max(MIN_II, N) [S16]: data in and dst out (``hwsim.cost.streaming``), or the
    generators' rate if that is slower.
    """

    ENGINE_STATE = "prng"

    dst: AccessPattern = operand(WRITE)
    data: AccessPattern = operand(READ)
    prob: Scalar = maybe_operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.data, self.dst, "data/dst")
        if self.dst.dtype != self.data.dtype:
            self.fail("dst must have data's dtype [S15]")
        self.check_scalar("prob", self.prob, self.data)
        if isinstance(self.prob, AccessPattern):
            if not self.prob.dtype.is_float:
                self.fail(f"operand 'prob' is {self.prob.dtype.name}; it must be a float dtype")
            if not self.data.dtype.is_float and self.prob.dtype.name != "fp32":
                self.fail("an integer data's prob must be fp32 [S15]")

    def execute(self, state: CoreState) -> None:
        integer = not self.data.dtype.is_float
        data = read_2d(state, self.data, integer)
        dst = self.dst
        bits = draw(state, "vector", dst.start_partition, dst.partitions, dst.free_elements)
        out = kernels.dropout(data, bits, read_scalar(state, self.prob, False))
        write_result(state, dst, out, integer)


@register("set_rng_seed", engines=("vector",), profiler="SET_RNG_SEED")
@dataclass(frozen=True, kw_only=True)
class SetRngSeed(ComputeInstruction):
    """Seed every lane of VectorE's generators from one 32-bit value (src_seeds: a [1, 1] 32-bit
    tile in SBUF or PSUM [S15]), expanded per lane and generator by SplitMix64
    (``kernels.xorwow_seed``, the simulator's documented choice). The same seed gives the same
    sequence [S15].

    Cost: no published figure. Assumption: one element read, so the MIN_II floor.
    """

    ENGINE_STATE = "prng"

    src_seeds: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.src_seeds.partitions != 1 or self.src_seeds.free_elements != 1:
            self.fail(f"operand 'src_seeds' has shape {self.src_seeds.shape}; it must be [1, 1]")
        if self.src_seeds.dtype.itemsize != 4:
            self.fail(f"operand 'src_seeds' is {self.src_seeds.dtype.name}; it must be 32-bit")

    def execute(self, state: CoreState) -> None:
        seed = int(read_bits(state, self.src_seeds)[0, 0])
        generators = prng_state(state, "vector")
        generators[...] = kernels.xorwow_seed(seed, *generators.shape[:2])


@dataclass(frozen=True, kw_only=True)
class _PrngStateTile(ComputeInstruction):
    """Shared by rand_set_state / rand_get_state: a [P, 6 * generators] uint32 tile, lane by
    partition, generator g's words (x0..x4, d) at columns 6g .. 6g + 5 [S15]."""

    ENGINES = ("vector", "gpsimd")
    ENGINE_STATE = "prng"

    def tile(self) -> AccessPattern:
        raise NotImplementedError

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, *(("v4",) if self.engine == "vector" else ("v3", "v4")))
        words = kernels.XORWOW_WORDS * PRNG_GENERATORS[self.engine]
        name = "src_seeds" if isinstance(self, RandSetState) else "dst"
        self.check_dtype(name, self.tile(), ("uint32",))
        if self.tile().free_elements != words:
            self.fail(
                f"operand '{name}' has {self.tile().free_elements} elements per partition; "
                f"{self.engine}'s xorwow state is {words} uint32 per lane [S15]"
            )

    def lanes(self, state: CoreState) -> np.ndarray:
        tile = self.tile()
        generators = prng_state(state, self.engine)
        return generators[tile.start_partition : tile.end_partition]


@register("rand_set_state", profiler="RAND_SET_STATE")
@dataclass(frozen=True, kw_only=True)
class RandSetState(_PrngStateTile):
    """Load the generators of the lanes of src_seeds' partitions (uint32 [P, 24] for VectorE,
    [P, 6] for GpSimdE) from SBUF [S15]; GpSimdE on NeuronCore-v3+, VectorE on v4+.

    Cost: no published figure. Assumption: the tile streamed in (max(MIN_II, 24) on VectorE,
    GPSIMD_START + 6 on GpSimdE).
    """

    NKI_ARGS = "src_seeds, engine=gpsimd"

    src_seeds: AccessPattern = operand(READ)

    def tile(self) -> AccessPattern:
        return self.src_seeds

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.check_memory("src_seeds", self.src_seeds, MemorySpace.SBUF)

    def execute(self, state: CoreState) -> None:
        words = read_bits(state, self.src_seeds)
        lanes = self.lanes(state)
        lanes[...] = words.reshape(lanes.shape)


@register("rand_get_state", profiler="RAND_GET_STATE")
@dataclass(frozen=True, kw_only=True)
class RandGetState(_PrngStateTile):
    """Store the generators of the lanes of dst's partitions into dst (uint32 [P, 24] VectorE,
    [P, 6] GpSimdE; SBUF, or PSUM from VectorE on v4) [S15]; the layout rand_set_state loads.

    Cost: assumption as rand_set_state (the tile streamed out).
    """

    NKI_ARGS = "dst, engine=gpsimd"

    dst: AccessPattern = operand(WRITE)

    def tile(self) -> AccessPattern:
        return self.dst

    def execute(self, state: CoreState) -> None:
        write_bits(state, self.dst, self.lanes(state).reshape(self.dst.partitions, -1))

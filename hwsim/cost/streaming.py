"""The data-path model of VectorE, ScalarE and GpSimdE: cycles to stream an instruction's operands.

Every compute instruction's cost rule (``hwsim.cost.rules``) starts from ``streaming_cycles``
(then applies its own documented factor, and ``CostModel.compute`` adds MIN_II and fixed costs).
The rules, each from HARDWARE.md, and the config fields that carry the generation differences:

- **One operand is one stream.** N elements per partition; the lanes take the partitions in
  parallel (``ceil(P / lanes)`` passes, so fewer partitions cost the same, §2.2 [S1]); a stream
  moves ``elements_per_cycle_per_lane_by_dtype[dtype]`` elements per lane per cycle, so it takes
  ``ceil(N / rate)`` cycles (~N cycles for N elements, §2.2 [S1][S16]; 2 for 16-bit dtypes on
  v4 ScalarE, §1.3 [S3]). An innermost stride above ``strided_access_stride_bytes`` (16 B) halves
  the interface's bandwidth, so that stream takes twice as long (§1.4 [S1], "per tensor
  read/write interface": reads and writes alike; ``RuleConstants.strided_access_slowdown``).
- **Reads, compute and writes are pipelined** ("in every cycle, each engine can read 128
  elements ..., perform a computation on previously read 128 elements, and write 128 previously
  computed results", [S1] §1.4), so an instruction takes the longest of its read and write times.
- **SBUF inputs share the SBUF read interface**, which carries ``sbuf_input_streams_by_dtype``
  full-rate streams at once: time = max(longest input, ceil(sum of inputs / streams)). On v2
  that is 1 (two SBUF inputs cost ~2N, §2.2 [S1][S16]); on v3/v4 VectorE the input path is "512
  BF16/FP16 ... 256 for other data types" elements/cycle (§1.3 [S2][S3]) over 128 lanes: 2
  streams of 4-byte data, 4 of 16-bit data. The mixed-dtype case uses the fewest streams among
  the SBUF inputs' dtypes.
- **A PSUM input streams over the PSUM read interface**, in parallel with the SBUF ones: that is
  why ``tensor_tensor`` with one input in PSUM costs N on v2 (§3 [S16]; "SBUF is capable of
  driving peak bandwidth in each tensor read/write interface", §1.4 [S1]). Where an
  instruction's documented cost has no PSUM case although its inputs may sit in PSUM
  (``scalar_tensor_tensor``, ``tensor_tensor_scan``, [S16]), the caller passes
  ``psum_own_port=False`` and every input shares the SBUF interface's streams.
- **VectorE performance mode** (v3+, ``performance_mode``) speeds up ``tensor_copy`` and
  ``tensor_scalar`` over 16-bit float operands: 4x when all are in SBUF with a contiguous
  innermost dim, 2x when one of those two conditions fails (§2.2 [S2]); ``performance_mode_factor``
  (``RuleConstants.performance_mode_*_speedup``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hwsim.isa.ap import AccessPattern, MemorySpace

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel


def innermost_stride_elements(ap: AccessPattern) -> int:
    """|stride| of the innermost free dim that has more than one element (0 if none has)."""
    for size, stride in zip(reversed(ap.free_sizes), reversed(ap.free_strides), strict=True):
        if size > 1:
            return abs(stride)
    return 0


def is_contiguous(ap: AccessPattern) -> bool:
    """Whether consecutive elements of the innermost (non-trivial) free dim are adjacent."""
    return innermost_stride_elements(ap) <= 1


def _per_dtype(table: dict[str, int], dtype: str) -> int:
    return table.get(dtype, table["fp32"])


def lane_cycles(model: CostModel, engine: str, ap: AccessPattern) -> int:
    """Cycles the lanes take over one operand's elements at the per-lane rate, ignoring its
    access pattern: ``ceil(N / rate) * ceil(P / lanes)``."""
    eng = model.engine_configs[engine]
    rate = _per_dtype(eng.elements_per_cycle_per_lane_by_dtype, ap.dtype.name)  # type: ignore[arg-type]
    return -(-ap.free_elements // rate) * -(-ap.partitions // eng.lanes)


def stream_cycles(model: CostModel, engine: str, ap: AccessPattern) -> int:
    """Cycles one operand takes through its SBUF/PSUM interface (module docstring, first rule)."""
    cycles = lane_cycles(model, engine, ap)
    limit = model.engine_configs[engine].strided_access_stride_bytes
    if innermost_stride_elements(ap) * ap.dtype.itemsize > limit:
        cycles *= model.rules.strided_access_slowdown
    return cycles


def sbuf_input_streams(model: CostModel, engine: str, inputs: Sequence[AccessPattern]) -> int:
    """Full-rate input streams the SBUF read interface carries for these inputs' dtypes."""
    table = model.engine_configs[engine].sbuf_input_streams_by_dtype
    return min((_per_dtype(table, ap.dtype.name) for ap in inputs), default=1)  # type: ignore[arg-type]


def streaming_cycles(
    model: CostModel,
    engine: str,
    inputs: Sequence[AccessPattern],
    outputs: Sequence[AccessPattern] = (),
    *,
    psum_own_port: bool = True,
    min_sbuf_streams: int = 1,
) -> int:
    """Cycles to stream ``inputs`` in and ``outputs`` out (the rules of the module docstring).

    inputs:  the full-size tensors the instruction reads ([P, 1] scalar operands are not streams).
    outputs: the tensors it writes ([P, 1] results like reduce_res may be left out).
    psum_own_port: a PSUM input streams over the PSUM interface in parallel with the SBUF ones;
        False when the instruction's documented cost has no PSUM case.
    min_sbuf_streams: a documented case where the inputs stream at once whatever the config says
        (tensor_tensor over bf16 add/multiply/subtract, §3 [S16]).
    """
    shared: list[AccessPattern] = []
    own_port: list[AccessPattern] = []
    for ap in inputs:
        (shared if ap.memory is MemorySpace.SBUF or not psum_own_port else own_port).append(ap)
    read = 0
    if shared:
        streams = max(min_sbuf_streams, sbuf_input_streams(model, engine, shared))
        cycles = [stream_cycles(model, engine, ap) for ap in shared]
        read = max(max(cycles), -(-sum(cycles) // streams))
    psum_read = sum(stream_cycles(model, engine, ap) for ap in own_port)
    write = max((stream_cycles(model, engine, ap) for ap in outputs), default=0)
    return max(read, psum_read, write)


def performance_mode_factor(
    model: CostModel, engine: str, operands: Sequence[AccessPattern]
) -> int:
    """VectorE performance-mode speed-up of tensor_copy / tensor_scalar (1 when it does not
    apply): every operand a 16-bit float; 4x if all are in SBUF and contiguous, 2x if exactly
    one of those two fails, else 1 (HARDWARE.md §2.2 [S2])."""
    if engine != "vector" or not model.engine_configs["vector"].performance_mode:
        return 1
    if not all(ap.dtype.is_float and ap.dtype.itemsize == 2 for ap in operands):
        return 1
    in_sbuf = all(ap.memory is MemorySpace.SBUF for ap in operands)
    contiguous = all(is_contiguous(ap) for ap in operands)
    if in_sbuf and contiguous:
        return model.rules.performance_mode_full_speedup
    if in_sbuf or contiguous:
        return model.rules.performance_mode_partial_speedup
    return 1

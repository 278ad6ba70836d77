"""ScalarE instructions: ``activation`` and ``activation_reduce`` (func(src * scale + bias))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction, Scalar, read_2d, read_scalar, write_result
from hwsim.isa.copy_ops import same_shape
from hwsim.isa.engine_state import accumulators
from hwsim.isa.operands import READ, WRITE, maybe_operand, operand, param
from hwsim.kernels import ActivationFunction

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

PerPartition = np.ndarray | float | int


@register("activation", engines=("scalar",), profiler="ACTIVATE")
@dataclass(frozen=True, kw_only=True)
class Activation(ComputeInstruction):
    """dst = func(src * scale + bias), computed in fp32 [S15].

    scale: an immediate or a [P, 1] tile; bias: a [P, 1] tile or None (0). Cost max(MIN_II, N)
    ScalarE cycles [S16], the same with or without scale and bias [S1]; N is the streaming time
    of src in and dst out (``hwsim.cost.streaming``: per-dtype rates, e.g. 2 bf16 elements per
    lane per cycle on v4 [S3], and the strided-access rule [S1]).
    """

    NKI_ARGS = "dst, op, data, *, bias, scale"
    FLOPS_PER_ELEMENT = 3  # multiply by scale, add bias, apply the function

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")
    func: ActivationFunction = param(nki="op")
    bias: AccessPattern | None = maybe_operand(READ, default=None)
    scale: Scalar = maybe_operand(READ, default=1.0)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        same_shape(self, self.src, self.dst, "src/dst")
        if self.bias is not None:
            self.check_scalar("bias", self.bias, self.src)
        self.check_scalar("scale", self.scale, self.src)

    def evaluate(self, state: CoreState) -> tuple[np.ndarray, PerPartition, PerPartition]:
        """(src [P, N] fp32, scale, bias) as the activation kernels take them."""
        bias: PerPartition = 0.0 if self.bias is None else read_scalar(state, self.bias, False)
        return read_2d(state, self.src, False), read_scalar(state, self.scale, False), bias

    def execute(self, state: CoreState) -> None:
        x, scale, bias = self.evaluate(state)
        out = kernels.activation(x, self.func, scale, bias)
        write_result(state, self.dst, out, False)


@register("activation_reduce")
@dataclass(frozen=True, kw_only=True)
class ActivationReduce(Activation):
    """``activation`` plus reduce_dst[P, 1] = add-reduce of the fp32 activation output.

    The reduction is the only one the ScalarE accumulator registers do (add) [S1][S15]. Cost
    max(MIN_II, N) + MIN_II ScalarE cycles: Activate plus ActReadAccumulator [S1][S16].
    """

    NKI_ARGS = "dst, op, data, *, reduce_res, bias, scale"
    ENGINE_STATE = "accumulators"

    reduce_dst: AccessPattern = operand(WRITE, nki="reduce_res")

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        if self.reduce_dst.partitions != self.src.partitions or self.reduce_dst.free_elements != 1:
            self.fail(
                f"operand 'reduce_dst' has shape {self.reduce_dst.shape}; it must be "
                f"[{self.src.partitions}, 1] (one sum per partition of src)"
            )

    def execute(self, state: CoreState) -> None:
        x, scale, bias = self.evaluate(state)
        out, red = kernels.activation_reduce(x, self.func, scale, bias)
        write_result(state, self.dst, out, False)
        write_result(state, self.reduce_dst, red, False)
        accumulators(state, "scalar").set(self.src.start_partition, red)

"""The Neuron runtime's per-inference cost outside the compiled program: launch and host copies.

A compiled graph called from PyTorch on a Neuron device (torch-neuronx) pays, besides the
program's own time on the NeuronCore: the runtime's launch of the program (``nrt_execute``:
the request queued, the core started, its completion signalled back to the host), the copy of
every per-call input from host memory to HBM before the program can start, and the copy of
every output back to host memory after it ends. Weights and other constants stay in HBM
between calls (they are loaded once, with the program) and cost nothing per inference. This is
what a published end-to-end latency measures on top of the device time ([HARDWARE.md §5]:
``nki.benchmark`` latencies include host <-> device transfers).

The parameters are the config's: ``host.launch_ns`` (one launch), and each copy's
``host.latency_ns + bytes / host.bandwidth_bytes_per_ns`` (the ``hwsim`` device's transfer
rule, ``bridge.device_session.transfer_ns``), copies one after another, none overlapped with
the program (the inputs must all be in HBM before it starts; its outputs exist only after).
The simulated program's time does not include any of it: the report shows it on a line of its
own (``runtime_overhead_ns``) and the end-to-end time as their sum.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from hwsim.config import HardwareConfig


@dataclass(frozen=True)
class RuntimeOverhead:
    """One inference's cost outside the program, ns (module docstring)."""

    launch_ns: float
    inputs_ns: float  # per-call inputs host -> HBM
    outputs_ns: float  # outputs HBM -> host
    input_bytes: int
    output_bytes: int

    @property
    def total_ns(self) -> float:
        return self.launch_ns + self.inputs_ns + self.outputs_ns

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"total_ns": self.total_ns}


def copies_ns(config: HardwareConfig, sizes: Iterable[int]) -> float:
    """Copies of ``sizes`` bytes each over the host link, one after another, ns."""
    from hwsim.bridge.device_session import transfer_ns

    return sum(transfer_ns(config, nbytes) for nbytes in sizes)


def runtime_overhead(
    config: HardwareConfig, input_sizes: Iterable[int], output_sizes: Iterable[int]
) -> RuntimeOverhead:
    """The overhead of one call whose per-call inputs and outputs have these byte sizes (graph
    inputs bound to constants, the weights, are not per-call inputs)."""
    inputs, outputs = [int(b) for b in input_sizes], [int(b) for b in output_sizes]
    return RuntimeOverhead(
        launch_ns=float(config.host.launch_ns),
        inputs_ns=copies_ns(config, inputs),
        outputs_ns=copies_ns(config, outputs),
        input_bytes=sum(inputs),
        output_bytes=sum(outputs),
    )

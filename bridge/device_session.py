"""One run of the ``hwsim`` device: its options, the op runner, the report, and timed transfers.

Ops run through ``HwsimMode.run_call`` (``bridge.offload``) on the host tensors: each supported
op is lowered (cached per layout), simulated, checked against the CPU and recorded; the others
follow the fallback policy. The device differs in what a view is: every op whose schema says its
result aliases an input (``split``, ``unbind`` and ``diagonal`` as well as ``view``) stays a host
view, so aliasing holds.

Copies between the host and the device are timed on the config's host link,
``host.latency_ns + bytes / host.bandwidth_bytes_per_ns``, one at a time, and recorded as ops of
status 'transfer' and as runs (so ``Report.total_sim_ns`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hwsim.bridge.device_memory import MEMORY
from hwsim.bridge.offload import HwsimMode
from hwsim.bridge.report import OpRecord, Report
from hwsim.bridge.report_records import RunRow
from hwsim.config import HardwareConfig

#: Transfer directions, as they appear in the report's op column.
TO_DEVICE = "copy host->hwsim"
TO_HOST = "copy hwsim->host"


def transfer_ns(config: HardwareConfig, nbytes: int) -> float:
    """Simulated time of one host <-> HBM copy of ``nbytes`` bytes, ns."""
    return config.host.latency_ns + nbytes / config.host.bandwidth_bytes_per_ns


def aliases_an_input(func: Any) -> bool:
    """Whether the op's result is a view of an input (its schema's returns alias, unwritten)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return False
    returns = schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


class _DeviceRunner(HwsimMode):
    """HwsimMode's machinery, called op by op (never entered as a mode)."""

    def is_view(self, func: Any, result: Any = None) -> bool:
        return aliases_an_input(func)

    def node_name(self, prefix: str) -> str:
        """A node name numbered with the ops' (one sequence for the whole report)."""
        return f"{prefix}#{next(self._calls)}"


@dataclass
class TransferTotals:
    count: int = 0
    nbytes: int = 0
    ns: float = 0.0


class DeviceSession:
    """Options (those of ``bridge.options``, but ``trace``), runner and report of the device."""

    def __init__(self, config: Any = "trn2", **options: Any) -> None:
        if "trace" in options:
            raise ValueError(
                "hwsim device: no 'trace' option; save the report with "
                "hwsim.bridge.device.report().save(folder)"
            )
        own_report = options.get("report") is None
        self.runner = _DeviceRunner(config, **options)
        if own_report:
            self.report.mode = "device"
        self.config: HardwareConfig = self.runner.options.config
        MEMORY.set_capacity(self.config)
        self.transfers = {TO_DEVICE: TransferTotals(), TO_HOST: TransferTotals()}

    @property
    def report(self) -> Report:
        return self.runner.report

    def run_call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.runner.run_call(func, args, kwargs)

    def transfer(self, direction: str, tensor: torch.Tensor) -> None:
        """Record one copy of ``tensor``'s bytes across the host link."""
        nbytes = tensor.numel() * tensor.element_size()
        ns = transfer_ns(self.config, nbytes)
        node = self.runner.node_name("h2d" if direction == TO_DEVICE else "d2h")
        shape = str(list(tensor.shape))
        self.report.add(
            OpRecord(
                node,
                direction,
                "transfer",
                detail=f"{nbytes} bytes {str(tensor.dtype).removeprefix('torch.')}",
                shapes=shape,
                sim_ns=ns,
                span_ns=ns,
            )
        )
        self.report.add(
            RunRow(
                node,
                {
                    "total_ns": ns,
                    "instructions": 0,
                    "mfu_pct": 0.0,
                    "hbm_bytes": nbytes,
                    "bottleneck": "host link",
                },
            )
        )
        totals = self.transfers[direction]
        totals.count += 1
        totals.nbytes += nbytes
        totals.ns += ns

    def summary(self) -> dict[str, Any]:
        """Counts and simulated time of the device's work so far."""
        ops = self.report.ops
        return {
            "config": self.config.chip.name,
            "simulator_ops": sum(r.status == "simulator" for r in ops),
            "cpu_fallbacks": sum(r.status == "cpu" for r in ops),
            "views": sum(r.status == "view" for r in ops),
            "ops_ns": sum(r.sim_ns for r in ops if r.status == "simulator"),
            "transfers": {
                direction: {"count": t.count, "bytes": t.nbytes, "ns": t.ns}
                for direction, t in self.transfers.items()
            },
            "total_sim_ns": self.report.total_sim_ns,
            "numerics_ok": self.report.numerics_ok,
            "hbm_allocated_bytes": MEMORY.allocated_bytes,
            "hbm_peak_bytes": MEMORY.peak_bytes,
        }


#: The session device ops go to: the latest ``start_session``, or a default one made on first use.
_CURRENT: list[DeviceSession] = []


def current_session() -> DeviceSession:
    if not _CURRENT:
        _CURRENT.append(DeviceSession())
    return _CURRENT[-1]


def start_session(config: Any = "trn2", **options: Any) -> DeviceSession:
    """A new session (new options, a new report) for the ops from now on."""
    session = DeviceSession(config, **options)
    _CURRENT[:] = [session]
    return session

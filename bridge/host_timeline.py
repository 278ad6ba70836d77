"""One timeline per call of a graph that runs partly on the CPU: the host track of its trace.

When some ops of a compiled graph fall back to the CPU, the graph runs as simulator partitions
(``fused_<n>``, each its own program and trace) with CPU ops between them. ``MixedGraph`` runs
that graph node by node and lays the nodes end to end on one timeline, in the order they ran:

- a simulator partition takes its **simulated** time (its program's ``total_ns``);
- a CPU op takes its **host wall time** on this machine (there is no model of the CPU, and a real
  Trainium fallback would add a device-host round trip on top);

and, with the ``trace`` option, writes it as a Chrome trace whose host track ("PyTorch ops")
shows every CPU fallback with its reason next to the partitions (each of which has its full
engine-level trace in its own run folder). Each CPU op's ``host_ns`` is also in the report.
"""

from __future__ import annotations

import operator
import time
from typing import Any

from torch import fx

from hwsim.bridge.fx_interpreter import Interpreter
from hwsim.bridge.options import BridgeOptions
from hwsim.bridge.report import OpRecord
from hwsim.bridge.report_records import HostTimes, TimelineRow


class _Timeline(Interpreter):
    def __init__(self, module: fx.GraphModule, records: dict[str, OpRecord]) -> None:
        super().__init__(module)
        self.records = records
        self.events: list[dict[str, Any]] = []
        self.now_ns = 0.0
        self.simulated_ns = 0.0
        self.host_ns = 0.0
        self.host_ns_by_node: dict[str, float] = {}

    def run_node(self, n: fx.Node) -> Any:
        if n.op not in ("call_function", "call_module") or n.target is operator.getitem:
            return super().run_node(n)
        start = time.perf_counter()
        result = super().run_node(n)
        wall_ns = (time.perf_counter() - start) * 1e9
        target = self.module.get_submodule(str(n.target)) if n.op == "call_module" else None
        simulated = getattr(target, "last_total_ns", None)
        if simulated is not None:
            name = str(getattr(target, "name", n.target))
            args = {"runs_on": "simulator", "simulated_ns": simulated, "run": name}
            duration = float(simulated)
            self.simulated_ns += duration
        else:
            record = self.records.get(n.name)
            name = record.op if record is not None else str(n.target)
            args = {"runs_on": "cpu (host wall time)", "node": n.name}
            if record is not None:
                args |= {"reason": record.reason, "detail": record.detail}
                self.host_ns_by_node[n.name] = wall_ns
            duration = wall_ns
            self.host_ns += duration
        end = self.now_ns + duration
        self.events.append({"name": name, "start_ns": self.now_ns, "end_ns": end, "args": args})
        self.now_ns = end
        return result


class MixedGraph:
    """Runs a partitioned graph (simulator partitions + CPU ops) and records its timeline."""

    def __init__(
        self,
        module: fx.GraphModule,
        name: str,
        options: BridgeOptions,
        records: dict[str, OpRecord],
    ) -> None:
        self.module = module
        self.name = name
        self.options = options
        self.records = records
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        timeline = _Timeline(self.module, self.records)
        result = timeline.run(*args)
        self.calls += 1
        report = self.options.report
        assert report is not None
        report.add(
            HostTimes(self.records, timeline.host_ns_by_node),
            TimelineRow(self.name, self.calls, timeline.simulated_ns, timeline.host_ns),
        )
        if self.options.trace is not None:
            self._write(timeline)
            report.save(self.options.trace)
        return result

    def _write(self, timeline: _Timeline) -> None:
        from hwsim.trace.chrome import write_chrome_trace
        from hwsim.trace.records import Trace

        config = self.options.config
        trace = Trace(
            base_mhz=1000,
            config=config,
            meta={"graph": self.name, "host_events": timeline.events},
        )
        assert self.options.trace is not None
        with (
            self.options.trace.child(f"{self.name}_call{self.calls}_timeline") as folder,
            folder.open("trace.json", buffering=1 << 20) as stream,
        ):
            write_chrome_trace(trace, stream)

"""What the advisor reads from a run: its summary plus a few facts of its instruction table.

``Evidence`` is gathered once, from a trace in memory (``from_trace``) or from a run folder's
``summary.json`` and ``tables/Instruction.csv`` (``from_run_dir``), so every rule sees the same
numbers whichever way the run reached it. Facts taken from instructions:

- loads: each DMA that reads HBM, keyed by its source access pattern as the instruction table
  prints it (tensor, offset, shape and strides), with its bytes; the same key twice is the same
  bytes loaded again;
- PSUM evacuations: VectorE and ScalarE instructions that read PSUM, their count and busy time;
- per engine, the busy time of DMA triggers and of compute.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwsim.errors import HwsimError
from hwsim.trace.summary import RunSummary

#: Profiler engine names (the instruction table's ``engine``) -> hwsim engine names.
ENGINE_OF_PROFILER = {
    "Tensor": "tensor",
    "Vector": "vector",
    "Scalar": "scalar",
    "GpSimd": "gpsimd",
    "Sync": "sync",
}
#: Operand text of a DMA's source in ``Instruction.describe()``: ``src=...`` up to the next field.
_SOURCE = re.compile(r"src=(\S+)")


@dataclass
class Evidence:
    """A run's numbers as the rules read them (times in ns)."""

    summary: RunSummary
    loads: Counter[str] = field(default_factory=Counter)  # source key -> times loaded
    load_bytes: dict[str, int] = field(default_factory=dict)  # source key -> bytes per load
    evacuations: dict[str, int] = field(default_factory=dict)  # engine -> PSUM-reading instr.
    evacuation_ns: dict[str, float] = field(default_factory=dict)
    busy_ns: dict[str, float] = field(default_factory=dict)  # engine -> busy (all instructions)
    instructions: int = 0

    @property
    def total_ns(self) -> float:
        return float(self.summary.total_ns)

    def engine(self, name: str) -> Any:
        return self.summary.engines.get(name)

    def busy_pct(self, name: str) -> float:
        found = self.engine(name)
        return float(found.busy_pct) if found is not None else 0.0

    def wait_pct(self, waiter: str, on: str) -> float:
        found = self.engine(waiter)
        return float(found.wait_pct_by_source.get(on, 0.0)) if found is not None else 0.0

    def path_pct(self, resource: str) -> float:
        return float(self.summary.critical_path.share_pct.get(resource, 0.0))

    @property
    def load_total_bytes(self) -> int:
        return sum(n * self.load_bytes[k] for k, n in self.loads.items())

    @property
    def load_unique_bytes(self) -> int:
        return sum(self.load_bytes.values())

    @classmethod
    def from_rows(cls, summary: RunSummary, rows: Iterable[Mapping[str, Any]]) -> Evidence:
        """From instruction-table rows (the ``Instruction`` columns of ``hwsim.trace.tables``)."""
        evidence = cls(summary)
        for row in rows:
            evidence.instructions += 1
            engine = ENGINE_OF_PROFILER.get(str(row["engine"]), str(row["engine"]).lower())
            duration = float(row["duration_ns"])
            evidence.busy_ns[engine] = evidence.busy_ns.get(engine, 0.0) + duration
            hbm_read = int(row["hbm_read_bytes"])
            if hbm_read and int(row["sbuf_write_bytes"]):
                match = _SOURCE.search(str(row["operands"]))
                key = match.group(1) if match else f"{row['hwsim_opcode']}@{row['pc']}"
                evidence.loads[key] += 1
                evidence.load_bytes[key] = hbm_read
            if int(row["psum_read_bytes"]) and engine in ("vector", "scalar"):
                evidence.evacuations[engine] = evidence.evacuations.get(engine, 0) + 1
                evidence.evacuation_ns[engine] = evidence.evacuation_ns.get(engine, 0.0) + duration
        return evidence

    @classmethod
    def from_trace(cls, trace: Any, summary: RunSummary) -> Evidence:
        from hwsim.trace.tables import INSTRUCTION_COLUMNS, instruction_rows

        names = [name for name, _ in INSTRUCTION_COLUMNS]
        return cls.from_rows(
            summary, (dict(zip(names, r, strict=True)) for r in instruction_rows(trace))
        )

    @classmethod
    def from_run_dir(cls, path: str | Path) -> Evidence:
        """From a run folder written by ``hwsim run --out`` (or any writer of run folders)."""
        from hwsim.trace.outputs import TABLES_DIR, load_summary

        summary = load_summary(path)
        table = Path(path) / TABLES_DIR / "Instruction.csv"
        if not table.is_file():
            raise HwsimError(
                f"{path}: no {TABLES_DIR}/Instruction.csv; advise reads a run folder written by "
                "hwsim run --out (or name the workload instead)"
            )
        try:
            with table.open(encoding="utf-8", newline="") as stream:
                return cls.from_rows(summary, csv.DictReader(stream))
        except (KeyError, ValueError, csv.Error) as exc:
            raise HwsimError(f"{table}: not an instruction table of hwsim ({exc})") from None

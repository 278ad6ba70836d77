"""Initcheck: every read of never-written SBUF, PSUM or HBM bytes, like compute-sanitizer's.

With ``run(..., initcheck=True)`` each instruction's reads are checked against the memories'
"written" mirrors (``CoreState.mirror``) before it executes, and its writes are marked after:
one vectorised numpy operation per operand on the operand's own strided view, exact per byte.
HBM inputs (and tensors declared with values) count as written; everything else starts unwritten.
A read by an instruction whose reads only flow into what it writes is deferred instead: it marks
the elements it computes as undefined and becomes a finding only if undefined values reach an
output or steer another instruction (``hwsim.machine.initcheck_flow``).

PSUM also tracks accumulation groups: a TensorE write (``nc_matmul`` with ``accumulate=False``,
or a TensorE ``nc_transpose``) starts one over the bytes it writes, an ``accumulate=True`` matmul
continues it, and a write by another engine ends it. An ``accumulate=True`` matmul into bytes
outside a group is a finding even when they hold data (a memset or a copy left there): the
group's first matmul must start it.

When the run ends, output tensors with bytes nothing wrote are findings too (the host reads
them whole; HBM starts zeroed, so a missed store would pass as zeros). Findings are collected
for the whole run and raised at its end as one ``InitCheckError``, so a user sees every
uninitialised read at once. It is numerics-mode machinery: a timing-only run
computes no values and checks nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hwsim.errors import HwsimError, InitCheckError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction
from hwsim.isa.mx_ops import NcMatmulMx
from hwsim.isa.tensor_ops import NcMatmul
from hwsim.machine.initcheck_flow import FLOWING, UNDEFINED_BYTE, taints, undefined_value
from hwsim.machine.state import (
    MIRROR_DTYPES,
    PSUM_GROUP,
    WRITTEN,
    WRITTEN_BYTE,
    CoreState,
    Hbm,
)

#: Findings spelled out in the error message (all are counted, and kept on the error).
MAX_REPORTED = 20
#: Findings kept on the error object beyond which only the count grows.
MAX_KEPT = 1000

#: The environment variable that turns initcheck on for runs that do not say (``run``'s
#: ``initcheck=None``): "1" on, "0" or unset off. The test suite sets it (tests/conftest.py).
ENV_VAR = "HWSIM_INITCHECK"

#: A mirror element whose bytes are all written, by element size.
_ALL_WRITTEN = {size: np.iinfo(dtype).max for size, dtype in MIRROR_DTYPES.items()}


def enabled(initcheck: bool | None, numerics: bool) -> bool:
    """Whether a run checks: ``initcheck`` if given, else ``HWSIM_INITCHECK``; never without
    numerics (an explicit ``initcheck=True`` with ``numerics=False`` is an error)."""
    if initcheck is None:
        value = os.environ.get(ENV_VAR, "0").strip()
        if value not in ("", "0", "1"):
            raise HwsimError(f"{ENV_VAR}={value!r}: expected 1 (initcheck on) or 0 (off)")
        return value == "1" and numerics
    if initcheck and not numerics:
        raise HwsimError(
            "initcheck=True needs numerics=True: it follows the values a run computes "
            "(a timing-only run computes none)"
        )
    return initcheck


def front_door(initcheck: bool | None, numerics: bool) -> bool:
    """Whether a run made through a kernel front door (``hwsim run``, ``hwsim nki``, calling a
    ``hwsim.lang`` or ``hwsim.nki`` kernel) checks: on by default with numerics, off only when
    asked (``initcheck=False``, ``--no-initcheck``, or ``HWSIM_INITCHECK=0``)."""
    if initcheck is None and not os.environ.get(ENV_VAR, "").strip():
        return numerics
    return enabled(initcheck, numerics)


#: Mirror rows are rounded up to this many bytes (keeps every element view aligned).
_MIRROR_ROW_ALIGN_BYTES = 64


def size_mirrors(state: CoreState, streams: dict[str, list[Instruction]]) -> None:
    """Make the core's SBUF and PSUM mirrors only as wide as the bytes its operands reach.

    One pass over the operands before the run (a few microseconds per instruction, against the
    tens a checked instruction costs anyway); a full-width SBUF mirror would cost a small
    program more than its simulation (24 MiB per trn2 core, allocated per run)."""
    ends = {MemorySpace.SBUF: 0, MemorySpace.PSUM: 0}
    for stream in streams.values():
        for instruction in stream:
            for ap in (*instruction.reads(), *instruction.writes()):
                if ap.memory is not MemorySpace.HBM:
                    end = ap.byte_span()[1]
                    if end > ends[ap.memory]:
                        ends[ap.memory] = end
    align = _MIRROR_ROW_ALIGN_BYTES
    sbuf, psum = (
        -(-max(1, ends[m]) // align) * align for m in (MemorySpace.SBUF, MemorySpace.PSUM)
    )
    state.mirror_bytes_per_partition = (
        min(sbuf, state.sbuf_geometry[1]),
        min(psum, state.psum_geometry[1]),
    )


@dataclass(frozen=True)
class Finding:
    """One instruction operand that read bytes nothing wrote (or accumulated outside a group).

    partitions and byte_range are inclusive bounds of the bytes found (partitions None for HBM);
    bytes_found counts the distinct bytes. never_written: of an accumulation finding, how many
    of its bytes were never written at all.
    """

    core: int
    engine: str
    pc: int
    opcode: str
    tag: str
    operand: str
    memory: str  # "sbuf", "psum" or "hbm tensor 'name'"
    partitions: tuple[int, int] | None
    byte_range: tuple[int, int]
    bytes_found: int
    accumulation: bool = False
    never_written: int = 0

    def message(self) -> str:
        return f"initcheck: {self.describe()}"

    def describe(self) -> str:
        core = f"core {self.core} " if self.core else ""
        tag = f" ({self.tag})" if self.tag else ""
        who = f"{core}{self.engine}[{self.pc}] {self.opcode}{tag}"
        parts = f" partitions {self.partitions[0]}..{self.partitions[1]}" if self.partitions else ""
        where = f"{self.memory}{parts} bytes {self.byte_range[0]}..{self.byte_range[1]}"
        if not self.accumulation:
            return (
                f"{who} reads {self.bytes_found} uninitialised bytes of {where} "
                f"(operand {self.operand})"
            )
        never = f"; {self.never_written} of them never written" if self.never_written else ""
        return (
            f"{who} accumulates into {self.bytes_found} bytes of {where} outside any "
            f"accumulation group (operand {self.operand}{never}): the group's first nc_matmul "
            "must have accumulate=False"
        )


@dataclass(frozen=True)
class UnwrittenOutput:
    """An output tensor with bytes no instruction wrote when the run ended."""

    tensor: str
    byte_range: tuple[int, int]  # inclusive bounds of the unwritten bytes
    bytes_found: int
    nbytes: int

    def message(self) -> str:
        return f"initcheck: {self.describe()}"

    def describe(self) -> str:
        return (
            f"output '{self.tensor}' has {self.bytes_found} of its {self.nbytes} bytes never "
            f"written (bytes {self.byte_range[0]}..{self.byte_range[1]})"
        )


class InitChecker:
    """The findings of one run, and the checked execution of its instructions."""

    def __init__(self) -> None:
        self.findings: list[Finding | UnwrittenOutput] = []
        self.count = 0
        #: Reads of never-written bytes whose values may yet reach an output (``FLOWING``).
        self.deferred: list[Finding | UnwrittenOutput] = []
        self.deferred_count = 0
        #: The outputs undefined values reached (for the message), once known.
        self.reached = ""

    def execute(self, state: CoreState, pc: int, instruction: Instruction) -> None:
        """Check the instruction's reads, execute it, mark what it wrote.

        Initialised HBM tensors (inputs) are skipped: all their bytes count as written from the
        start, so they need no mirror (the largest tensors of a run often are its inputs).
        A ``FLOWING`` instruction's read of never-written (or undefined) bytes is deferred and
        taints what it writes (``hwsim.machine.initcheck_flow``)."""
        tensors = state.hbm.tensors
        accumulating = (
            instruction.dst  # type: ignore[attr-defined]
            if type(instruction) in (NcMatmul, NcMatmulMx) and instruction.accumulate  # type: ignore[attr-defined]
            else None
        )
        flowing = type(instruction) in FLOWING
        undefined: list[tuple[AccessPattern, np.ndarray]] = []
        for ap in instruction.initcheck_reads(state):
            if ap.memory is MemorySpace.HBM and tensors[ap.tensor].initialised:
                continue
            which = PSUM_GROUP if ap is accumulating else WRITTEN
            mirror = state.mirror(ap, which)
            full = _ALL_WRITTEN[ap.dtype.itemsize]
            if mirror.min() == full:
                continue
            if flowing and which == WRITTEN:
                undefined.append((ap, mirror != full))
                if (state.mirror_bytes(ap)[0] == 0).any():  # a root: bytes nothing wrote
                    self._record(state, pc, instruction, ap, which, self.deferred)
            else:  # its values steer it, or go where no flow is followed: a finding now
                self._record(state, pc, instruction, ap, which, self.findings)
                self._promote_deferred()  # with the reads whose values it may have used
        writes = instruction.initcheck_writes(state)
        if accumulating is not None:  # an accumulated element stays as undefined as it was
            prior = state.mirror(accumulating) != _ALL_WRITTEN[accumulating.dtype.itemsize]
            if prior.any():
                undefined.append((accumulating, prior))
        tainted = taints(instruction, writes, undefined) if undefined else None
        instruction.execute(state)
        for index, (ap, mask) in enumerate(writes):
            memory = ap.memory
            if memory is MemorySpace.HBM and tensors[ap.tensor].initialised:
                continue
            written = _ALL_WRITTEN[ap.dtype.itemsize]
            group = written if instruction.engine == "tensor" else 0
            marks: int | np.ndarray = written
            if tainted is not None:
                marks = np.where(tainted[index], undefined_value(ap.dtype.itemsize), written)
            if mask is None:
                state.mirror(ap)[...] = marks
                if memory is MemorySpace.PSUM:  # a TensorE write starts or continues a group
                    state.mirror(ap, PSUM_GROUP).fill(group)
                continue
            state.mirror(ap)[mask] = marks if isinstance(marks, int) else marks[mask]
            if memory is MemorySpace.PSUM:
                state.mirror(ap, PSUM_GROUP)[mask] = group

    def _record(
        self,
        state: CoreState,
        pc: int,
        instruction: Instruction,
        ap: AccessPattern,
        which: int,
        into: list[Finding | UnwrittenOutput],
    ) -> None:
        if into is self.findings:
            self.count += 1
        else:
            self.deferred_count += 1
        if len(into) >= MAX_KEPT:
            return
        partitions, byte_range, found = _missing_bytes(state, ap, which, into is self.deferred)
        never = _missing_bytes(state, ap, WRITTEN, True)[2] if which == PSUM_GROUP else 0
        memory = f"hbm tensor '{ap.tensor}'" if ap.memory is MemorySpace.HBM else ap.memory.value
        into.append(
            Finding(
                state.core,
                instruction.engine,
                pc,
                instruction.OPCODE,
                instruction.tag,
                _operand_name(instruction, ap),
                memory,
                partitions,
                byte_range,
                found,
                which == PSUM_GROUP,
                never,
            )
        )

    def check_outputs(self, hbm: Hbm, outputs: list[str]) -> None:
        """After the run: bytes of output tensors that nothing wrote (the host reads them all;
        HBM starts zeroed, so a missed store would pass as zeros), and bytes computed from
        never-written ones, which make the deferred reads findings."""
        undefined = []
        for name in outputs:
            tensor = hbm.tensors[name]
            if tensor.initialised or tensor.written.min() == WRITTEN_BYTE:
                continue
            tainted = np.flatnonzero(tensor.written == UNDEFINED_BYTE)
            if tainted.size:
                undefined.append(f"'{name}' (bytes {tainted[0]}..{tainted[-1]})")
        if undefined:
            self.reached = ", ".join(undefined)
            self._promote_deferred()
        for name in outputs:
            tensor = hbm.tensors[name]
            if tensor.initialised or tensor.written.min() == WRITTEN_BYTE:
                continue
            missing = np.flatnonzero(tensor.written == 0)
            if missing.size:
                self.count += 1
                self.findings.append(
                    UnwrittenOutput(
                        name, (int(missing[0]), int(missing[-1])), int(missing.size), tensor.nbytes
                    )
                )

    def _promote_deferred(self) -> None:
        """The deferred reads are findings: their values reached an output, or the run stopped."""
        self.findings.extend(self.deferred[: max(0, MAX_KEPT - len(self.findings))])
        self.count += self.deferred_count
        self.deferred, self.deferred_count = [], 0

    def raise_if_findings(self, stopped_by: BaseException | None = None) -> None:
        """Raise InitCheckError listing the findings (if any). ``stopped_by``: an error that
        ended the run early, which the uninitialised reads before it may explain."""
        if stopped_by is not None:
            self._promote_deferred()
        if not self.count:
            return
        shown = "; ".join(f.describe() for f in self.findings[:MAX_REPORTED])
        more = self.count - min(len(self.findings), MAX_REPORTED)
        tail = f" (+{more} more)" if more else ""
        reached = f"; values read from them reach output {self.reached}" if self.reached else ""
        stop = f"; then the run stopped: {stopped_by}" if stopped_by is not None else ""
        raise InitCheckError(
            f"initcheck: {self.count} finding(s): {shown}{tail}{reached}{stop}",
            list(self.findings),
        )


def _missing_bytes(
    state: CoreState, ap: AccessPattern, which: int, never_only: bool = False
) -> tuple[tuple[int, int] | None, tuple[int, int], int]:
    """(partition range or None for HBM, byte range, distinct byte count) of the operand's bytes
    whose mirror is not set (written from undefined values counts, unless ``never_only``).
    Only on a finding: it lists every byte."""
    view, first_byte, row_bytes = state.mirror_bytes(ap, which)
    index = np.nonzero(view == 0 if never_only else view != WRITTEN_BYTE)
    address = np.full(index[0].shape, first_byte, dtype=np.int64)
    for axis, stride in zip(index, view.strides, strict=True):
        address += axis.astype(np.int64) * stride
    address = np.unique(address)
    if not address.size:
        return None, (0, 0), 0
    if not row_bytes:
        return None, (int(address[0]), int(address[-1])), int(address.size)
    partition, byte = np.divmod(address, row_bytes)
    return (
        (int(partition[0]), int(partition[-1])),
        (int(byte.min()), int(byte.max())),
        int(address.size),
    )


def _operand_name(instruction: Instruction, ap: AccessPattern) -> str:
    """The field holding ``ap`` (or, for a derived pattern like a gathered row, the first
    operand on the same memory and tensor)."""
    operands = instruction.operand_names()
    for name, operand in operands.items():
        if operand is ap:
            return name
    for name, operand in operands.items():
        if operand.memory is ap.memory and operand.tensor == ap.tensor:
            return name
    return "?"

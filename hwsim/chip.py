"""Programs of several NeuronCores: one program per core merged into one run, or one SPMD
program built once per core.

A multi-core ``Program`` has one ``CoreProgram`` per core; its HBM tensors are the chip's (a run
may span the chips of an instance, ``hwsim.machine.simulator.run``). Merging per-core programs
decides which tensors the cores share: those named in ``shared`` are one tensor (inputs every
core reads, an output every core writes part of); every other tensor stays its core's own, renamed
``c<k>.<name>`` where two programs use one name, and counted on its core's HBM stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hwsim.errors import IllegalInstructionError
from hwsim.isa.ap import MemorySpace
from hwsim.isa.base import Instruction
from hwsim.program import CoreProgram, HbmTensorDecl, Program

#: ``Program.meta`` key: HBM tensor name -> the program core whose HBM stack holds it (the
#: simulator counts its bytes there; tensors not listed are on the first stack).
TENSOR_CORES = "tensor_cores"


def merge_programs(programs: Sequence[Program], shared: Iterable[str] = ()) -> Program:
    """One program whose core k runs ``programs[k]`` (each of one core). Tensors named in
    ``shared`` are one tensor (their declarations must agree in shape and dtype; the first
    with values gives them); other names met twice are renamed in the later programs."""
    shared = set(shared)
    for k, program in enumerate(programs):
        if len(program.cores) != 1:
            raise IllegalInstructionError(
                f"merge_programs: program {k} has {len(program.cores)} cores; give programs of one"
            )
    merged = Program(cores=[], meta={**programs[0].meta, "cores": len(programs)})
    for k, program in enumerate(programs):
        renames: dict[str, str] = {}
        for name, decl in program.hbm.items():
            if name in shared:
                _share(merged, decl, k)
                continue
            new = name if name not in merged.hbm else f"c{k}.{name}"
            if new in merged.hbm:
                raise IllegalInstructionError(f"merge_programs: tensor name '{new}' is taken")
            if new != name:
                renames[name] = new
            merged.hbm[new] = dataclasses.replace(decl, name=new)
            merged.meta.setdefault(TENSOR_CORES, {})[new] = k
        merged.cores.append(_renamed(program.cores[0], renames))
        merged.allocations.extend(dataclasses.replace(a, core=k) for a in program.allocations)
    return merged


def spmd(build_core: Callable[[int], Program], cores: int, shared: Iterable[str] = ()) -> Program:
    """One SPMD program over ``cores`` cores: ``build_core(k)`` builds core k's (each may read
    its core index, like NKI's ``program_id``), merged by ``merge_programs``."""
    return merge_programs([build_core(k) for k in range(cores)], shared)


def _share(merged: Program, decl: HbmTensorDecl, core: int) -> None:
    found = merged.hbm.get(decl.name)
    if found is None:
        merged.hbm[decl.name] = dataclasses.replace(decl)
        return
    if (found.shape, found.dtype) != (decl.shape, decl.dtype):
        raise IllegalInstructionError(
            f"merge_programs: shared tensor '{decl.name}' is {found.shape} {found.dtype.name} on "
            f"core 0 but {decl.shape} {decl.dtype.name} on core {core}"
        )
    kind = "output" if "output" in (found.kind, decl.kind) else found.kind
    values = found.values if found.values is not None else decl.values
    merged.hbm[decl.name] = dataclasses.replace(found, kind=kind, values=values)


def _renamed(core: CoreProgram, renames: dict[str, str]) -> CoreProgram:
    """The core's streams with HBM operands of renamed tensors pointing at their new names
    (instructions touching none are kept as they are)."""
    if not renames:
        return CoreProgram({engine: list(stream) for engine, stream in core.streams.items()})
    return CoreProgram(
        {
            engine: [_rename(instruction, renames) for instruction in stream]
            for engine, stream in core.streams.items()
        }
    )


def _rename(instruction: Instruction, renames: dict[str, str]) -> Instruction:
    changes: dict[str, Any] = {}
    for name, ap in instruction.operand_names().items():
        if ap.memory is MemorySpace.HBM and ap.tensor in renames:
            changes[name] = dataclasses.replace(ap, tensor=renames[ap.tensor])
    return dataclasses.replace(instruction, **changes) if changes else instruction

"""The engines of a NeuronCore as data: one registry of engine specs, in hardware order.

Everything that depends on which engines exist reads it from here: the instruction streams of a
program, legality (which memories an engine may read and write), the time base (engine clocks),
shared ports (``SharedPort``), trace tracks and labels, profiler names, tables, plots and the
summary. Adding an engine is one ``register_engine`` call (plus its config section, or an
existing section to take its clock and costs from); nothing else names the set of engines.

A chip of N cores is N copies of these engines (keyed by core wherever state is kept); DMA
engines and queues are not sequencers and live in ``hwsim.machine.dma``. Each core's collective
engine (its CC cores) runs the collectives its rank takes part in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from hwsim.registry import add_unique

if TYPE_CHECKING:
    from hwsim.config.schema import HardwareConfig

#: Memory names as ``hwsim.isa.ap.MemorySpace`` values (a StrEnum: its members compare and hash as
#: these strings). Plain strings keep this module free of imports: everything imports it.
HBM, SBUF, PSUM = "hbm", "sbuf", "psum"

EngineKind = Literal["tensor", "compute", "sequencer", "collective"]


@dataclass(frozen=True)
class EngineSpec:
    """One engine of a NeuronCore.

    name:            the name streams, instructions and traces use ("vector").
    kind:            "tensor" (TensorE), "compute" (VectorE-like: costed by its config section's
                     compute rules), "sequencer" (Sync: triggers DMAs only) or "collective" (the
                     CC cores: collectives over the topology, ``hwsim.machine.collectives``).
    clock_section:   the config section whose ``clock_mhz`` clocks it (Sync runs on ScalarE's).
    cost_section:    the config section its compute costs come from (compute engines), or None.
    reads / writes:  the memories its instructions may read and write (HARDWARE.md §1.4); PSUM
                     access of a compute engine is further gated by its section's
                     ``can_access_psum``.
    label:           display name in traces, tables, plots and verdicts ("VectorE").
    profiler_name:   Neuron Explorer's engine name ("Vector", HARDWARE.md §6).
    shown_when_idle: listed in summaries and traces of runs that gave it no instruction (the
                     collective engine is not: a one-core run's outputs stay as they were).
    """

    name: str
    kind: EngineKind
    clock_section: str
    cost_section: str | None
    reads: frozenset[str]
    writes: frozenset[str]
    label: str
    profiler_name: str
    shown_when_idle: bool = True


@dataclass(frozen=True)
class SharedPort:
    """A memory port that several engines cannot use at once (NeuronCore-v2 restrictions,
    HARDWARE.md §1.4 [S1]): an instruction of one of ``engines`` that touches ``memory`` holds
    the port for its issue interval when the config flag ``config_flag`` (dotted path) is true."""

    name: str
    engines: frozenset[str]
    memory: str
    config_flag: str

    def active(self, config: HardwareConfig) -> bool:
        value: Any = config
        for part in self.config_flag.split("."):
            value = getattr(value, part)
        return bool(value)


_ENGINES: dict[str, EngineSpec] = {}
_PORTS: dict[str, SharedPort] = {}


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Add an engine after those registered so far (hardware order); duplicates are errors."""
    return add_unique(_ENGINES, spec.name, spec, "engine")


def unregister_engine(name: str) -> None:
    """Remove an engine registered by a test or plug-in (built-in engines stay)."""
    if name in BUILTIN_ENGINES or name == COLLECTIVE_ENGINE:
        raise ValueError(f"engine '{name}' is built in")
    _ENGINES.pop(name, None)


def register_port(port: SharedPort) -> SharedPort:
    return add_unique(_PORTS, port.name, port, "shared port")


def engine_names() -> tuple[str, ...]:
    """Every engine, in hardware (profiler) order."""
    return tuple(_ENGINES)


def engine_spec(name: str) -> EngineSpec:
    spec = _ENGINES.get(name)
    if spec is None:
        raise KeyError(f"unknown engine '{name}'; engines are {', '.join(_ENGINES)}")
    return spec


def find_engine(name: str) -> EngineSpec | None:
    return _ENGINES.get(name)


def engines_of_kind(*kinds: EngineKind) -> tuple[str, ...]:
    return tuple(name for name, spec in _ENGINES.items() if spec.kind in kinds)


def sequencer_engines() -> tuple[str, ...]:
    """The engines that run a NeuronCore's instruction streams and may trigger DMAs: every
    engine but the collective ones."""
    return tuple(name for name, spec in _ENGINES.items() if spec.kind != "collective")


def shared_ports() -> tuple[SharedPort, ...]:
    return tuple(_PORTS.values())


def engine_label(name: str) -> str:
    spec = _ENGINES.get(name)
    return spec.label if spec is not None else name


def profiler_name(name: str) -> str:
    spec = _ENGINES.get(name)
    return spec.profiler_name if spec is not None else name


_ON_CHIP = frozenset({SBUF, PSUM})
_SBUF = frozenset({SBUF})

for _spec in (
    EngineSpec("tensor", "tensor", "tensor_engine", None, _SBUF, frozenset({PSUM}),
               "TensorE", "Tensor"),
    EngineSpec("vector", "compute", "vector_engine", "vector_engine", _ON_CHIP, _ON_CHIP,
               "VectorE", "Vector"),
    EngineSpec("scalar", "compute", "scalar_engine", "scalar_engine", _ON_CHIP, _ON_CHIP,
               "ScalarE", "Scalar"),
    EngineSpec("gpsimd", "compute", "gpsimd_engine", "gpsimd_engine", _ON_CHIP, _ON_CHIP,
               "GpSimdE", "GpSimd"),
    EngineSpec("sync", "sequencer", "scalar_engine", None, frozenset(), frozenset(),
               "Sync", "Sync"),
):  # fmt: skip
    register_engine(_spec)

register_port(
    SharedPort(
        "sbuf.vector_gpsimd",
        frozenset({"vector", "gpsimd"}),
        SBUF,
        "sbuf.vector_gpsimd_share_access",
    )
)
register_port(
    SharedPort(
        "psum.vector_scalar",
        frozenset({"vector", "scalar"}),
        PSUM,
        "psum.vector_scalar_share_access",
    )
)

#: The engines this module defines, in hardware order (a test's or plug-in's registrations come
#: after them): the one list of engine names (the kernel language's ``tensor_engine``, ... and NKI's
#: ``nki.isa.engine`` take theirs from it).
BUILTIN_ENGINES = tuple(_ENGINES)

#: The collective engine of a core: the CC cores that run its rank's collectives, timed on the
#: topology (HARDWARE.md §1.1 "CC-Cores", §1.2 [S32]). Its clock is the sequencers'.
COLLECTIVE_ENGINE = "collective"
register_engine(
    EngineSpec(COLLECTIVE_ENGINE, "collective", "scalar_engine", None,
               frozenset({HBM, SBUF}), frozenset({HBM, SBUF}), "CollectiveE", "CC",
               shown_when_idle=False)
)  # fmt: skip

"""The config sections of many NeuronCores: the links between cores, chips and instances, and how
collectives run over them (``topology``, ``collectives``).

Where ranks sit: physical cores are numbered chip by chip (cores ``c * cores_per_chip`` ..
``(c + 1) * cores_per_chip - 1`` are chip ``c``), chips instance by instance
(``topology.chips_per_instance`` a chip), and a core's HBM stack is ``core // hbm.cores_per_stack``
within its chip. A rank of ``torch.distributed`` is a logical NeuronCore: ``chip.
cores_per_logical_core`` consecutive physical cores.

Bandwidths are per direction. A published per-chip figure counts every link in both directions, so
a link's bandwidth per direction is that figure over ``links_per_chip x 2``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Latency = Annotated[float, Field(ge=0, le=10_000_000)]
Bandwidth = Annotated[float, Field(ge=0.001, le=100_000)]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class LinkConfig(_Section):
    """One kind of link: what a transfer over one hop of it costs."""

    bandwidth_bytes_per_ns: Bandwidth = Field(
        description="bandwidth of one link in one direction, bytes/ns (= GB/s)"
    )
    hop_latency_ns: Latency = Field(
        description="fixed cost of one algorithm step over the link (synchronisation, DMA "
        "start, the wire), ns"
    )


class TopologyConfig(_Section):
    """How the chips of an instance, and instances, are connected."""

    chips_per_instance: Annotated[int, Field(ge=1, le=4096)] = Field(
        description="chips joined by chip-to-chip links in one instance (or UltraServer)"
    )
    chip_interconnect: Literal["ring", "torus2d", "switch"] = Field(
        description="how the chips of an instance are wired: a ring, a 2-D torus "
        "(torus_rows x chips_per_instance / torus_rows), or a switch (every pair one hop)"
    )
    torus_rows: Annotated[int, Field(ge=1, le=4096)] = Field(
        description="rows of the 2-D torus (chip_interconnect torus2d); it must divide "
        "chips_per_instance"
    )
    links_per_chip: Annotated[int, Field(ge=1, le=64)] = Field(
        description="chip-to-chip links of one chip"
    )
    intra_chip: LinkConfig = Field(
        description="between the cores of one chip (their collective traffic runs on the "
        "cores' DMA engines through HBM); bandwidth per core"
    )
    chip_to_chip: LinkConfig = Field(description="one chip-to-chip link (NeuronLink)")
    instance_to_instance: LinkConfig = Field(
        description="between instances (EFA); bandwidth per chip"
    )
    remote_semaphore_ns: Latency = Field(
        description="from an instruction signalling a semaphore of another core of the chip "
        "to the increment landing there, ns"
    )


CollectiveAlgorithm = Literal["auto", "ring", "mesh", "rdh", "kangaring"]


class CollectivesConfig(_Section):
    """How the collective-communication cores (CC cores) run a collective."""

    algorithm: CollectiveAlgorithm = Field(
        description="ring, mesh, rdh (recursive halving-doubling) or kangaring; auto: the "
        "fastest of those that apply to the group, as the runtime picks by message size"
    )
    launch_ns: Latency = Field(
        description="fixed cost of starting a collective on the CC cores, once all ranks "
        "have arrived, ns"
    )
    hbm_touches_per_copy_byte: Annotated[int, Field(ge=0, le=16)] = Field(
        description="HBM accesses per byte a step forwards (1 read + 1 write); the stack's "
        "bandwidth, shared by its cores, bounds a step (0: HBM does not bound it)"
    )
    hbm_touches_per_reduce_byte: Annotated[int, Field(ge=0, le=16)] = Field(
        description="HBM accesses per byte a reducing step moves (2 reads + 1 write)"
    )

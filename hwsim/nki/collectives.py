"""``nki.collectives`` on the simulator: collectives between the ranks of a multi-rank run.

A kernel run with ``ranks=N`` (``nki.simulate(kernel, ranks=4)(...)``, ``hwsim.nki.run(kernel,
..., ranks=4)``) is built once per rank, rank r on physical core r
of the config's instance, and the builds run as one program: ``rank_id()`` is the rank being
built, and each collective here is the kernel language's ``collective`` instruction on that
core's collective engine (``hwsim.isa.multicore_ops.Collective``), timed by the topology's cost
model (``hwsim.cost.collectives``: the ring and its alternatives over the intra-chip, chip-to-chip
and instance links). A rank's arguments are the run's, or its own where an argument is
``hwsim.nki.per_rank([...])``.

What the NKI API reference documents and this accepts: ``srcs``/``dsts`` lists of tensors (a
coalesced list runs as one collective per pair here, each paying the collective's launch),
``collective_dim`` 0 (row-major concatenation, as on HBM), reductions with ``nl.add``,
``nl.maximum`` and ``nl.minimum`` (in fp32, in rank order), ``priority`` and ``name`` (accepted;
quality of service is a NeuronCore-v4 feature the cost model does not take).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hwsim.isa.multicore_ops import CollectiveKind
from hwsim.nki import tensor as nt
from hwsim.nki.isa_ops import alu_op
from hwsim.nki.state import state


class rg_partition_op(enum.Enum):  # NKI's name
    """How ``ReplicaGroup.from_partition_op`` maps a rank to its rank-list's id."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


_PARTITION = {
    rg_partition_op.bitwise_and: lambda rank, operand: rank & operand,
    rg_partition_op.div: lambda rank, operand: rank // operand,
    rg_partition_op.mod: lambda rank, operand: rank % operand,
}


@dataclass
class ReplicaGroup:
    """The ranks a collective runs on, as rank-lists: it runs independently within each list,
    all lists in parallel; a rank is in at most one list (``ReplicaGroup([[0, 1], [2, 3]])``)."""

    rank_lists: list[list[int]]

    def __post_init__(self) -> None:
        lists = [[int(rank) for rank in ranks] for ranks in self.rank_lists]
        seen: set[int] = set()
        for ranks in lists:
            if not ranks:
                raise nt.fail("ReplicaGroup", f"{self.rank_lists}: an empty rank-list")
            repeated = seen.intersection(ranks) or {r for r in ranks if ranks.count(r) > 1}
            if repeated:
                raise nt.fail(
                    "ReplicaGroup",
                    f"{self.rank_lists}: rank {min(repeated)} is in more than one place; each "
                    "rank takes part in one rank-list",
                )
            seen.update(ranks)
        self.rank_lists = lists

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> ReplicaGroup:
        """Ranks ``0 .. world_size - 1`` grouped by ``op(rank, operand)`` (lists in order of
        that id): ``div`` 4 of 8 gives [[0..3], [4..7]], ``mod`` 4 gives [[0, 4], [1, 5], ...]."""
        by_id: dict[int, list[int]] = {}
        for rank in range(int(world_size)):
            by_id.setdefault(_PARTITION[rg_partition_op(op)](rank, int(operand)), []).append(rank)
        return ReplicaGroup([by_id[key] for key in sorted(by_id)])

    def members_of(self, rank: int, call: str) -> list[int]:
        """The rank-list ``rank`` is in."""
        for ranks in self.rank_lists:
            if rank in ranks:
                return ranks
        raise nt.fail(call, f"rank {rank} is in no rank-list of {self.rank_lists}")


def rank_id(name: str | None = None) -> int:
    """The rank this build is for (0 .. ranks - 1 of the run)."""
    return state().rank


def self_index_in_replica_group(replica_group: ReplicaGroup, name: str | None = None) -> int:
    """This rank's position within its own rank-list of ``replica_group``."""
    rank = state().rank
    return replica_group.members_of(rank, "self_index_in_replica_group").index(rank)


def all_reduce(
    srcs: Sequence[Any],
    dsts: Sequence[Any],
    replica_group: ReplicaGroup,
    op: Any,
    priority: int | None = None,
    name: str | None = None,
) -> None:
    """Every rank of a rank-list gets the elementwise ``op`` of their srcs."""
    _run("all_reduce", srcs, dsts, replica_group, 0, op)


def reduce_scatter(
    srcs: Sequence[Any],
    dsts: Sequence[Any],
    replica_group: ReplicaGroup,
    collective_dim: int,
    op: Any,
    priority: int | None = None,
    name: str | None = None,
) -> None:
    """Rank i of a rank-list gets chunk i of the elementwise ``op`` of their srcs."""
    _run("reduce_scatter", srcs, dsts, replica_group, collective_dim, op)


def _moving(kind: str, doc: str) -> Callable[..., None]:
    """A collective that moves values along ``collective_dim`` without reducing them (NKI's
    all_gather and all_to_all take the same arguments)."""

    def collective(
        srcs: Sequence[Any],
        dsts: Sequence[Any],
        replica_group: ReplicaGroup,
        collective_dim: int,
        priority: int | None = None,
        name: str | None = None,
    ) -> None:
        _run(kind, srcs, dsts, replica_group, collective_dim)

    collective.__name__ = collective.__qualname__ = kind
    collective.__doc__ = doc
    return collective


all_gather = _moving(
    "all_gather", "Every rank of a rank-list gets their srcs concatenated in rank order."
)
all_to_all = _moving("all_to_all", "Rank i's dst chunk j is rank j's src chunk i.")


def collective_permute(
    srcs: Sequence[Any],
    dsts: Sequence[Any],
    source_target_pairs: Sequence[tuple[int, int]],
    priority: int | None = None,
    name: str | None = None,
) -> None:
    """Each pair (source, target): source's src lands in target's dst. The ranks the pairs name
    take part, each sending once and receiving once (a permutation of them); a rank they do
    not name does nothing."""
    call = "collective_permute"
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    ranks = sorted({r for pair in pairs for r in pair})
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    if sorted(sources) != ranks or sorted(targets) != ranks:
        raise nt.fail(
            call,
            f"source_target_pairs {pairs}: each rank named must send once and receive once "
            "(hwsim runs a permute as one exchange among the ranks it names)",
        )
    rank = state().rank
    if rank not in ranks:
        return
    send_to = ranks.index(targets[sources.index(rank)])
    recv_from = ranks.index(sources[targets.index(rank)])
    for src, dst in _pairs(srcs, dsts, call):
        _emit(call, "permute", dst, src, ranks, send_to=send_to, recv_from=recv_from)


def _run(
    kind: str,
    srcs: Sequence[Any],
    dsts: Sequence[Any],
    replica_group: Any,
    collective_dim: int,
    op: Any = None,
) -> None:
    if not isinstance(replica_group, ReplicaGroup):
        raise nt.fail(
            kind, f"replica_group={replica_group!r}: give an nki.collectives.ReplicaGroup"
        )
    if int(collective_dim) != 0:
        raise nt.fail(
            kind,
            f"collective_dim={collective_dim}: hwsim concatenates and splits along dim 0 "
            "(row-major order), the one dimension NKI supports on HBM",
        )
    ranks = replica_group.members_of(state().rank, kind)
    reduce = {} if op is None else {"op": alu_op(op, kind)}
    for src, dst in _pairs(srcs, dsts, kind):
        _emit(kind, kind, dst, src, ranks, **reduce)


def _pairs(srcs: Sequence[Any], dsts: Sequence[Any], call: str) -> list[tuple[Any, Any]]:
    srcs, dsts = list(srcs), list(dsts)
    if not srcs or len(srcs) != len(dsts):
        raise nt.fail(
            call, f"{len(srcs)} srcs and {len(dsts)} dsts: give lists of the same, nonzero length"
        )
    return list(zip(srcs, dsts, strict=True))


def _emit(call: str, kind: str, dst: Any, src: Any, ranks: list[int], **fields: Any) -> None:
    from hwsim.lang.isa_multicore import collective

    rank = state().rank
    collective(
        CollectiveKind(kind), nt.dst(dst, call=call), nt.src(src, call=call),
        group=tuple(ranks), rank=ranks.index(rank), **fields,
    )  # fmt: skip


#: The documented calls this simulator does not run, and why.
UNSUPPORTED = {
    "all_to_all_v": "counts known only at run time (its metadata tensor)",
    "all_gather_v": "counts known only at run time (its metadata tensor)",
    "collective_permute_implicit": "the runtime's ring iteration",
    "collective_permute_implicit_reduce": "the runtime's ring iteration",
    "collective_permute_implicit_current_processing_rank_id": "the runtime's ring iteration",
}


def __getattr__(name: str) -> Any:
    """An NKI name this simulator lacks: calling it is one clear error naming the kernel line."""
    hint = "; all_reduce, all_gather, reduce_scatter, all_to_all and collective_permute run"
    return nt.unsupported_name("collectives", "nki.collectives", UNSUPPORTED, name, hint)

"""The ``"hwsim"`` process group: exact collectives, timed on each rank's simulated clock.

Every collective gathers each rank's tensor (as numpy, in rank order) through the group's fabric
(``fabric.fabric_for``) together with the rank's arrival tick and the collective's modelled
duration (``CostModel.collectives``: the same cost the simulator's collective instructions take),
then every rank computes its result from the same inputs in the same order: reductions in fp32
(fp64 for fp64 tensors, int64 for integers), rank 0 first, as the simulator's ``Collective``
does (ranks on threads of one process compute a reduction once for all:
``shared_reduction``). The returned ``Work`` is complete; its ``wait()`` makes the rank's
compute wait for the collective's simulated end (``clock.RankClock``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    ReduceOp,
    ReduceScatterOptions,
)
from torch.futures import Future

from hwsim.bridge.distributed import api
from hwsim.bridge.distributed.clock import (
    CollectiveRun,
    RankClock,
    current_clock,
    in_reference_run,
    set_current,
)
from hwsim.bridge.distributed.fabric import fabric_for
from hwsim.bridge.distributed.shared_reduction import reduced_once
from hwsim.errors import HwsimError
from hwsim.machine.collectives import Arrival
from hwsim.machine.thread_fabric import ThreadFabric

_OPS: Any = ReduceOp.RedOpType  # its members are pybind attributes the stubs do not list
_REDUCE: dict[Any, Callable[..., Any]] = {
    _OPS.SUM: np.add,
    _OPS.AVG: np.add,
    _OPS.MAX: np.maximum,
    _OPS.MIN: np.minimum,
    _OPS.PRODUCT: np.multiply,
}


class SimWork(dist._Work):
    """A collective already computed; waiting on it makes the rank's compute wait for its
    simulated end."""

    def __init__(self, clock: RankClock, end_tick: int, result: list[torch.Tensor]) -> None:
        super().__init__()
        self.clock, self.end_tick, self._result = clock, end_tick, result

    def wait(self, timeout: Any = None) -> bool:
        self.clock.wait_until(self.end_tick)
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._result

    def get_future(self) -> Future:
        future: Future = Future()
        future.set_result(self._result)
        return future


def _reduce_dtype(tensor: torch.Tensor) -> torch.dtype:
    if tensor.is_floating_point():
        return torch.float64 if tensor.dtype == torch.float64 else torch.float32
    if tensor.is_complex():
        raise HwsimError(f"hwsim collectives: complex tensors ({tensor.dtype}) are not supported")
    return torch.int64


def _bytes_of(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes (row-major), for collectives that only move data."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


def _from_bytes(data: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    flat = torch.from_numpy(np.ascontiguousarray(data)).view(like.dtype)
    return flat.reshape(like.shape)


_COLLECTIVE_METHODS = (
    "allreduce", "allreduce_coalesced", "broadcast", "scatter", "gather", "barrier",
    "all_gather_single", "allgather", "all_gather_single_coalesced", "reduce_scatter_single",
    "reduce_scatter", "reduce_scatter_single_coalesced", "all_to_all_single", "alltoall",
)  # fmt: skip


def _never_traced(cls: type) -> type:
    """Dynamo never traces the group's collectives: C++ calls them from inside a compiled
    module's call too (DDP's reducer broadcasts its rebuilt buckets from ``DDP.forward``'s
    pre-forward, under ``torch.compile``'s frame hook), and a traced collective would be a graph
    of an opaque process group, not a collective run on every rank."""
    for name in _COLLECTIVE_METHODS:
        setattr(cls, name, torch._dynamo.disable(getattr(cls, name), recursive=True))
    return cls


@_never_traced
class HwsimProcessGroup(dist.ProcessGroup):
    """One rank's view of a group of ranks on simulated NeuronCores (module docstring)."""

    def __init__(
        self,
        rank: int,
        size: int,
        global_ranks: Sequence[int],
        fabric: Any,
        clock: RankClock,
    ) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the Python-group form
        self._rank, self._size = rank, size
        self.fabric, self.clock = fabric, clock
        self.cores = tuple(g * clock.cores_per_rank for g in global_ranks)
        self._seq = itertools.count()
        self._last_seq = -1  # the number of the collective exchanged last

    @property
    def group_name(self) -> str:  # type: ignore[override]
        """The name torch.distributed registered this group under (device meshes, DTensor and
        the functional collectives find groups by it)."""
        name: str = dist.distributed_c10d._world.pg_names[self]
        return name

    @property
    def pg_name(self) -> str:
        return self.group_name

    def getBackendName(self) -> str:
        return "hwsim"

    def __repr__(self) -> str:
        return f"HwsimProcessGroup(rank={self._rank}, size={self._size}, cores={self.cores})"

    # ---- the one exchange every collective goes through ------------------------------------

    def _exchange(
        self, kind: str, nbytes: int, values: np.ndarray, what: str, *, copy: bool = True
    ) -> tuple[list[np.ndarray], int]:
        """Every rank's ``values`` in rank order, and the collective's simulated end tick.
        ``copy``: the other ranks may read ``values`` after this rank overwrote its tensor."""
        clock = self.clock
        cost = clock.model.collectives.of(kind, nbytes, self.cores, clock.cores_per_rank)  # type: ignore[arg-type]
        duration = clock.model.timebase.ns_to_ticks(cost.duration_ns)
        seq = next(self._seq)
        self._last_seq = seq
        arrival = clock.arrival()
        if copy:
            values = values.copy()
        got: list[Any] = []
        if in_reference_run():  # a check's CPU reference: exact values, no time
            self.fabric.join(Arrival((self.cores, seq), f"reference {kind} of {what}", self._rank,
                                     self._size, arrival, 0, values, got.append))  # fmt: skip
            return got[0].sources, clock.now
        self.fabric.join(
            Arrival(
                (self.cores, seq), f"{kind} of {what}", self._rank, self._size, arrival, duration,
                values, got.append,
            )
        )  # fmt: skip
        [release] = got
        clock.collective_ran(
            CollectiveRun(
                kind, cost.algorithm, nbytes, self.cores, self._rank, seq, clock.step, arrival,
                release.start, release.end, dict(cost.link_bytes), cost.hbm_bytes,
            )
        )  # fmt: skip
        assert release.sources is not None
        return release.sources, release.end

    def _work(self, end: int, result: list[torch.Tensor]) -> SimWork:
        return SimWork(self.clock, end, result)

    def _reduced(
        self, kind: str, nbytes: int, tensor: torch.Tensor, op: Any
    ) -> tuple[np.ndarray, int]:
        """The elementwise reduction of every rank's ``tensor`` (flat, in its reduce dtype)."""
        op = getattr(op, "op", op)  # a ReduceOp holds its RedOpType
        if op not in _REDUCE:
            raise HwsimError(f"hwsim collectives: reduce op {op} is not supported (sum, avg, "
                             "max, min, product are)")  # fmt: skip
        wide = tensor.detach().to(_reduce_dtype(tensor)).contiguous().reshape(-1).numpy()
        what = f"{nbytes} B {tensor.dtype} {op}"
        threads = isinstance(self.fabric, ThreadFabric)  # one result for every rank's thread
        sources, end = self._exchange(kind, nbytes, wide, what, copy=not threads)

        def combine() -> np.ndarray:
            total = sources[0].copy()
            for values in sources[1:]:
                _REDUCE[op](total, values, out=total)
            return total / self._size if op == _OPS.AVG else total

        if not threads:
            return combine(), end
        return reduced_once((id(self.fabric), self.cores, self._last_seq), self._size, combine), end

    # ---- collectives ------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SimWork:  # type: ignore[override]
        op = (opts or AllreduceOptions()).reduceOp
        flat = (
            torch.cat([t.detach().reshape(-1) for t in tensors]) if len(tensors) > 1 else tensors[0]
        )
        nbytes = flat.numel() * flat.element_size()
        total, end = self._reduced("all_reduce", nbytes, flat, op)
        result = torch.from_numpy(np.ascontiguousarray(total))
        offset = 0
        for t in tensors:
            n = t.numel()
            t.detach().copy_(result[offset : offset + n].reshape(t.shape))
            offset += n
        return self._work(end, tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> SimWork:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> SimWork:  # type: ignore[override]
        root = (opts or BroadcastOptions()).rootRank
        end = 0
        for t in tensors:
            nbytes = t.numel() * t.element_size()
            sources, end = self._exchange("broadcast", nbytes, _bytes_of(t), f"{nbytes} B")
            t.detach().copy_(_from_bytes(sources[root], t))
        return self._work(end, tensors)

    def scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> SimWork:
        """Rank ``root``'s chunk k to rank k: timed as an all-gather of one chunk (the root
        sends N - 1 chunks, as each rank of a ring all-gather does)."""
        root = opts.rootRank
        [out] = outputs
        nbytes = out.numel() * out.element_size()
        if self._rank == root:
            send = np.concatenate([_bytes_of(chunk) for chunk in inputs[0]])
        else:
            send = np.zeros(nbytes * self._size, np.uint8)
        sources, end = self._exchange("all_gather", nbytes, send, f"scatter {nbytes} B")
        mine = np.split(sources[root], self._size)[self._rank]
        out.detach().copy_(_from_bytes(mine, out))
        return self._work(end, [out])

    def gather(  # type: ignore[override]
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimWork:
        """Every rank's input to rank ``root``: timed as an all-gather of one input."""
        root = opts.rootRank
        [input] = inputs
        nbytes = input.numel() * input.element_size()
        sources, end = self._exchange("all_gather", nbytes, _bytes_of(input), f"gather {nbytes} B")
        if self._rank == root:
            for out, data in zip(outputs[0], sources, strict=True):
                out.detach().copy_(_from_bytes(data, out))
        return self._work(end, [t for outs in outputs for t in outs])

    def barrier(self, opts: Any = None) -> SimWork:
        return self.allreduce([torch.zeros(1)])

    def all_gather_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> SimWork:
        nbytes = input.numel() * input.element_size()
        sources, end = self._exchange("all_gather", nbytes, _bytes_of(input), f"{nbytes} B")
        gathered = np.concatenate(sources)
        output.detach().copy_(_from_bytes(gathered, output))
        return self._work(end, [output])

    def allgather(  # type: ignore[override]
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimWork:
        end = 0
        for outs, input in zip(outputs, inputs, strict=True):
            nbytes = input.numel() * input.element_size()
            sources, end = self._exchange("all_gather", nbytes, _bytes_of(input), f"{nbytes} B")
            for out, data in zip(outs, sources, strict=True):
                out.detach().copy_(_from_bytes(data, out))
        return self._work(end, [t for outs in outputs for t in outs])

    def all_gather_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimWork:
        return _pair_by_pair(self.all_gather_single, outputs, inputs, opts)

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> SimWork:
        op = (opts or ReduceScatterOptions()).reduceOp
        if input.numel() != output.numel() * self._size:
            raise HwsimError(
                f"reduce_scatter: input has {input.numel()} elements, output {output.numel()}; "
                f"the input needs {self._size} x the output's"
            )
        nbytes = output.numel() * output.element_size()
        total, end = self._reduced("reduce_scatter", nbytes, input, op)
        mine = np.split(total, self._size)[self._rank]
        output.detach().copy_(torch.from_numpy(np.ascontiguousarray(mine)).reshape(output.shape))
        return self._work(end, [output])

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> SimWork:
        # a generator: each input is flattened just before its collective, as one at a time
        flat = (torch.cat([c.detach().reshape(-1) for c in chunks]) for chunks in inputs)
        return _pair_by_pair(self.reduce_scatter_single, outputs, flat, opts)

    def reduce_scatter_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimWork:
        return _pair_by_pair(self.reduce_scatter_single, outputs, inputs, opts)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int] | None,
        input_split_sizes: list[int] | None,
        opts: Any = None,
    ) -> SimWork:
        if output_split_sizes or input_split_sizes:
            return self._uneven_all_to_all(output, input, output_split_sizes, input_split_sizes)
        nbytes = input.numel() * input.element_size()
        sources, end = self._exchange("all_to_all", nbytes, _bytes_of(input), f"{nbytes} B")
        mine = np.concatenate([np.split(data, self._size)[self._rank] for data in sources])
        output.detach().copy_(_from_bytes(mine, output))
        return self._work(end, [output])

    def _uneven_all_to_all(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_splits: list[int] | None,
        input_splits: list[int] | None,
    ) -> SimWork:
        """Rows ``input_splits[j]`` of this rank's input to rank j, rows ``output_splits[j]``
        from rank j (an empty list: even). Timed as the even all-to-all whose chunk is the
        largest any rank sends or receives (each rank offers its own largest, the collective
        lasts the longest): every step of an all-to-all waits for its slowest transfer."""
        n = self._size
        ins = _splits(input_splits, input, n, "input")
        outs = _splits(output_splits, output, n, "output")
        row_bytes = input[0].numel() * input.element_size() if input.shape[0] else 0
        nbytes = n * max(max(ins), max(outs)) * row_bytes
        header = np.asarray(ins, np.int64).view(np.uint8)
        values = np.concatenate([header, _bytes_of(input)])
        what = f"uneven all_to_all of {input.dtype} rows of {row_bytes} B"
        sources, end = self._exchange("all_to_all", nbytes, values, what)
        pieces = []
        for r, data in enumerate(sources):
            theirs = data[: 8 * n].view(np.int64)
            if theirs[self._rank] != outs[r]:
                raise HwsimError(
                    f"all_to_all: rank {self._rank} expects {outs[r]} rows from rank {r}, "
                    f"which sends it {theirs[self._rank]}: output_split_sizes must match the "
                    "senders' input_split_sizes"
                )
            first = int(theirs[: self._rank].sum()) * row_bytes
            pieces.append(data[8 * n + first : 8 * n + first + outs[r] * row_bytes])
        output.detach().copy_(_from_bytes(np.concatenate(pieces), output))
        return self._work(end, [output])

    def alltoall(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimWork:
        flat_in = torch.cat([t.detach().reshape(-1) for t in inputs])
        flat_out = torch.empty_like(torch.cat([t.detach().reshape(-1) for t in outputs]))
        work = self.all_to_all_single(flat_out, flat_in, None, None, opts or AllToAllOptions())
        offset = 0
        for t in outputs:
            t.detach().copy_(flat_out[offset : offset + t.numel()].reshape(t.shape))
            offset += t.numel()
        return work


def _splits(given: list[int] | None, tensor: torch.Tensor, n: int, side: str) -> list[int]:
    """Rows per rank of an all-to-all's ``side`` (an empty list: dim 0 split evenly)."""
    rows = tensor.shape[0] if tensor.dim() else 0
    splits = list(given) if given else ([rows // n] * n if rows % n == 0 else [])
    if len(splits) != n or sum(splits) != rows or min(splits) < 0:
        raise HwsimError(
            f"all_to_all: {side} split sizes {given or 'even'} do not split its {rows} rows "
            f"over {n} ranks; give {n} sizes >= 0 summing to {rows}"
        )
    return splits


_UNUSED = (AllgatherOptions, BarrierOptions)  # the option types the methods above accept


def create_process_group(options: Any, pg_options: Any) -> HwsimProcessGroup:
    """The backend's creator (``register_backend(..., extended_api=True)``)."""
    settings = api.settings()
    size, rank = options.group_size, options.group_rank
    global_ranks = list(options.global_ranks_in_group) or list(range(size))
    clock = current_clock()
    if not dist.is_initialized() or clock is None:  # the default group: a new rank
        clock = RankClock(global_ranks[rank], size, settings.config, settings.cores_per_rank)
        set_current(clock)
    fabric = fabric_for(options.store, rank, size, options.timeout)
    return HwsimProcessGroup(rank, size, global_ranks, fabric, clock)


def _pair_by_pair(
    single: Callable[[torch.Tensor, torch.Tensor, Any], SimWork],
    outputs: list[torch.Tensor],
    inputs: Iterable[torch.Tensor],
    opts: Any,
) -> SimWork:
    """A coalesced collective as its single-tensor form on each (output, input) pair in turn;
    the last pair's work, which ends last."""
    work = None
    for out, input in zip(outputs, inputs, strict=True):
        work = single(out, input, opts)
    assert work is not None
    return work

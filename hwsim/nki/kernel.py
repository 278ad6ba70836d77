"""``@nki.jit`` kernels on the simulator: building through hwsim.lang, SPMD grids, and the
entry points that run them (``simulate``, ``benchmark``, ``profile``, ``baremetal``, ``run``).

A launch grid (``kernel[2, 4](...)``) runs its instances one after another on one NeuronCore,
program ids in row-major order; HBM tensors an instance allocates are shared with the others
(the k-th allocation of every instance is the same tensor), as ``nl.shared_hbm`` outputs are.
A grid dimension ``nl.nc(n)`` (LNC=2: ``kernel[nl.nc(2)]``) runs its instances on n physical
cores of the logical NeuronCore *in parallel*: the kernel is built once per core (its
``program_id`` along that dimension is the core) and the builds run as one program
(``hwsim.chip.merge_programs``), sharing the kernel's inputs and HBM tensors; ``nisa.sendrecv``
and ``nisa.core_barrier`` work between them. A run with ``ranks=N`` builds the kernel once per
rank, rank r on physical core r (``nki.collectives.rank_id``), its arguments the run's or its own
(``per_rank``), and runs the builds as one program whose collectives meet across the cores.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim.config import HardwareConfig, load_config
from hwsim.errors import HwsimError
from hwsim.isa.ap import MemorySpace
from hwsim.lang.kernel import Kernel, current, skip_frames_of
from hwsim.lang.tiles import Tile
from hwsim.nki import state as st
from hwsim.nki.tensor import NkiTensor
from hwsim.schedule import COMPILER_SCHEDULE
from hwsim.units import time_text

if TYPE_CHECKING:
    from hwsim.trace.summary import RunSummary

skip_frames_of(st.NKI_DIR)


class NkiKernel:
    """A function decorated with ``@nki.jit``: call it (or ``nki.simulate`` it) with numpy arrays
    to get its outputs; ``kernel[grid]`` launches an SPMD grid."""

    def __init__(
        self, fn: Callable[..., Any], grid: tuple[Any, ...] = (), options: dict | None = None
    ):
        self.fn = fn
        self.grid = grid
        self.options = dict(options or {})
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: Any) -> NkiKernel:
        grid = grid if isinstance(grid, tuple) else (grid,)
        if any(int(g) < 1 for g in grid):
            raise HwsimError(
                f"{self.fn.__name__}[{', '.join(str(int(g)) for g in grid)}]: a launch grid "
                "dimension counts instances and must be >= 1 (a grid with a 0 launches nothing; "
                "one instance is kernel[1] or no grid)"
            )
        return NkiKernel(self.fn, grid, self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside a running kernel, a call of another ``@nki.jit`` function is part of that
        kernel (NKI traces it inline, ``mode='trace'``); at the top level it runs the kernel."""
        if st.active() is not None:
            return self.fn(*args, **kwargs)
        options, kwargs = split_options(self, kwargs)
        return _run(self, args, kwargs, **options).result()

    @property
    def cores(self) -> int:
        """Physical cores the launch grid runs on: the product of its ``nl.nc`` dimensions."""
        from hwsim.nki.language import nc

        return int(np.prod([int(g) for g in self.grid if isinstance(g, nc)] or [1]))

    def lang_kernel(
        self, notes: list[str], extra: dict[str, Any], core: int = 0, rank: int = 0
    ) -> Kernel:
        """The kernel-language kernel that builds this one on physical core ``core`` of its
        launch (its instances in order; along ``nl.nc`` dimensions only the core's own), for
        rank ``rank`` of a multi-rank run."""
        grid_sizes = tuple(int(g) for g in self.grid) or (1,)
        from hwsim.nki.language import nc

        on_cores = [i for i, g in enumerate(self.grid) if isinstance(g, nc)]
        index = np.unravel_index(core, [grid_sizes[i] for i in on_cores]) if on_cores else ()
        ranges = [range(n) for n in grid_sizes]
        for axis, position in zip(on_cores, index, strict=True):
            ranges[axis] = range(int(position), int(position) + 1)
        sequential = int(np.prod([len(r) for r in ranges]))
        if on_cores and core == 0:
            notes.append(
                f"launch grid {list(grid_sizes)}: {self.cores} instances ran in parallel on "
                f"{self.cores} physical cores (LNC)"
                + (f", {sequential} one after another on each" if sequential > 1 else "")
            )
        elif not on_cores and sequential > 1:
            notes.append(
                f"SPMD grid {list(grid_sizes)}: {sequential} instances ran one after "
                "another on one NeuronCore"
            )
        fn = self.fn
        buffers = int(self.options.get("buffers", st.DEFAULT_BUFFERS))

        def body(**call_args: Any) -> Any:
            nki_state = st.NkiState(buffers)
            token = st.enter(nki_state)
            _flush_copies_before_emission(nki_state)
            try:
                wrapped = {_ORIGINAL.get(k, k): _wrap(v) for k, v in call_args.items()}
                returned = None
                nki_state.core, nki_state.rank = core, rank
                for ids in itertools.product(*ranges):
                    nki_state.program_ids, nki_state.grid = ids, grid_sizes
                    nki_state.grid_ndim = len(self.grid)
                    nki_state.shared_hbm_seen = 0
                    returned = fn(**wrapped)
                    nki_state.flush_copy()
                notes.extend(n for n in nki_state.notes if n not in notes)
                extra["no_reorder"] = nki_state.no_reorder
                extra["sequential_range"] = nki_state.sequential
                extra["shared_hbm"] = [t.tile.name for t in nki_state.shared_hbm]
                tiles = _unwrap(returned, fn.__name__)
                flat = () if tiles is None else tiles if isinstance(tiles, tuple) else (tiles,)
                extra["output_views"] = [(t.offset_bytes, t.shape) for t in flat]
                return tiles
            finally:
                st.leave(token)

        body.__signature__ = _build_signature(fn)  # type: ignore[attr-defined]
        body.__name__ = fn.__name__
        return Kernel(body, default_schedule=COMPILER_SCHEDULE)


#: Kernel parameters whose names the kernel language's ``build`` keeps for itself, and what
#: they are called while building (a kernel's own ``config`` is nki-samples' FlashConfig).
_RENAMED = {"config": "config__nki", "schedule": "schedule__nki"}
_ORIGINAL = {v: k for k, v in _RENAMED.items()}


def _build_signature(fn: Callable[..., Any]) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = [p.replace(name=_RENAMED.get(p.name, p.name)) for p in sig.parameters.values()]
    return sig.replace(parameters=params)


def _flush_copies_before_emission(nki_state: st.NkiState) -> None:
    """Every instruction the kernel emits first writes out a pending ``nl.copy``
    (``hwsim.nki.pending``): every ISA call goes through ``hwsim.lang.emit``, which runs the
    context's ``before_emit`` hooks first."""
    current().before_emit.append(nki_state.flush_copy)


def _wrap(value: Any) -> Any:
    return NkiTensor(value) if isinstance(value, Tile) else value


def _unwrap(returned: Any, name: str) -> Any:
    if returned is None:  # the older convention: outputs are arguments it writes (``_run``)
        return None
    items = returned if isinstance(returned, (tuple, list)) else (returned,)
    out = []
    for item in items:
        if not isinstance(item, NkiTensor):
            raise HwsimError(f"kernel {name} returned {item!r}; return HBM tensors")
        out.append(item.tile)
    return tuple(out) if isinstance(returned, (tuple, list)) else out[0]


def _written_arguments(program: Any, name: str) -> list[str]:
    """The outputs of a kernel that returns nothing: the HBM arguments it writes, in argument
    order (the neuronxcc-era convention, ``kernel(lhsT, rhs, result)``); marked as outputs."""
    written = {
        ap.tensor
        for core in program.cores
        for stream in core.streams.values()
        for instruction in stream
        if instruction.IS_DMA
        for ap in instruction.writes()
        if ap.memory is MemorySpace.HBM
    }
    names = [n for n, d in program.hbm.items() if d.kind == "input" and n in written]
    if not names:
        raise HwsimError(
            f"kernel {name} returned nothing and wrote none of its arguments: return its output "
            "tensors (nl.ndarray(..., buffer=nl.shared_hbm)), as nki.jit kernels do, or write "
            "into an output argument, as the older kernels do"
        )
    for n in names:
        program.hbm[n].kind = "output"
    return names


def _as_returned(array: np.ndarray, offset_bytes: int, shape: tuple[int, ...]) -> np.ndarray:
    """An output as the kernel returned it: a reshaped view of an HBM tensor (``out.reshape``)
    is that view of the tensor's values."""
    if offset_bytes == 0 and array.shape == shape:
        return array
    start = offset_bytes // array.dtype.itemsize
    return array.reshape(-1)[start : start + int(np.prod(shape))].reshape(shape)


def jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(mode=..., platform_target=..., ...)``: options are accepted;
    ``buffers=`` (multi-buffering depth) is this simulator's, the others have no effect."""
    if fn is None:
        return lambda f: NkiKernel(f, options=options)
    if isinstance(fn, NkiKernel):
        return fn
    return NkiKernel(fn, options=options)


def _kernel(kernel: Any) -> NkiKernel:
    return kernel if isinstance(kernel, NkiKernel) else NkiKernel(kernel)


@dataclass
class NkiRun:
    """One simulated run: ``outputs`` (numpy), ``latency_ns``, ``summary``, ``write(DIR)``."""

    outputs: tuple[np.ndarray, ...]  # rank 0's in a multi-rank run
    latency_ns: float
    summary: RunSummary
    trace: Any
    program: Any
    notes: list[str] = field(default_factory=list)
    #: The kernel returned several outputs (``result()`` gives a tuple even of one).
    tuple_output: bool = False
    #: A multi-rank run (``ranks=N``): each rank's outputs, in rank order.
    rank_outputs: tuple[tuple[np.ndarray, ...], ...] = ()

    def result(self) -> Any:
        """The outputs as the kernel returned them: one array, or a tuple; a multi-rank run's,
        a list of those, one per rank."""
        if self.rank_outputs:
            return [self._as_returned(outputs) for outputs in self.rank_outputs]
        return self._as_returned(self.outputs)

    def _as_returned(self, outputs: tuple[np.ndarray, ...]) -> Any:
        return outputs[0] if len(outputs) == 1 and not self.tuple_output else outputs

    def write(self, directory: str | Path, force: bool = False) -> dict[str, Path]:
        """Trace, summary, tables and plots, as ``hwsim run --out DIR`` writes them."""
        from hwsim.trace.outputs import write_run_outputs

        return write_run_outputs(self.trace, Path(directory), summary=self.summary, force=force)


def run(kernel: Any, *args: Any, **kwargs: Any) -> NkiRun:
    """Build and simulate an NKI kernel: ``run(kernel, *args, config="trn2", numerics=True,
    race_check=False, initcheck=None, schedule=None, **kernel_kwargs)``.

    ``config``: trn1, trn2, trn3, tiny, a YAML path or a HardwareConfig (``hw_config=`` when the
    kernel has a parameter named ``config`` of its own); ``schedule``: the instruction order
    (``hwsim.schedule``: ``program``, ``list``, ``best``; None: ``$HWSIM_SCHEDULE``, else the
    NKI compiler's, ``hwsim.schedule.COMPILER_SCHEDULE``: ``best``), honouring ``no_reorder``
    and ``sequential_range``; ``initcheck``: reads of never-written memory raise (on by
    default with numerics; off with False or ``HWSIM_INITCHECK=0``); ``ranks``: run N ranks
    of the kernel, one per physical core, whose ``nki.collectives`` meet (``per_rank``
    arguments differ by rank; ``result()`` is then a list, one per rank). Other keywords are
    the kernel's."""
    options, kwargs = split_options(kernel, dict(kwargs))
    return _run(_kernel(kernel), args, kwargs, **options)


def _run(
    nk: NkiKernel,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    config: str | HardwareConfig = "trn2",
    numerics: bool = True,
    race_check: bool = False,
    initcheck: bool | None = None,
    schedule: str | None = None,
    ranks: int = 1,
) -> NkiRun:
    from hwsim.kernels import warm_up
    from hwsim.machine.initcheck import front_door
    from hwsim.machine.simulator import run as simulate_program

    notes: list[str] = []
    extra: dict[str, Any] = {}
    hw = load_config(config) if isinstance(config, str) else config
    warm_up()
    kwargs = {_RENAMED.get(k, k): v for k, v in kwargs.items()}
    built, program = _build(nk, hw, notes, extra, args, kwargs, schedule, ranks)
    if not built.outputs:  # the older convention: the outputs are arguments it writes
        built.outputs = _written_arguments(program, nk.fn.__name__)
        extra["output_views"] = [(0, tuple(program.hbm[n].shape)) for n in built.outputs]
    program.meta["nki_no_reorder"] = extra.get("no_reorder", [])
    program.meta["nki_sequential_range"] = extra.get("sequential_range", [])
    result = simulate_program(
        program,
        hw,
        numerics=numerics,
        race_check=race_check,
        initcheck=front_door(initcheck, numerics),  # on unless asked off (a front door)
    )
    rank_outputs: list[tuple[np.ndarray, ...]] = []
    if numerics:
        views = extra["output_views"]
        for rank in range(ranks):
            names = [n if rank == 0 else f"c{rank}.{n}" for n in built.outputs]
            rank_outputs.append(
                tuple(
                    _as_returned(result.outputs[n], *v) for n, v in zip(names, views, strict=True)
                )
            )
    outputs = rank_outputs[0] if rank_outputs else ()
    # the compiler options without effect here travel with the summary (``summary.json``)
    summary = dataclasses.replace(
        result.summary, extras={**result.summary.extras, "nki_notes": notes}
    )
    if built.spill:  # what the memory planner moved (the first core's build), as hwsim.lang's
        summary = dataclasses.replace(
            summary, sbuf_spill=built.spill, sbuf_spill_by_tile=built.spill_by_tile
        )
    return NkiRun(
        outputs,
        float(summary.total_ns),
        summary,
        result.trace,
        program,
        notes,
        tuple_output=len(built.outputs) > 1,
        rank_outputs=tuple(rank_outputs) if ranks > 1 else (),
    )


@dataclass(frozen=True)
class PerRank:
    """An argument of a multi-rank run that differs by rank (``per_rank``)."""

    values: tuple[Any, ...]


def per_rank(values: Any) -> PerRank:
    """``hwsim.nki.per_rank([x0, x1, ...])``: an argument of a ``ranks=N`` run whose value rank
    r gets is ``values[r]`` (the other arguments every rank gets as given)."""
    return PerRank(tuple(values))


def _build(
    nk: NkiKernel,
    hw: HardwareConfig,
    notes: list[str],
    extra: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    schedule: str | None,
    ranks: int = 1,
) -> tuple[Any, Any]:
    """The kernel built (the first build) and the program to run. One build per physical core
    of its launch, merged, sharing the kernel's inputs, outputs and HBM tensors; or, with
    ``ranks`` > 1, one build per rank (rank r on physical core r, its arguments its own:
    ``per_rank``), merged with every tensor the rank's own (``c<r>.<name>``)."""
    multi_rank = ranks != 1 or any(isinstance(a, PerRank) for a in (*args, *kwargs.values()))
    if multi_rank:
        _check_ranks(nk, ranks, args, kwargs)
        places = [(0, rank) for rank in range(ranks)]
    elif nk.cores > hw.chip.cores_per_logical_core:
        raise HwsimError(
            f"launch grid {list(nk.grid)} runs on {nk.cores} physical cores; a logical "
            f"NeuronCore of {hw.chip.name} has {hw.chip.cores_per_logical_core} "
            "(chip.cores_per_logical_core)"
        )
    else:
        places = [(core, 0) for core in range(nk.cores)]

    def of(rank: int, value: Any) -> Any:
        return value.values[rank] if isinstance(value, PerRank) else value

    builds = []
    for core, rank in places:
        rank_args, rank_kwargs = (
            [of(rank, a) for a in args],
            {k: of(rank, v) for k, v in kwargs.items()},
        )
        kernel = nk.lang_kernel(notes, extra, core, rank)
        builds.append(kernel.build(*rank_args, config=hw, schedule=schedule, **rank_kwargs))
    if len(builds) == 1:
        return builds[0], builds[0].program
    from hwsim.chip import merge_programs

    if multi_rank:
        if not builds[0].outputs:
            raise HwsimError(
                f"kernel {nk.fn.__name__} returned nothing: a multi-rank run needs the kernel "
                "to return its outputs (nl.ndarray(..., buffer=nl.shared_hbm))"
            )
        notes.append(f"{ranks} ranks ran in parallel, rank r on physical core r")
        return builds[0], merge_programs([b.program for b in builds], ())
    first = builds[0].program
    shared = {n for n, d in first.hbm.items() if d.kind in ("input", "output")}
    shared.update(extra.get("shared_hbm", []))
    return builds[0], merge_programs([b.program for b in builds], shared)


def _check_ranks(nk: NkiKernel, ranks: int, args: tuple[Any, ...], kwargs: dict[str, Any]):
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise HwsimError(f"ranks={ranks!r}: the number of ranks of the run, an int >= 1")
    if nk.cores > 1:
        raise HwsimError(
            f"ranks={ranks} with launch grid {list(nk.grid)}: a multi-rank run gives each rank "
            "one physical core; run the nl.nc grid with ranks=1, or the ranks without it"
        )
    for where, value in [*enumerate(args), *kwargs.items()]:
        if isinstance(value, PerRank) and len(value.values) != ranks:
            raise HwsimError(
                f"argument {where}: per_rank holds {len(value.values)} values for {ranks} ranks; "
                "give one per rank"
            )


#: Options of a simulated run (``run``'s keywords), as opposed to the kernel's own arguments.
RUN_OPTIONS = ("config", "numerics", "race_check", "initcheck", "schedule", "ranks")


def split_options(kernel: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run options, kernel arguments) of a call's keywords: a keyword that names a parameter of
    the kernel is the kernel's (nki-samples' ``flash_fwd(..., config=FlashConfig(...))``), the
    others of ``RUN_OPTIONS`` are the run's; ``hw_config=`` is always the hardware."""
    params = inspect.signature(_kernel(kernel).fn).parameters
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_OPTIONS and k not in params}
    if "hw_config" in kwargs:
        options["config"] = kwargs.pop("hw_config")
    return options, kwargs


class Launch:
    """What ``nki.baremetal(kernel)`` / ``nki.simulate(kernel)`` give: callable with the
    kernel's arguments (numpy outputs), ``launch[grid]`` the same on an SPMD grid, accepted by
    ``nki.simulate_kernel``. ``options``: the run's (``config=`` ...), fixed at creation."""

    def __init__(self, kernel: Any, options: dict[str, Any]) -> None:
        self.kernel = _kernel(kernel)
        self.options = options
        functools.update_wrapper(self, self.kernel.fn)

    def __getitem__(self, grid: Any) -> Launch:
        return Launch(self.kernel[grid], self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        global _LAST
        options, kwargs = split_options(self.kernel, kwargs)
        _LAST = _run(self.kernel, args, kwargs, **{**self.options, **options})
        return _LAST.result()


def simulate(kernel: Any = None, **options: Any) -> Any:
    """``nki.simulate(kernel)(*arrays)``: the outputs (numpy), like AWS's; also timed here
    (``hwsim.nki.last_run()`` has the run). ``config=`` picks the hardware (default trn2)."""
    if kernel is None:
        return lambda k: Launch(k, options)
    return Launch(kernel.kernel if isinstance(kernel, Launch) else kernel, options)


_LAST: NkiRun | None = None


def last_run() -> NkiRun | None:
    return _LAST


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """The older ``nki.simulate_kernel(kernel, *args)``; ``kernel`` may be a launch on a grid
    (``simulate_kernel(nki.baremetal(k)[bs], ...)``)."""
    return simulate(kernel)(*args, **kwargs)


def baremetal(kernel: Any = None, **options: Any) -> Any:
    """``nki.baremetal(kernel)``: run on the (simulated) device; the outputs (numpy).
    Compiler options (``save_neff_name``, ``additional_compile_opt`` ...) are accepted."""
    for key in _COMPILE_OPTIONS:
        options.pop(key, None)
    return simulate(kernel, **options)


#: Options of nki.baremetal / benchmark / profile that concern the compiler or the device
#: runtime: accepted, without effect (no NEFF is made).
_COMPILE_OPTIONS = (
    "save_neff_name",
    "additional_compile_opt",
    "device_count",
    "artifacts_dir",
    "debug_kernel",
    "show_compiler_tb",
    "platform_target",
)


class LatencyStats:
    """``benchmark_result.nc_latency``: the simulated latency. A simulation is deterministic, so
    every percentile is the same number (microseconds, as neuron-bench reports)."""

    def __init__(self, latency_us: float, iters: int) -> None:
        self.latency_us, self.iters = latency_us, iters

    def get_latency_percentile(self, percentile: float) -> float:
        if not 0 <= percentile <= 100:
            raise HwsimError(f"percentile {percentile} must be in 0..100")
        return self.latency_us

    def __repr__(self) -> str:
        return f"nc_latency(p50={self.latency_us:.3f} µs, iters={self.iters})"


@dataclass
class BenchmarkResult:
    nc_latency: LatencyStats
    run: NkiRun


class Benchmarked:
    """``nki.benchmark(...)(kernel)``: calling it simulates once and sets
    ``benchmark_result``; ``bench[grid]`` is the same on an SPMD grid (a benchmark of its own)."""

    def __init__(self, kernel: Any, iters: int, trace_dir: Any, options: dict[str, Any]):
        self.kernel = _kernel(kernel)
        self.iters, self.trace_dir, self.options = iters, trace_dir, options
        self.benchmark_result: BenchmarkResult | None = None
        functools.update_wrapper(self, self.kernel.fn)

    def __getitem__(self, grid: Any) -> Benchmarked:
        return Benchmarked(self.kernel[grid], self.iters, self.trace_dir, self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        global _LAST
        options, kwargs = split_options(self.kernel, kwargs)
        result = _run(self.kernel, args, kwargs, **{**self.options, **options})
        _LAST = result
        latency = LatencyStats(result.latency_ns / 1000.0, self.iters)
        self.benchmark_result = BenchmarkResult(latency, result)
        print(f"nki.benchmark (hwsim): latency {time_text(result.latency_ns)}")
        if self.trace_dir:
            result.write(Path(str(self.trace_dir)).with_suffix(""), force=True)
        return result.result()


def benchmark(kernel: Any = None, *, warmup: int = 5, iters: int = 10, **options: Any) -> Any:
    """``nki.benchmark(warmup=, iters=)(kernel)`` or ``nki.benchmark(kernel, warmup=, ...)``:
    calling it simulates once and sets ``.benchmark_result.nc_latency``
    (``get_latency_percentile(p)`` in µs). ``save_trace_name`` names the folder the trace goes
    to; ``save_neff_name`` and the compiler options are accepted without effect."""
    trace_dir = options.pop("save_trace_name", None)
    for key in _COMPILE_OPTIONS:
        options.pop(key, None)
    if kernel is None:
        return lambda k: Benchmarked(k, iters, trace_dir, options)
    return Benchmarked(kernel, iters, trace_dir, options)


def profile(kernel: Any = None, *, working_directory: str | None = None, **options: Any) -> Any:
    """``nki.profile``: runs the kernel and writes the trace (to ``working_directory``)."""
    for key in ("save_trace_name", "overwrite", "profile_nth", "num_execs", *_COMPILE_OPTIONS):
        options.pop(key, None)

    def wrap(k: Any) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            result = run(k, *args, **options, **kwargs)
            if working_directory:
                result.write(working_directory, force=True)
            return result.result()

        return profiled

    return wrap if kernel is None else wrap(kernel)

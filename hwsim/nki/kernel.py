"""``@nki.jit`` kernels on the simulator: building through hwsim.lang, SPMD grids, and the
entry points that run them (``simulate``, ``benchmark``, ``profile``, ``baremetal``, ``run``).

A launch grid (``kernel[2, 4](...)``) runs its instances one after another on one NeuronCore,
program ids in row-major order; HBM tensors an instance allocates are shared with the others
(the k-th allocation of every instance is the same tensor), as ``nl.shared_hbm`` outputs are.
Multi-core launches (``nl.nc(2)``, LNC=2) are accepted and reported as not yet modelled.
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
        return NkiKernel(self.fn, grid, self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return run(self, *args, **kwargs).result()

    def lang_kernel(self, notes: list[str], extra: dict[str, Any]) -> Kernel:
        """The kernel-language kernel that builds this one (grid instances in order)."""
        grid_sizes = tuple(int(g) for g in self.grid) or (1,)
        from hwsim.nki.language import nc

        if any(isinstance(g, nc) for g in self.grid):
            notes.append(
                f"launch grid {list(grid_sizes)} names NeuronCores (LNC=2): multi-core is not yet "
                "modelled; the instances ran one after another on one core"
            )
        elif int(np.prod(grid_sizes)) > 1:
            notes.append(
                f"SPMD grid {list(grid_sizes)}: {int(np.prod(grid_sizes))} instances ran one after "
                "another on one NeuronCore"
            )
        fn = self.fn
        buffers = int(self.options.get("buffers", st.DEFAULT_BUFFERS))

        def body(**call_args: Any) -> Any:
            nki_state = st.NkiState(buffers)
            token = st.enter(nki_state)
            _flush_copies_before_emission(nki_state)
            try:
                wrapped = {k: _wrap(v) for k, v in call_args.items()}
                returned = None
                for ids in itertools.product(*(range(n) for n in grid_sizes)):
                    nki_state.program_ids, nki_state.grid = ids, grid_sizes
                    nki_state.shared_hbm_seen = 0
                    returned = fn(**wrapped)
                    nki_state.flush_copy()
                notes.extend(nki_state.notes)
                extra["no_reorder"] = nki_state.no_reorder
                extra["sequential_range"] = nki_state.sequential
                return _unwrap(returned, fn.__name__)
            finally:
                st.leave(token)

        body.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        body.__name__ = fn.__name__
        return Kernel(body)


def _flush_copies_before_emission(nki_state: st.NkiState) -> None:
    """Every instruction the kernel emits first writes out a pending ``nl.copy``
    (``hwsim.nki.pending``): every ISA call goes through ``hwsim.lang.emit``, which runs the
    context's ``before_emit`` hooks first."""
    current().before_emit.append(nki_state.flush_copy)


def _wrap(value: Any) -> Any:
    return NkiTensor(value) if isinstance(value, Tile) else value


def _unwrap(returned: Any, name: str) -> Any:
    if returned is None:  # the older convention: outputs are arguments it writes (``run``)
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

    outputs: tuple[np.ndarray, ...]
    latency_ns: float
    summary: RunSummary
    trace: Any
    program: Any
    notes: list[str] = field(default_factory=list)
    #: The kernel returned several outputs (``result()`` gives a tuple even of one).
    tuple_output: bool = False

    def result(self) -> Any:
        """The outputs as the kernel returned them: one array, or a tuple."""
        return self.outputs[0] if len(self.outputs) == 1 and not self.tuple_output else self.outputs

    def write(self, directory: str | Path, force: bool = False) -> dict[str, Path]:
        """Trace, summary, tables and plots, as ``hwsim run --out DIR`` writes them."""
        from hwsim.trace.outputs import write_run_outputs

        return write_run_outputs(self.trace, Path(directory), summary=self.summary, force=force)


def run(
    kernel: Any,
    *args: Any,
    config: str | HardwareConfig = "trn2",
    numerics: bool = True,
    race_check: bool = False,
    initcheck: bool | None = None,
    schedule: str | None = None,
    **kwargs: Any,
) -> NkiRun:
    """Build and simulate an NKI kernel on ``config`` (trn1, trn2, trn3, tiny or a path).
    ``schedule``: the instruction order (``hwsim.schedule``: ``program``, ``list``, ``best``;
    None: the kernel language's default), honouring ``no_reorder`` and ``sequential_range``."""
    from hwsim.kernels import warm_up
    from hwsim.machine.simulator import run as simulate_program

    nk = _kernel(kernel)
    notes: list[str] = []
    extra: dict[str, Any] = {}
    hw = load_config(config) if isinstance(config, str) else config
    warm_up()
    built = nk.lang_kernel(notes, extra).build(*args, config=hw, schedule=schedule, **kwargs)
    if not built.outputs:
        built.outputs = _written_arguments(built.program, nk.fn.__name__)
    built.program.meta["nki_no_reorder"] = extra.get("no_reorder", [])
    built.program.meta["nki_sequential_range"] = extra.get("sequential_range", [])
    result = simulate_program(
        built.program, hw, numerics=numerics, race_check=race_check, initcheck=initcheck
    )
    outputs = tuple(result.outputs[n] for n in built.outputs) if numerics else ()
    # the compiler options without effect here travel with the summary (``summary.json``)
    summary = dataclasses.replace(
        result.summary, extras={**result.summary.extras, "nki_notes": notes}
    )
    return NkiRun(
        outputs,
        float(summary.total_ns),
        summary,
        result.trace,
        built.program,
        notes,
        tuple_output=len(built.outputs) > 1,
    )


def simulate(kernel: Any = None, **options: Any) -> Any:
    """``nki.simulate(kernel)(*arrays)``: the outputs (numpy), like AWS's; also timed here
    (``hwsim.nki.last_run()`` has the run). ``config=`` picks the hardware (default trn2)."""

    def runner(k: Any) -> Callable[..., Any]:
        def simulated(*args: Any, **kwargs: Any) -> Any:
            global _LAST
            _LAST = run(k, *args, **options, **kwargs)
            return _LAST.result()

        return simulated

    return runner if kernel is None else runner(kernel)


_LAST: NkiRun | None = None


def last_run() -> NkiRun | None:
    return _LAST


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """The older ``nki.simulate_kernel(kernel, *args)``."""
    return simulate(kernel)(*args, **kwargs)


baremetal = simulate


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
        return f"nc_latency(p50={self.latency_us:.3f} us, iters={self.iters})"


@dataclass
class BenchmarkResult:
    nc_latency: LatencyStats
    run: NkiRun


def benchmark(kernel: Any = None, *, warmup: int = 5, iters: int = 10, **options: Any) -> Any:
    """``nki.benchmark(warmup=, iters=)(kernel)``: calling it simulates once and sets
    ``.benchmark_result.nc_latency`` (``get_latency_percentile(p)`` in µs). ``save_neff_name``,
    ``save_trace_name`` (the trace goes to that folder's name) and compiler options are accepted."""
    trace_dir = options.pop("save_trace_name", None)
    for key in ("save_neff_name", "additional_compile_opt", "device_count"):
        options.pop(key, None)

    class Benchmarked:
        def __init__(self, k: Any) -> None:
            self.kernel = k
            self.benchmark_result: BenchmarkResult | None = None

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            result = run(self.kernel, *args, **options, **kwargs)
            self.benchmark_result = BenchmarkResult(
                LatencyStats(result.latency_ns / 1000.0, iters), result
            )
            print(f"nki.benchmark (hwsim): latency {result.latency_ns / 1000.0:.3f} us")
            if trace_dir:
                result.write(Path(str(trace_dir)).with_suffix(""), force=True)
            return result.result()

    return Benchmarked if kernel is None else Benchmarked(kernel)


def profile(kernel: Any = None, *, working_directory: str | None = None, **options: Any) -> Any:
    """``nki.profile``: runs the kernel and writes the trace (to ``working_directory``)."""
    for key in ("save_neff_name", "save_trace_name", "overwrite", "profile_nth", "num_execs"):
        options.pop(key, None)

    def wrap(k: Any) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            result = run(k, *args, **options, **kwargs)
            if working_directory:
                result.write(working_directory, force=True)
            return result.result()

        return profiled

    return wrap if kernel is None else wrap(kernel)

"""The calibration set (HARDWARE.md §5) as runnable cases, for bench/fidelity.py and
bench/calibrate.py.

Every case is the published kernel: its file as published (third_party/, each with a SOURCE.md)
run unmodified through ``hwsim.nki`` ("verbatim"), and beside it the library kernel written line
by line like it ("twin", ``hwsim.library``). A case has one or more published figures: the first
is its timeline (the ±10% target); the others are checked the same way where the case's line says
so (V1's hardware FLOP utilisation) or printed as notes (profile figures a model of the timeline
does not aim at). Programs are built once per config and kept, so a calibration can simulate
them many times with other parameters.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hwsim.config import HardwareConfig, load_config
from hwsim.cost import CostModel
from hwsim.cost.dma import SEMAPHORE_WRITE_BYTES
from hwsim.lang import ActivationFunction, TensorSpec, hbm, kernel, ndarray
from hwsim.lang import isa as nisa
from hwsim.library import matmul_block_free, matmul_hoisted, matmul_tiled
from hwsim.library.tutorial_matmul import matmul_fully_optimized
from hwsim.machine.simulator import RunResult, run
from hwsim.program import Program
from hwsim.schedule import COMPILER_SCHEDULE, resolve_schedule

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = ROOT / "third_party"
#: The trn1 tutorial (V1a-V1c, V1), as published with its latency table (SOURCE.md).
TUTORIAL_FILE = (
    THIRD_PARTY
    / "nki-samples-5d97201/src/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"
)
#: The trn2 kernel-optimization tutorial's tiled and block-all versions (K2-v2, K2-v5).
OPTIMIZATION_DIR = THIRD_PARTY / "neuron-sdk-docs-db1586c3/nki/how-to-guides/kernel-optimization"
#: The DMA overview's example 1 (V18).
DMA_EXAMPLE_FILE = (
    THIRD_PARTY
    / "neuron-sdk-docs-fb4ce106/nki/get-started/about/nki-dma-overview/tensor_exp_kernel_isa.py"
)
#: HARDWARE.md §5: lhsT [K, M] and rhs [K, N] of every matmul case.
K, M, N = 8192, 4096, 8192
#: Published matmul FLOPs (2 K M N), for utilisations.
MATMUL_FLOPS = 2 * K * M * N


def load_file(path: Path) -> ModuleType:
    """An upstream kernel file as a module, its ``nki`` imports resolved to ``hwsim.nki``."""
    import hwsim.nki

    hwsim.nki.install()
    name = f"upstream_{path.stem}_{abs(hash(str(path)))}"
    found = sys.modules.get(name)
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def nki_program(fn: Any, args: tuple[Any, ...], config: HardwareConfig) -> Program:
    """The program of an NKI kernel (as ``hwsim.nki.run`` builds it), without running it."""
    from hwsim.nki.kernel import _kernel, _written_arguments

    kernel = _kernel(fn)
    built = kernel.lang_kernel([], {}).build(*args, config=config)
    if not built.outputs:
        _written_arguments(built.program, kernel.fn.__name__)
    return built.program


def lang_program(kernel: Any, args: tuple[Any, ...], config: HardwareConfig) -> Program:
    """A twin's program, ordered as the NKI compiler orders its verbatim kernel (a
    kernel-language kernel keeps program order unless asked; ``hwsim.schedule``)."""
    policy = resolve_schedule(None, COMPILER_SCHEDULE)
    return kernel.build(*args, config=config, schedule=policy).program


# ---- what a case measures ----------------------------------------------------------------------
def total_ms(result: RunResult, program: Program) -> float:
    return result.trace.ticks_to_ns(result.trace.end_tick) / 1e6


def hfu_pct(result: RunResult, program: Program) -> float:
    return result.summary.hfu_pct


def engine_active_ms(engine: str) -> Callable[[RunResult, Program], float]:
    def measure(result: RunResult, program: Program) -> float:
        return result.trace.ticks_to_ns(result.summary.engines[engine].busy_ticks) / 1e6

    measure.__name__ = f"{engine}_active_ms"
    return measure


def dma_active_pct(result: RunResult, program: Program) -> float:
    return result.summary.dma.active_pct


def mbu_pct(result: RunResult, program: Program) -> float:
    """HBM bytes over the time at one HBM stack's bandwidth: the profiler's MBU (K2-v2's 10.87
    GB in 39.89 ms at 38.06% puts its peak at 716 GB/s, one trn2 stack [S5]), not the summary's
    (a core's share when every core of the stack streams)."""
    summary = result.summary
    seconds = summary.total_ns / 1e9
    stack = result.trace.config.hbm.bandwidth_bytes_per_ns_per_stack * 1e9
    return 100.0 * summary.hbm_bytes / (stack * seconds) if seconds else 0.0


def first_engine_packet_ns(result: RunResult, program: Program) -> float:
    """V18: the data packet of the DMA engine that moves the load's first row: its piece minus
    the 4-byte completion-semaphore write that ends it (the profile shows that as a packet of
    its own [S12])."""
    trace = result.trace
    load = min(
        (p for p in trace.dma if p.transfer_bytes),
        key=lambda p: (p.start_tick, p.dma_engine),
    )
    dma = CostModel.for_config(trace.config).dma
    semaphore_ns = float(dma.descriptor_ns(SEMAPHORE_WRITE_BYTES))
    return trace.ticks_to_ns(load.end_tick - load.start_tick) - semaphore_ns


@dataclass(frozen=True)
class Figure:
    """One published number of a case."""

    name: str  # the line's name in bench/fidelity.py
    label: str
    published: float
    unit: str
    measure: Callable[[RunResult, Program], float]
    target: bool = True  # checked against ±10% (else printed as a note)


@dataclass
class Case:
    """A calibration case: its published figures and its two programs."""

    key: str  # HARDWARE.md §5 row
    config: str  # the preset of its generation
    figures: tuple[Figure, ...]
    verbatim: Callable[[HardwareConfig], Program]
    twin: Callable[[HardwareConfig], Program]
    source: str  # the upstream file (and kernel) it runs
    programs: dict[tuple[str, str], Program] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.figures[0].name

    def program(self, which: str, config: HardwareConfig) -> Program:
        """The verbatim or twin program on ``config`` (built once per config name)."""
        key = (which, config.chip.name)
        found = self.programs.get(key)
        if found is None:
            found = self.programs[key] = (self.verbatim if which == "verbatim" else self.twin)(
                config
            )
        return found

    def simulate(self, which: str, config: HardwareConfig) -> tuple[RunResult, Program, float]:
        program = self.program(which, config)
        start = time.perf_counter()
        result = run(program, config, numerics=False)
        return result, program, time.perf_counter() - start


# ---- the cases ---------------------------------------------------------------------------------
def _tutorial(name: str) -> Callable[[HardwareConfig], Program]:
    def build(config: HardwareConfig) -> Program:
        fn = getattr(load_file(TUTORIAL_FILE), name)
        args = (TensorSpec((K, M), "bf16"), TensorSpec((K, N), "bf16"), TensorSpec((M, N), "bf16"))
        return nki_program(fn, args, config)

    return build


def _optimization(file: str) -> Callable[[HardwareConfig], Program]:
    def build(config: HardwareConfig) -> Program:
        fn = load_file(OPTIMIZATION_DIR / file).matrix_multiply_kernel
        return nki_program(fn, (TensorSpec((K, M), "fp32"), TensorSpec((K, N), "fp32")), config)

    return build


def _twin(kernel: Any, dtype: str) -> Callable[[HardwareConfig], Program]:
    def build(config: HardwareConfig) -> Program:
        return lang_program(kernel, (TensorSpec((K, M), dtype), TensorSpec((K, N), dtype)), config)

    return build


@kernel
def dma_example(x):
    """The DMA overview's example 1 line by line: x [4, 4096] bf16 loaded into 4 partitions
    (one DMA engine's 8 [S12]), exp on ScalarE, stored."""
    out = ndarray(x.shape, x.dtype, buffer=hbm)
    loaded = ndarray(x.shape, x.dtype)
    result = ndarray(x.shape, x.dtype)
    nisa.dma_copy(loaded, x[0:4, 0:4096])
    nisa.activation(result, ActivationFunction.exp, loaded)
    nisa.dma_copy(out[0:4, 0:4096], result)
    return out


def _dma_example(config: HardwareConfig) -> Program:
    fn = load_file(DMA_EXAMPLE_FILE).tensor_exp_kernel_isa
    return nki_program(fn, (TensorSpec((4, 4096), "bf16"),), config)


def _dma_example_twin(config: HardwareConfig) -> Program:
    return lang_program(dma_example, (TensorSpec((4, 4096), "bf16"),), config)


def _time(name: str, label: str, published_ms: float) -> Figure:
    return Figure(name, label, published_ms, "ms", total_ms)


def _notes(*figures: tuple[str, str, float, str, Callable[[RunResult, Program], float]]):
    return tuple(Figure(n, lbl, p, u, m, target=False) for n, lbl, p, u, m in figures)


def calibration_cases() -> dict[str, Case]:
    """The calibration set, by HARDWARE.md §5 key (M1, a whole model, is bench/models.py's)."""
    tutorial = "nki-samples 5d97201 matrix_multiplication_nki_kernels.py"
    optimization = "aws-neuron-sdk db1586c3 kernel-optimization"
    cases = [
        Case(
            "V1a",
            "trn1",
            (_time("matmul-tiled", "V1a: trn1 tutorial tiled 4096x8192x8192 bf16", 51.80),),
            _tutorial("nki_matmul_tiled_"),
            _twin(matmul_tiled, "bf16"),
            f"{tutorial}: nki_matmul_tiled_",
        ),
        Case(
            "V1b",
            "trn1",
            (_time("matmul-hoisted", "V1b: trn1 tutorial hoisted loads", 42.96),),
            _tutorial("nki_matmul_hoist_load_"),
            _twin(matmul_hoisted, "bf16"),
            f"{tutorial}: nki_matmul_hoist_load_",
        ),
        Case(
            "V1c",
            "trn1",
            (_time("matmul-blocked", "V1c: trn1 tutorial blocked free dims", 22.07),),
            _tutorial("nki_matmul_block_free_dimension_"),
            _twin(matmul_block_free, "bf16"),
            f"{tutorial}: nki_matmul_block_free_dimension_",
        ),
        Case(
            "V1",
            "trn1",
            (
                _time("matmul-optimized", "V1: trn1 fully optimised 4096x8192x8192 bf16", 6.97),
                Figure(
                    "matmul-optimized-hfu", "V1: hardware FLOP utilisation", 85.24, "%", hfu_pct
                ),
            ),
            _tutorial("nki_matmul_fully_optimized_"),
            _twin(matmul_fully_optimized, "bf16"),
            f"{tutorial}: nki_matmul_fully_optimized_",
        ),
        Case(
            "V18",
            "trn2",
            (
                Figure(
                    "dma-32k",
                    "V18: trn2 DMA engine, 32 KiB HBM->SBUF",
                    1416.0,
                    "ns",
                    first_engine_packet_ns,
                ),
            ),
            _dma_example,
            _dma_example_twin,
            "aws-neuron-sdk fb4ce106 nki-dma-overview example 1: tensor_exp_kernel_isa",
        ),
        Case(
            "K2-v2",
            "trn2",
            (
                _time("matmul-trn2-tiled", "K2-v2: trn2 tutorial tiled 4096x8192x8192 fp32", 39.89),
                *_notes(
                    ("tensor-active", "TensorE active", 34.82, "ms", engine_active_ms("tensor")),
                    ("dma-active", "DMA active", 99.93, "%", dma_active_pct),
                    ("mbu", "memory bandwidth utilisation", 38.06, "%", mbu_pct),
                ),
            ),
            _optimization("tiled.py"),
            _twin(matmul_tiled, "fp32"),
            f"{optimization}: tiled.py",
        ),
        Case(
            "K2-v5",
            "trn2",
            (
                _time("matmul-trn2-blocked", "K2-v5: trn2 tutorial block all dims, fp32", 28.30),
                *_notes(
                    ("tensor-active", "TensorE active", 28.16, "ms", engine_active_ms("tensor")),
                    ("vector-active", "VectorE active", 2.99, "ms", engine_active_ms("vector")),
                    ("dma-active", "DMA active", 21.54, "%", dma_active_pct),
                    ("mbu", "memory bandwidth utilisation", 8.96, "%", mbu_pct),
                ),
            ),
            _optimization("block_all.py"),
            _twin(matmul_fully_optimized, "fp32"),
            f"{optimization}: block_all.py",
        ),
    ]
    return {case.key: case for case in cases}


def preset(name: str, overrides: dict[str, Any] | None = None) -> HardwareConfig:
    return load_config(name, overrides)

"""The split of an instruction's cost into a fixed part and a per-element part, per engine, dtype,
source memory and access pattern, on the presets of each generation, pinned at a small and a
large free size (the two ends where a wrong split shows: the small end is the fixed part and the
MIN_II floor, the large end the per-element rate). docs/fidelity.md, "Fixed and per-element costs".

Issue cycles, from the documented rules and the calibrated values:

- VectorE: fixed + max(MIN_II = 64, streaming work). fixed: 0 on trn1 (the v2 rule ~N [S1]),
  25 on trn2 (K2-v5's VectorE active time) and trn3 (trn2's, assumed). Work: one stream per input
  of N elements at 1 per lane per cycle; trn1 reads one SBUF input at a time (2N for two), trn2
  two fp32 / four 16-bit at once; an operand in PSUM streams beside them; an innermost stride
  above 16 B doubles that operand's stream [S1][S2][S16].
- ScalarE: max(64, N), no fixed part on any generation (no evidence of one).
- GpSimdE: GPSIMD_START = 150 + N, no floor [S16].
- TensorE, fp32 (the backend's 2 MATMULs of 2N each [S37], 4N in all) and bf16: max(mult x
  min(64, M), mult x N + access) with access 60 on trn1 [S1], 15 on trn2 (K2-v5's TensorE active
  time) and trn3 (trn2's, assumed).

Ticks per cycle: trn1 (base 5600 MHz) VectorE 5, ScalarE 4, GpSimdE 4, TensorE 2; trn2 (4800 MHz)
VectorE 5, ScalarE 4, GpSimdE 4, TensorE 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP32
from hwsim.isa.gpsimd_ops import Iota
from hwsim.isa.scalar_ops import Activation
from hwsim.isa.scan_ops import TensorTensorScan
from hwsim.isa.tensor_ops import NcMatmul
from hwsim.isa.vector_ops import TensorScalar, TensorTensor
from hwsim.kernels import ActivationFunction, AluOp

from .helpers import PSUM, SBUF, V3_VECTOR_FIXED, as_config, inp, out, run_single

P = 128
SMALL, LARGE = 32, 4096
TICKS = {("trn1", "vector"): 5, ("trn1", "scalar"): 4, ("trn1", "gpsimd"): 4}
TICKS |= {("trn2", "vector"): 5, ("trn2", "scalar"): 4, ("trn2", "gpsimd"): 4}
TICKS |= {("trn1", "tensor"): 2, ("trn2", "tensor"): 2}
FIXED = {"trn1": 0, "trn2": V3_VECTOR_FIXED}


def issue_cycles(run, config: str, engine: str) -> float:
    ticks = TICKS[(config, engine)]
    assert run.issue_ticks % ticks == 0
    return run.issue_ticks // ticks


def _vector(config, make, inputs, n, dtype=FP32):
    outputs = {"dst": out((P, n), dtype)}
    ins = {k: inp(np.ones((P, n)), dtype, memory) for k, memory in inputs.items()}
    run = run_single(make, ins, outputs, config=config, numerics=False)
    return issue_cycles(run, config, "vector")


@pytest.mark.parametrize(
    ("config", "n", "cycles"),
    [
        ("trn1", SMALL, 64),  # 2N = 64: the MIN_II floor
        ("trn1", LARGE, 2 * LARGE),  # two SBUF inputs, one at a time
        ("trn2", SMALL, V3_VECTOR_FIXED + 64),  # N = 32 below the floor; the fixed part on top
        ("trn2", LARGE, V3_VECTOR_FIXED + LARGE),  # both fp32 inputs at once
    ],
)
def test_tensor_tensor_scan_fp32(config, n, cycles):
    def make(a):
        return TensorTensorScan(
            engine="vector",
            dst=a["dst"],
            src0=a["a"],
            src1=a["b"],
            initial=0.0,
            op0=AluOp.multiply,
            op1=AluOp.add,
        )

    assert _vector(config, make, {"a": SBUF, "b": SBUF}, n) == cycles


@pytest.mark.parametrize(
    ("config", "n", "memory", "cycles"),
    [
        ("trn1", SMALL, PSUM, 64),
        ("trn1", LARGE, PSUM, LARGE),  # the PSUM input streams beside the SBUF one
        ("trn1", LARGE, SBUF, 2 * LARGE),
        ("trn2", SMALL, PSUM, V3_VECTOR_FIXED + 64),
        ("trn2", LARGE, PSUM, V3_VECTOR_FIXED + LARGE),
        ("trn2", LARGE, SBUF, V3_VECTOR_FIXED + LARGE),
    ],
)
def test_tensor_tensor_fp32_by_source_memory(config, n, memory, cycles):
    def make(a):
        return TensorTensor(engine="vector", dst=a["dst"], src0=a["a"], src1=a["b"], op=AluOp.add)

    assert _vector(config, make, {"a": SBUF, "b": memory}, n) == cycles


@pytest.mark.parametrize(
    ("config", "n", "dtype", "cycles"),
    [
        ("trn1", SMALL, FP32, 64),
        ("trn1", LARGE, BF16, LARGE),  # no performance mode on v2
        ("trn2", SMALL, BF16, V3_VECTOR_FIXED + 64),  # 4x of 32 under the floor
        (
            "trn2",
            LARGE,
            BF16,
            V3_VECTOR_FIXED + LARGE // 4,
        ),  # performance mode: all SBUF, contiguous [S2]
        ("trn2", LARGE, FP32, V3_VECTOR_FIXED + LARGE),
    ],
)
def test_tensor_scalar_by_dtype(config, n, dtype, cycles):
    def make(a):
        return TensorScalar(
            engine="vector", dst=a["dst"], src=a["x"], op0=AluOp.multiply, scalar0=2.0
        )

    assert _vector(config, make, {"x": SBUF}, n, dtype) == cycles


@pytest.mark.parametrize("config", ["trn1", "trn2"])
@pytest.mark.parametrize(("n", "cycles"), [(SMALL, 64), (LARGE, LARGE)])
def test_scalar_activation_has_no_fixed_part(config, n, cycles):
    run = run_single(
        lambda a: Activation(
            engine="scalar", dst=a["dst"], src=a["x"], func=ActivationFunction.exp
        ),
        {"x": inp(np.zeros((P, n)), FP32)},
        {"dst": out((P, n), FP32)},
        config=config,
        numerics=False,
    )
    assert issue_cycles(run, config, "scalar") == cycles


@pytest.mark.parametrize("config", ["trn1", "trn2"])
@pytest.mark.parametrize(("n", "cycles"), [(SMALL, 150 + SMALL), (LARGE, 150 + LARGE)])
def test_gpsimd_start_is_the_fixed_part(config, n, cycles):
    run = run_single(
        lambda a: Iota(engine="gpsimd", dst=a["dst"], steps=(1,), offset=0, channel_multiplier=0),
        {},
        {"dst": out((P, n), FP32)},
        config=config,
        numerics=False,
    )
    assert issue_cycles(run, config, "gpsimd") == cycles


@pytest.mark.parametrize(
    ("config", "dtype", "n", "cycles"),
    [
        ("trn1", BF16, 64, 64 + 60),
        ("trn1", BF16, 512, 512 + 60),
        ("trn1", FP32, 64, 4 * 64 + 60),
        ("trn2", BF16, 64, 64 + 15),
        ("trn2", BF16, 512, 512 + 15),
        ("trn2", FP32, 512, 4 * 512 + 15),  # K2-v5: 28.16 ms / 32,768 at 2.4 GHz = 2,062.5
    ],
)
def test_matmul_access_overhead_per_generation(config, dtype, n, cycles):
    run = run_single(
        lambda a: NcMatmul(engine="tensor", dst=a["dst"], stationary=a["w"], moving=a["x"]),
        {"w": inp(np.zeros((128, 128)), dtype), "x": inp(np.zeros((128, n)), dtype)},
        {"dst": out((128, n), FP32, PSUM)},
        config=config,
        numerics=False,
    )
    assert issue_cycles(run, config, "tensor") == cycles
    te = as_config(config).tensor_engine
    assert te.access_overhead_cycles == {"trn1": 60, "trn2": 15}[config]

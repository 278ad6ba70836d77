"""ScalarE activation and activation_reduce: numerics vs numpy, exact tick costs, legality."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP32
from hwsim.isa import AccessPattern
from hwsim.isa.scalar_ops import Activation, ActivationReduce
from hwsim.kernels import ActivationFunction as Act

from .helpers import (
    PSUM,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
    tile_ap,
)

RNG = np.random.default_rng(20240601)

#: Independent float64 definitions of the activation functions tested.
NUMPY_FUNCS = {
    Act.exp: np.exp,
    Act.tanh: np.tanh,
    Act.relu: lambda y: np.maximum(y, 0.0),
    Act.sigmoid: lambda y: 1.0 / (1.0 + np.exp(-y)),
    Act.square: np.square,
}


def reference(x: np.ndarray, func: Act, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """func(x * scale + bias): fp32 multiply, fp32 add, then the function in float64 -> fp32."""
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    y = x * scale.reshape(shape).astype(np.float32)
    y = (y + bias.reshape(shape).astype(np.float32)).astype(np.float32)
    return NUMPY_FUNCS[func](y.astype(np.float64)).astype(np.float32)


def make_activation(aps: dict[str, AccessPattern], func: Act, scale_ap: bool, reduce: bool):
    scale = aps["scale"] if scale_ap else 0.75
    common = dict(engine="scalar", dst=aps["dst"], src=aps["src"], func=func, bias=aps["bias"])
    if reduce:
        return ActivationReduce(**common, scale=scale, reduce_dst=aps["red"])
    return Activation(**common, scale=scale)


@pytest.mark.parametrize("func", list(NUMPY_FUNCS))
@pytest.mark.parametrize(
    ("shape", "dtype", "scale_ap"),
    [((4, 8), FP32, False), ((32, 3, 5), FP32, True), ((5, 16), BF16, True)],
)
@pytest.mark.parametrize("reduce", [False, True], ids=["activation", "activation_reduce"])
def test_activation_numerics(func, shape, dtype, scale_ap, reduce):
    p = shape[0]
    x = RNG.uniform(-2, 2, shape).astype(np.float32)
    scale = RNG.uniform(0.5, 1.5, (p, 1)).astype(np.float32)
    bias = RNG.uniform(-0.5, 0.5, (p, 1)).astype(np.float32)
    inputs = {"src": inp(x, dtype), "bias": inp(bias, FP32)}
    if scale_ap:
        inputs["scale"] = inp(scale, FP32)
    outputs = {"dst": out(shape, dtype)}
    if reduce:
        outputs["red"] = out((p, 1), FP32)
    run = run_single(
        lambda aps: make_activation(aps, func, scale_ap, reduce), inputs, outputs, race_check=True
    )
    scale_used = scale if scale_ap else np.full((p, 1), 0.75, np.float32)
    expected = reference(rounded(x, dtype), func, scale_used, bias)
    # fp32: the kernels' functions are within 2 fp32 ulps of float64 libm; bf16: within 1 ulp
    # (an fp32 result 1 ulp off can round to the neighbouring bf16 value).
    assert_ulps(run.outputs["dst"], expected, dtype, max_ulps=2 if dtype is FP32 else 1)
    if reduce:
        sums = expected.reshape(p, -1).astype(np.float64).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(run.outputs["red"], sums, rtol=1e-5, atol=1e-5)


# Hand-computed ticks. tiny: ScalarE 2 ticks/cycle, MIN_II 16, pipeline latency 20 cycles.
# trn2: base 4800 MHz, ScalarE 1200 MHz = 4 ticks/cycle, MIN_II 64, pipeline latency 200 cycles.
@pytest.mark.parametrize(
    ("config", "n", "reduce", "issue", "done"),
    [
        ("tiny", 8, False, 2 * 16, 2 * 16 + 2 * 20),  # max(MIN_II, N) = MIN_II
        ("tiny", 40, False, 2 * 40, 2 * 40 + 2 * 20),
        ("tiny", 40, True, 2 * (40 + 16), 2 * (40 + 16) + 2 * 20),  # + MIN_II read-out
        ("trn2", 10, False, 4 * 64, 4 * 64 + 4 * 200),
        ("trn2", 512, False, 4 * 512, 4 * 512 + 4 * 200),
        ("trn2", 512, True, 4 * (512 + 64), 4 * (512 + 64) + 4 * 200),
    ],
)
@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_activation_cost(config, n, reduce, issue, done, dtype):
    p = 4
    inputs = {
        "src": inp(np.ones((p, n)), dtype),
        "bias": inp(np.zeros((p, 1)), FP32),
        "scale": inp(np.ones((p, 1)), FP32),
    }
    outputs = {"dst": out((p, n), dtype), "red": out((p, 1), FP32)}
    run = run_single(
        lambda aps: make_activation(aps, Act.exp, True, reduce),
        inputs,
        outputs,
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)
    assert run.consumers["dst"].engine == "sync"  # a dependent instruction on another engine


def test_activation_cost_ignores_scale_and_bias():
    def issue(with_operands: bool) -> int:
        inputs = {"src": inp(np.ones((4, 40)), FP32)}
        if with_operands:
            inputs |= {"bias": inp(np.zeros((4, 1)), FP32), "scale": inp(np.ones((4, 1)), FP32)}
        run = run_single(
            lambda aps: Activation(
                engine="scalar",
                dst=aps["dst"],
                src=aps["src"],
                func=Act.relu,
                bias=aps.get("bias"),
                scale=aps.get("scale", 1.0),
            ),
            inputs,
            {"dst": out((4, 40), FP32)},
            numerics=False,
        )
        return run.issue_ticks

    assert issue(True) == issue(False) == 2 * 40


@pytest.mark.parametrize(
    ("instruction", "config", "fragments"),
    [
        (
            lambda: Activation(
                engine="scalar",
                dst=tile_ap(4, 8),
                src=tile_ap(4, 8),
                func=Act.exp,
                bias=tile_ap(4, 2),
            ),
            "tiny",
            ("operand 'bias' has shape (4, 2)", "must be [4, 1]"),
        ),
        (
            lambda: Activation(engine="scalar", dst=tile_ap(4, 8), src=tile_ap(4, 9), func=Act.exp),
            "tiny",
            ("src/dst: shapes (4, 9) and (4, 8) differ",),
        ),
        (
            lambda: Activation(
                engine="scalar",
                dst=tile_ap(4, 8),
                src=tile_ap(4, 8),
                func=Act.exp,
                scale=tile_ap(3, 1),
            ),
            "tiny",
            ("operand 'scale' has shape (3, 1)", "must be [4, 1]"),
        ),
        (
            lambda: Activation(engine="vector", dst=tile_ap(4, 8), src=tile_ap(4, 8), func=Act.exp),
            "tiny",
            ("cannot run on engine 'vector'", "runs on scalar"),
        ),
        (  # 8192 bf16 elements fit a 16 KiB PSUM partition but exceed the 4K PSUM limit [S1]
            lambda: Activation(
                engine="scalar",
                dst=tile_ap(4, 8192, dtype=BF16),
                src=tile_ap(4, 8192, PSUM, BF16),
                func=Act.exp,
            ),
            "trn2",
            ("operand 'src' has 8192 elements per partition", "at most 4096 from psum"),
        ),
        (
            lambda: ActivationReduce(
                engine="scalar",
                dst=tile_ap(4, 8),
                src=tile_ap(4, 8),
                func=Act.exp,
                reduce_dst=tile_ap(4, 2),
            ),
            "tiny",
            ("operand 'reduce_dst' has shape (4, 2)", "must be [4, 1]"),
        ),
    ],
)
def test_activation_illegal(instruction, config, fragments):
    check_illegal(instruction(), config, *fragments)

"""Neuron's auto-cast (``bridge.precision``, ``bridge.auto_cast``): the options, where the casts
go in the lowered program, the CPU reference that rounds where the simulator does, and the
report's dtype per op."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch._dynamo
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim import bridge
from hwsim.bridge.auto_cast import reference_casts, round_to
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.offload import HwsimMode
from hwsim.bridge.options import BridgeOptions
from hwsim.bridge.precision import NEURON_DEFAULT, TOLERANCES, Precision, compare
from hwsim.dtypes import TF32, cast, machine_epsilon
from hwsim.isa.tensor_ops import NcMatmul


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_options_follow_neuronx_cc():
    assert BridgeOptions.parse({}).precision == NEURON_DEFAULT == Precision("matmult", "bf16")
    parsed = BridgeOptions.parse({"auto_cast": "matmul", "auto_cast_type": "fp8_e4m3"})
    assert parsed.precision == Precision("matmult", "fp8_e4m3")  # the reference page's spelling
    for bad, says in [
        ({"auto_cast": "some"}, "auto_cast='some' is not one of none, matmult, all"),
        ({"auto_cast_type": "fp64"}, "auto_cast_type='fp64' is not one of bf16, fp16, tf32"),
    ]:
        with pytest.raises(ValueError, match=says):
            BridgeOptions.parse(bad)


@pytest.mark.parametrize(
    "value, instead",
    [("bf16", "auto_cast='all', auto_cast_type='bf16'"), ("auto", "auto_cast='none'")],
)
def test_the_retired_precision_option_is_one_clear_error(value, instead):
    with pytest.raises(ValueError, match=r"precision=.* is retired") as error:
        BridgeOptions.parse({"precision": value})
    assert instead in str(error.value)
    with pytest.raises(ValueError, match="is retired"):
        HwsimMode("tiny", precision=value)


def test_tf32_rounds_the_mantissa_to_ten_bits_ties_to_even():
    ulp = 2.0**-10
    values = np.array(
        [1 + ulp / 2, 1 + 1.5 * ulp, 1 + ulp + ulp / 4, -(1 + ulp / 2 + 2**-20), np.inf, np.nan],
        np.float32,
    )
    got = cast(values, TF32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:4], [1.0, 1 + 2 * ulp, 1 + ulp, -(1 + ulp)])
    assert np.isinf(got[4]) and np.isnan(got[5])
    assert machine_epsilon(TF32) == ulp
    x = torch.tensor([1 + ulp / 2 + 2**-20])
    assert round_to(x, Precision("matmult", "tf32")).item() == 1 + ulp  # the same on the CPU


def _linear_gelu():
    torch.manual_seed(0)
    layer = nn.Linear(96, 64)
    x = torch.randn(8, 96)

    def fn(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    inputs = [x, layer.weight.detach(), layer.bias.detach()]
    return fn, make_fx(fn)(*inputs), inputs


def _dtypes(lowered, opcode):
    """The operand dtypes of every instruction with ``opcode``."""
    found = set()
    for core in lowered.program.cores:
        for _engine, _pc, ins in core.instructions():
            if opcode == ins.OPCODE:
                found |= {ap.dtype.name for ap in ins.reads() if ap.memory.name != "HBM"}
    return found


@pytest.mark.parametrize(
    "mode, kind, matmul, activation",
    [
        ("none", "bf16", {"fp32"}, {"fp32"}),
        ("matmult", "bf16", {"bf16"}, {"fp32"}),  # GELU keeps the model's dtype
        ("matmult", "tf32", {"tf32"}, {"fp32"}),
        ("matmult", "fp8_e4m3", {"fp8_e4m3"}, {"fp32"}),
        ("all", "fp16", {"fp16"}, {"fp16"}),
    ],
)
def test_casts_where_the_compiler_puts_them(mode, kind, matmul, activation):
    """TensorE's operands in the cast dtype under matmult and all, PSUM in fp32, the GELU's
    tiles cast only under all; the result matches the CPU with the same rounding."""
    fn, graph, inputs = _linear_gelu()
    precision = Precision(mode, kind)
    lowered = lower_graph(graph, inputs, config="trn1", precision=precision)
    operands = set()
    for core in lowered.program.cores:
        for _engine, _pc, ins in core.instructions():
            if isinstance(ins, NcMatmul):
                operands |= {ins.stationary.dtype.name, ins.moving.dtype.name}
                assert ins.dst.dtype.name == "fp32"  # fp32 accumulation in PSUM
    assert operands == matmul
    assert _dtypes(lowered, "activation") <= activation | {"fp32"}
    assert activation <= _dtypes(lowered, "activation") | _dtypes(lowered, "tensor_tensor")
    got = lowered.run(inputs).outputs
    with reference_casts(precision) as casts:
        want = fn(*inputs)
    assert casts.cast_through(want) == precision.casts
    stats = compare(got, want, precision.tolerance(torch.float32, cast=precision.casts))
    assert stats.ok, stats
    if precision.casts:  # and what the cast costs against fp32, beyond the fp32 tolerance
        assert not compare(got, fn(*inputs), TOLERANCES["fp32"]).ok


def test_tf32_matmuls_cost_what_bf16_ones_do_and_about_a_quarter_of_fp32():
    """TensorE time of the matmul instructions alone: tf32 at the bf16 rate, fp32 ~4x
    (HARDWARE.md §2.1; the fixed access overhead per instruction does not scale); a
    [128, 256] x [256, 512] product, N = 512 per instruction."""
    x, w = torch.randn(128, 256), torch.randn(512, 256)

    def fn(x, w):
        return x @ w.t()

    graph = make_fx(fn)(x, w)

    def matmul_ticks(kind: str, mode: str = "matmult") -> int:
        lowered = lower_graph(graph, [x, w], config="trn1", precision=Precision(mode, kind))
        trace = lowered.run([x, w], numerics=False).result.trace
        return sum(
            r.end_tick - r.start_tick
            for r in trace.instructions
            if isinstance(r.instruction, NcMatmul) and r.instruction.moving.free_elements == 512
        )

    bf16, tf32, fp32 = matmul_ticks("bf16"), matmul_ticks("tf32"), matmul_ticks("bf16", "none")
    assert tf32 == bf16 > 0
    assert 3 * bf16 < fp32 <= 4 * bf16


def test_compiled_model_report_says_which_op_ran_in_which_dtype():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    options = {"config": "tiny", "fallback": "error"}  # the default: matmult, bf16
    with torch.no_grad():
        got = torch.compile(model, backend="hwsim", options=options)(x)
    report = bridge.last_report()
    assert report.numerics_ok
    dtypes = {r.op: r.compute_dtype for r in report.lowered()}
    assert dtypes["aten.addmm.default"] == "bf16" and dtypes["aten.gelu.default"] == "fp32"
    text = str(report)
    assert "auto-cast matmult/bf16" in text and "dtype" in text
    [output] = report.outputs
    assert output.computed_in == "bf16" and output.stats.ok
    assert output.vs_fp32 is not None and output.vs_fp32.max_abs > output.stats.max_abs
    with reference_casts(NEURON_DEFAULT):
        want = model(x)
    assert compare(got, want, TOLERANCES["bf16"]).ok


def test_an_output_no_cast_op_touched_is_held_to_its_own_tolerance():
    """x -> (linear(x), x * 2): the second output went through no matmul, so it is judged with
    fp32's tolerance even under matmult."""

    class TwoOutputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x):
            return self.linear(x), x * 2

    with torch.no_grad():
        torch.compile(TwoOutputs(), backend="hwsim", options={"config": "tiny"})(torch.randn(3, 8))
    outputs = bridge.last_report().outputs
    assert [o.computed_in for o in outputs] == ["bf16", "fp32"]
    assert all(o.stats.ok for o in outputs)


def test_mask_matmuls_of_embedding_bag_are_not_cast():
    """The bridge's embedding_bag is a gather and a mask matmul: an implementation of a sum of
    rows, not a model matmul, so auto-cast leaves it exact."""
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(20, 8, mode="sum").eval()
    indices, offsets = torch.tensor([3, 1, 7, 7, 2]), torch.tensor([0, 2])
    with torch.no_grad():
        got = torch.compile(bag, backend="hwsim", options={"fallback": "error"})(indices, offsets)
        want = bag(indices, offsets)
    report = bridge.last_report()
    assert {r.compute_dtype for r in report.lowered() if r.op == "aten.mm.default"} == {"fp32"}
    assert compare(got, want, TOLERANCES["fp32"]).ok and report.numerics_ok


def test_eager_mode_casts_matmuls_op_by_op():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
    x = torch.randn(4, 16)
    with torch.no_grad(), HwsimMode("tiny", fallback="error") as mode:
        got = model(x)
    records = {r.op: r for r in mode.report.lowered()}
    assert records["aten.addmm.default"].error["ok"] and mode.report.numerics_ok
    with torch.no_grad(), reference_casts(NEURON_DEFAULT):
        want = model(x)
    assert compare(got, want, TOLERANCES["bf16"]).ok
    assert not compare(got, model(x).detach(), TOLERANCES["fp32"]).ok

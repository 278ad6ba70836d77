"""The lowerings the model zoo needed, against torch (``check_op``: traced, lowered whole, run
with the race checker): sign, log1p, fmod/remainder, pow with integer operands, repeat, cat of
empty pieces, slice/select_scatter and index_copy, linalg_vector_norm, tril/triu, isin, bitwise
ops of bool with integers, bool arithmetic, integer max/min, as_strided. Their OpInfo samples
run in ``test_new_lowerings_pass_their_opinfo_samples`` (slow: it imports PyTorch's op_db) and
in the full float32 conformance run."""

from __future__ import annotations

import math

import pytest
import torch

from hwsim.bridge.opinfo import run_conformance
from tests.bridge.helpers import check_op

INF, NAN = math.inf, math.nan


def test_sign_gives_torch_zero_for_nan_and_negative_zero():
    special = torch.tensor([NAN, -0.0, 0.0, -3.0, 2.0, INF, -INF])
    check_op(lambda x, y: (torch.sign(x), torch.sign(y)), [special, (4, 37)])
    check_op(torch.sign, [torch.tensor([[-5, 0, 7], [3, -2, 0]])])


def test_log1p_keeps_the_digits_of_small_inputs():
    """log(1 + 1e-10) is 0 in fp32; log1p is 1e-10. inf, -1, x < -1 and NaN as torch gives."""
    special = torch.tensor([INF, -1.0, -2.0, 1e-10, -1e-10, NAN, 3.0, 1e30, -0.5, 1e-3, 0.0])
    check_op(lambda x, y: (torch.log1p(x), torch.log1p(y)), [special, (3, 200)], positive=True)


def test_fmod_and_remainder_of_floats_and_integers():
    check_op(
        lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), torch.fmod(a, 0.7)),
        [(5, 9), (1, 9)],
    )
    a, b = torch.tensor([-7, 7, 5, 0, -9, 2**30 + 3]), torch.tensor([3, -3, 4, 2, -3, 7])
    check_op(lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), torch.remainder(a, 3)), [a, b])


def test_pow_with_integer_operands():
    """BLOOM's ALiBi slopes: a float base to int32 powers; and integers to integer powers
    (exact in int32: 7 ** 11 is past fp32's 2**24)."""
    powers = torch.arange(1, 9, dtype=torch.int32)
    check_op(torch.pow, [torch.tensor(0.7), powers])
    check_op(torch.pow, [torch.tensor([2, -3, 4, 7]), torch.tensor([3, 3, 0, 11])])


@pytest.mark.parametrize("repeats", [(2, 3), (2, 1, 3), (130, 1)], ids=str)
def test_repeat(repeats):
    check_op(lambda x: x.repeat(*repeats), [(3, 5)])


def test_cat_of_an_empty_slice():
    """Phi-3's rotary split when the rotary part is the whole head: q[..., rot:] is empty."""
    check_op(lambda q: torch.cat([q[..., :8] * 2, q[..., 8:]], -1), [(2, 3, 8)])


def test_slice_and_select_scatter():
    check_op(
        lambda x, s, t, u: (
            torch.slice_scatter(x, s, 1, 1, None),
            torch.slice_scatter(x, t, 1, 0, 7, 3),
            torch.select_scatter(x, u, 0, -1),
        ),
        [(3, 8), (3, 7), (3, 3), (8,)],
    )


def test_index_copy_into_a_cache_at_computed_positions():
    """A static KV cache's update: the positions come from arange on the device."""

    def update(cache, new, rows):
        return cache.index_copy(2, torch.arange(5, 7), new), rows.index_copy(
            0, torch.arange(1), rows[2:3]
        )

    check_op(update, [(2, 3, 10, 4), (2, 3, 2, 4), (4, 3)])


@pytest.mark.parametrize("ord", [2, 1, INF, -INF, 0, 3, 0.5])
def test_linalg_vector_norm(ord):
    check_op(lambda x: torch.linalg.vector_norm(x, ord, dim=(0, 2), keepdim=True), [(4, 5, 6)])


def test_linalg_vector_norm_of_everything_across_tiles():
    check_op(lambda x: torch.linalg.vector_norm(x), [(40, 300)])


def test_tril_and_triu_by_affine_select():
    check_op(
        lambda x, y: (torch.tril(x, 1), torch.triu(x, -2), torch.tril(y), torch.triu(y, 3)),
        [(2, 5, 7), torch.ones(130, 9, dtype=torch.bool)],
    )


def test_isin_over_groups_of_test_elements():
    x = torch.tensor([[3, 5, 7, 1], [2, 2, 9, 3]])
    check_op(
        lambda x, t, u: (torch.isin(x, t), torch.isin(x, u, invert=True)),
        [x, torch.tensor([3, 9]), torch.arange(20) * 2],
    )


def test_bool_with_integers_and_bool_arithmetic():
    """Generation's ``unfinished & ~done`` (bool & int64) and products and sums of bools."""
    a, b = torch.tensor([True, False, True, True]), torch.tensor([1, 3, 2, 0])
    check_op(lambda a, b: (a & b, a * (b > 1), a + (b > 1)), [a, b])


def test_integer_max_and_min_are_exact_past_fp32():
    x = torch.tensor([[3, 50000001, -7], [2, 1, 9]])
    check_op(lambda x: (x.max(), x.min(), torch.amax(x, 1)), [x])


def test_as_strided_restrides_a_contiguous_value():
    check_op(lambda x: torch.as_strided(x * 2, (3, 2), (1, 3), 1), [(4, 3)])


#: OpInfo entries of the lowerings above (``hwsim validate opinfo --ops ...``).
NEW_OPINFOS = [
    "sign",
    "log1p",
    "fmod",
    "remainder",
    "pow",
    "repeat",
    "slice_scatter",
    "select_scatter",
    "index_copy",
    "linalg.vector_norm",
    "tril",
    "triu",
    "isin",
    "max.reduction_no_dim",
]


@pytest.mark.slow  # PyTorch's op_db takes 10-15 s to import
def test_new_lowerings_pass_their_opinfo_samples():
    run = run_conformance(NEW_OPINFOS, dtypes=("float32",), max_samples=2)
    assert run.count("failed") == 0, [o.first_failure() for o in run.ops if o.count("failed")]
    reached = {
        overload for overload, _ in run.overloads if run.overloads[(overload, "float32")].reached
    }
    for op in (
        "sign",
        "log1p",
        "fmod.Tensor",
        "remainder.Tensor",
        "repeat",
        "slice_scatter",
        "select_scatter",
        "index_copy",
        "linalg_vector_norm",
        "tril",
        "triu",
    ):
        name = f"aten.{op}" + ("" if "." in op else ".default")
        assert name in reached, name
    assert run.meets_target


def test_backward_of_repeat_slices_and_index_put_with_a_slice():
    """The backward graph of repeat (a sum over the copies), slicing (slice_scatter) and
    ``z[:, idx] = v`` (index_put after a slice; its gradient gathers) runs on the simulator
    under fallback='error', with eager's gradients."""
    import torch._dynamo

    from hwsim import bridge

    def loss_of(x, v, idx):
        z = x.repeat(2, 1).clone()
        z[:, idx] = v
        return (z[1:, :3] * 2 + z[0, 2:]).square().sum()

    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(3)
    x, v = torch.randn(3, 5, generator=generator), torch.randn(6, 2, generator=generator)
    idx = torch.tensor([4, 1])
    got = [t.clone().requires_grad_() for t in (x, v)]
    want = [t.clone().requires_grad_() for t in (x, v)]
    options = {"fallback": "error", "config": "tiny"}
    torch.compile(loss_of, backend="hwsim", options=options)(*got, idx).backward()
    loss_of(*want, idx).backward()
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.grad, w.grad, rtol=1e-5, atol=1e-5)
    backward = {r.op for r in bridge.last_report().ops if r.phase == "backward"}
    assert {"aten.slice_scatter.default", "aten.index_put.default"} <= backward

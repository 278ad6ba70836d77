"""The ``hwsim`` device: registration, tensors in simulated HBM, timed transfers, eager ops on the
simulator (checked, recorded), views and in-place writes, errors, memory, fallbacks."""

from __future__ import annotations

import gc

import pytest
import torch

from hwsim import bridge
from hwsim.bridge import device
from hwsim.bridge.device_ops import functional_twin
from hwsim.bridge.device_session import TO_DEVICE, TO_HOST, transfer_ns
from hwsim.bridge.device_tensor import HwsimTensor, host_reference
from hwsim.bridge.errors import FallbackError
from hwsim.config import load_config

aten = torch.ops.aten


def _statuses(report):
    return [(r.op, r.status) for r in report.ops]


def test_to_device_and_back_keeps_values_and_times_both_copies_exactly():
    report = device.configure("tiny")
    x = torch.randn(3, 4)
    d = x.to("hwsim")
    assert isinstance(d, HwsimTensor) and d.device == torch.device("hwsim", 0)
    assert d.shape == x.shape and d.dtype == x.dtype and d.is_hwsim
    back = d.cpu()
    assert type(back) is torch.Tensor and back.device.type == "cpu"
    assert torch.equal(back, x)
    # tiny: 100 ns + 48 bytes at 4 bytes/ns, each way
    assert [(r.op, r.status, r.sim_ns) for r in report.ops] == [
        (TO_DEVICE, "transfer", 112.0),
        (TO_HOST, "transfer", 112.0),
    ]
    assert report.total_sim_ns == 224.0
    assert device.summary()["transfers"][TO_DEVICE] == {"count": 1, "bytes": 48, "ns": 112.0}


def test_transfer_time_is_latency_plus_bytes_over_the_host_bandwidth():
    trn2 = load_config("trn2")
    assert transfer_ns(trn2, 0) == trn2.host.latency_ns
    assert transfer_ns(trn2, 16_000) == trn2.host.latency_ns + 16_000 / 16
    device.configure("trn2")
    value = torch.tensor([2.5, 1.0], device="hwsim")[0].item()
    assert value == 2.5
    d2h = device.report().ops[-1]
    assert (d2h.op, d2h.sim_ns) == (TO_HOST, 1300 + 4 / 16)


def test_factories_make_device_tensors():
    device.configure("tiny")
    assert torch.empty(2, 3, device="hwsim").shape == (2, 3)
    assert torch.empty_strided((2, 3), (1, 2), device="hwsim").stride() == (1, 2)
    assert torch.equal(torch.arange(5, device="hwsim").cpu(), torch.arange(5))
    assert torch.equal(torch.arange(1, 9, 3, device="hwsim").cpu(), torch.arange(1, 9, 3))
    assert torch.equal(torch.eye(2, 3, device="hwsim").cpu(), torch.eye(2, 3))
    assert torch.equal(torch.zeros(2, 3, device="hwsim").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.full((2,), 7.0, device="hwsim").cpu(), torch.full((2,), 7.0))
    assert torch.equal(torch.tensor([[1, 2]], device="hwsim").cpu(), torch.tensor([[1, 2]]))
    made = torch.zeros_like(torch.ones(2, device="hwsim"), device="cpu")
    assert type(made) is torch.Tensor and made.device.type == "cpu"


def test_random_fills_draw_from_the_cpu_generator():
    device.configure("tiny")
    torch.manual_seed(0)
    on_device = torch.randn(5, device="hwsim")
    torch.manual_seed(0)
    assert torch.equal(on_device.cpu(), torch.randn(5))
    assert [r.status for r in device.report().fallbacks()] == ["cpu"]  # normal_ has no lowering


def test_pytorch_rng_helpers_save_and_restore_the_device_generator():
    """torch.random.fork_rng and torch.testing's freeze_rng_state (which OpInfo samples use)
    ask the accelerator's module for its RNG state: without it they raised AttributeError."""
    from torch.testing._utils import freeze_rng_state

    device.configure("tiny")
    torch.manual_seed(1)
    with torch.random.fork_rng(device_type="hwsim"):
        torch.randn(3, device="hwsim")  # draws, then the state is restored
    with freeze_rng_state():
        torch.randn(3)
    after = torch.randn(4, device="hwsim").cpu()
    torch.manual_seed(1)
    assert torch.equal(after, torch.randn(4))
    assert torch.equal(torch.hwsim.get_rng_state(), torch.get_rng_state())


def test_eager_ops_run_on_the_simulator_checked_against_the_cpu():
    report = device.configure("tiny", fallback="error", auto_cast="none")
    x, w = torch.randn(5, 7), torch.randn(7, 3)
    got = torch.relu(x.to("hwsim") @ w.to("hwsim")) * 2
    assert isinstance(got, HwsimTensor)
    torch.testing.assert_close(got.cpu(), torch.relu(x @ w) * 2, rtol=1e-5, atol=1e-5)
    ran = [r for r in report.ops if r.status == "simulator"]
    assert [r.op for r in ran] == ["aten.mm.default", "aten.relu.default", "aten.mul.Tensor"]
    assert all(r.sim_ns > 0 and r.error is not None and r.error["ok"] for r in ran)
    assert report.numerics_ok and report.fallbacks() == []


def test_views_alias_their_base_and_writes_through_them_land_in_it():
    report = device.configure("tiny", fallback="error", auto_cast="none")
    base = torch.zeros(4, 6).to("hwsim")
    row = base[1]
    row.add_(3.0)  # add on the simulator, written into the view
    first, second = torch.split(base, 2)  # aliasing results, views too
    second.fill_(1.0)
    expected = torch.zeros(4, 6)
    expected[1] += 3.0
    expected[2:] = 1.0
    assert torch.equal(base.cpu(), expected)
    assert first._host.untyped_storage().data_ptr() == base._host.untyped_storage().data_ptr()
    views = {op for op, status in _statuses(report) if status == "view"}
    assert {"aten.select.int", "aten.split.Tensor"} <= views
    assert ("aten.add.Tensor", "simulator") in _statuses(report)
    assert ("aten.full_like.default", "simulator") in _statuses(report)


def test_in_place_ops_run_their_functional_twin_and_keep_pytorchs_rules():
    assert functional_twin(aten.add_.Tensor) is aten.add.Tensor
    assert functional_twin(aten.zero_.default) is aten.zeros_like.default
    assert functional_twin(aten.add.out) is None  # out= variants run on the CPU
    device.configure("tiny")
    ints = torch.ones(3, dtype=torch.int64).to("hwsim")
    with pytest.raises(RuntimeError, match=r"result type torch\.float32 can't be cast to the"):
        ints.add_(0.5)
    small = torch.ones(3).to("hwsim")
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match"):
        small.add_(torch.ones(2, 3).to("hwsim"))
    expanded = torch.ones(1).to("hwsim").expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        expanded.mul_(2.0)
    halves = torch.ones(3, dtype=torch.float16).to("hwsim")
    halves.add_(torch.ones(3).to("hwsim"))  # float32 result cast into float16, as in PyTorch
    assert halves.dtype == torch.float16 and torch.equal(halves.cpu(), torch.full((3,), 2.0).half())


def test_out_variants_run_on_the_cpu_and_may_not_resize():
    report = device.configure("tiny", fallback="cpu")
    a, b = torch.ones(3).to("hwsim"), torch.ones(3).to("hwsim")
    out = torch.empty(3).to("hwsim")
    assert torch.add(a, b, out=out) is out
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))
    assert report.fallbacks()[-1].reason == "mutation"
    with pytest.raises(RuntimeError, match="resized or restrided its argument in place"):
        torch.add(a, b, out=torch.empty(0).to("hwsim"))


def test_shape_changing_in_place_ops_raise():
    device.configure("tiny")
    x = torch.ones(2, 3).to("hwsim")
    with pytest.raises(NotImplementedError, match=r"aten\.t_\.default changes a tensor's shape"):
        x.t_()
    with pytest.raises(NotImplementedError, match=r"resize_"):
        x.resize_(7)
    assert x.resize_(2, 3) is x  # to the shape it has: nothing to do


def test_two_devices_in_one_op_raise_but_cpu_scalars_are_scalars():
    device.configure("tiny")
    x = torch.ones(2, 3).to("hwsim")
    with pytest.raises(RuntimeError, match="found at least two devices, hwsim:0 and cpu"):
        x + torch.ones(2, 3)
    assert torch.equal((x + torch.tensor(2.0)).cpu(), torch.full((2, 3), 3.0))
    with pytest.raises(RuntimeError, match=r"aten\.add_\.Tensor would write a tensor on cpu"):
        torch.tensor(1.0).add_(torch.ones(()).to("hwsim"))


def test_fallback_policy_cpu_warn_error():
    x = torch.randn(4, 9)
    report = device.configure("tiny", fallback="cpu")
    values = torch.kthvalue(x.to("hwsim"), 2, -1).values
    assert torch.equal(values.cpu(), torch.kthvalue(x, 2, -1).values)
    fallbacks = [(r.op, r.reason) for r in report.fallbacks()]
    assert fallbacks == [("aten.kthvalue.default", "no lowering")]
    assert device.summary()["cpu_fallbacks"] == 1
    device.configure("tiny", fallback="warn")
    with pytest.warns(UserWarning, match=r"aten\.kthvalue\.default"):
        torch.kthvalue(x.to("hwsim"), 2)
    device.configure("tiny", fallback="error")
    with pytest.raises(FallbackError, match=r"aten\.kthvalue\.default: no lowering"):
        torch.kthvalue(x.to("hwsim"), 2)


def test_configure_rejects_trace_and_unknown_options():
    with pytest.raises(ValueError, match=r"report\(\)\.save\(folder\)"):
        device.configure("tiny", trace="somewhere")
    with pytest.raises(ValueError, match="unknown hwsim option 'fallbak'"):
        device.configure("tiny", fallbak="cpu")


def test_host_reference_runs_on_the_host_and_records_nothing():
    report = device.configure("tiny")
    x = torch.ones(3).to("hwsim")
    before = len(report.ops)
    with host_reference():
        y = (x * 3).sum()
        assert isinstance(y, HwsimTensor) and y.item() == 9.0
    assert len(report.ops) == before


def test_memory_counts_storages_once_and_frees_them():
    device.configure("tiny")
    gc.collect()
    start = torch.hwsim.memory_allocated()
    x = torch.empty(256, device="hwsim")
    views = [x[:128], x.view(16, 16)]
    assert torch.hwsim.memory_allocated() == start + 1024
    del x, views
    gc.collect()
    assert torch.hwsim.memory_allocated() == start
    assert torch.hwsim.max_memory_allocated() >= start + 1024


def test_allocating_past_the_cores_hbm_raises_out_of_memory():
    config = load_config("tiny", {"hbm.capacity_bytes_per_stack": 1 << 20})
    device.configure(config)
    gc.collect()
    free = (1 << 20) - torch.hwsim.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError, match="out of simulated HBM"):
        torch.empty(free // 4 + 1, device="hwsim")
    kept = torch.empty(free // 4, device="hwsim")  # exactly what is left fits
    assert torch.hwsim.memory_allocated() == 1 << 20
    del kept
    device.configure("tiny")


def test_module_to_moves_parameters_in_place():
    model = torch.nn.Linear(4, 2)
    weight = model.weight
    model.to("hwsim")
    assert model.weight is weight  # swapped in place: an optimizer made before still holds it
    assert isinstance(model.weight, torch.nn.Parameter) and model.weight.device.type == "hwsim"
    replacement = torch.zeros(2, 4).to("hwsim")
    model.weight.data = replacement
    assert torch.equal(model.weight.cpu(), torch.zeros(2, 4))
    with pytest.raises(RuntimeError, match=r"cannot set \.data"):
        model.weight.data = torch.zeros(2, 4)


def test_repr_shows_the_device():
    device.configure("tiny")
    text = repr(torch.tensor([1.0, 2.0]).to("hwsim").requires_grad_())
    assert text == "tensor([1., 2.], device='hwsim:0', requires_grad=True)"


def test_report_is_the_bridges_report_and_prints():
    report = device.configure("tiny")
    torch.ones(2).to("hwsim").neg()
    assert report is device.report() and isinstance(report, bridge.Report)
    assert report.mode == "device"
    assert "hwsim bridge (device) on tiny" in report.text()


def test_state_dicts_save_and_load_on_the_device(tmp_path):
    device.configure("tiny")
    model = torch.nn.Linear(3, 2).to("hwsim")
    torch.save(model.state_dict(), tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt")  # weights_only: nothing but allowed rebuilds
    assert all(isinstance(v, HwsimTensor) for v in loaded.values())
    other = torch.nn.Linear(3, 2).to("hwsim")
    other.load_state_dict(loaded)
    assert torch.equal(other.weight.cpu(), model.weight.cpu())
    on_cpu = torch.load(tmp_path / "m.pt", map_location="cpu")
    assert all(type(v) is torch.Tensor for v in on_cpu.values())
    torch.save(model.weight, tmp_path / "w.pt")
    assert isinstance(torch.load(tmp_path / "w.pt"), torch.nn.Parameter)


def test_another_privateuse1_backend_makes_the_device_unavailable(monkeypatch):
    monkeypatch.setattr(device, "_LIBRARIES", [])
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "npu")
    with pytest.raises(device.DeviceUnavailable, match="PrivateUse1 backend is already 'npu'"):
        device.register()


def test_fills_never_read_the_bytes_they_overwrite():
    """``torch.ones(..., dtype=torch.long)`` is ``empty`` then ``fill_``: the fill's functional
    twin (``full_like``) takes the empty tensor only for its metadata, so its bytes (anything
    ``torch.empty`` left there, often past int32) must not be range-checked or copied in."""
    report = device.configure("tiny", fallback="error", auto_cast="none")
    for garbage in (2**40, -(2**40), 139953166032064):
        t = torch.empty(3, dtype=torch.long, device="hwsim")
        t._host.fill_(garbage)  # what an uninitialised allocation may hold
        t.fill_(1)
        assert t.cpu().tolist() == [1, 1, 1]
        z = torch.empty(2, 2, dtype=torch.long, device="hwsim")
        z._host.fill_(garbage)
        z.zero_()
        assert z.cpu().tolist() == [[0, 0], [0, 0]]
    assert {
        r.status
        for r in report.ops
        if r.op in ("aten.full_like.default", "aten.zeros_like.default")
    } == {"simulator"}
    ones = torch.ones(1, dtype=torch.long, device="hwsim")
    assert ones.cpu().tolist() == [1]


def test_int64_inputs_that_are_read_are_still_range_checked():
    device.configure("tiny", fallback="error")
    big = torch.tensor([2**40, 1], dtype=torch.long).to("hwsim")
    with pytest.raises(Exception, match="outside int32"):
        big + 1


def test_a_cast_of_infinities_to_int64_on_the_device_equals_the_cpus():
    device.configure("tiny", fallback="error")
    x = torch.tensor([-float("inf"), float("inf"), float("nan"), -2.5, 7.9])
    got = x.to("hwsim").to(torch.long).cpu()
    assert torch.equal(got, x.to(torch.long))  # INT64_MIN for the first three

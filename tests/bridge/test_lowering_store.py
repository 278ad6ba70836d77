"""Lowered graphs on disk between processes (bridge.lowering_store): reused only for the same
graph, options, config and hwsim source; corrupt, planted or hostile files are refused, never
executed; the folder moves or turns off with HWSIM_LOWERING_CACHE.

A new process is played by clearing the process's cache (``LOWERED.clear()``): the lowering can
then only come from the file."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from hwsim.bridge import lowering_store
from hwsim.bridge.lowering_cache import LOWERED
from hwsim.config import load_config

OPTIONS = {"config": "tiny", "fallback": "error"}


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).eval()


def _run(model: torch.nn.Module, x: torch.Tensor, options=OPTIONS) -> tuple[torch.Tensor, float]:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="hwsim", options=dict(options))
    with torch.no_grad():
        out = compiled(x)
    from hwsim import bridge

    return out, sum(run["total_ns"] for run in bridge.last_report().runs)


def _new_process() -> None:
    LOWERED.clear()


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.hwprog"))


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lowered"
    monkeypatch.setenv(lowering_store.ENV, str(folder))
    _new_process()
    return folder


def test_a_new_process_reuses_the_stored_lowering_with_the_same_results(store):
    x = torch.randn(4, 32)
    fresh, fresh_ns = _run(_mlp(0), x)
    assert LOWERED.store.writes == 1 and len(_files(store)) == 1
    assert (store.stat().st_mode & 0o777) == 0o700
    _new_process()
    other_weights = _mlp(1)
    got, got_ns = _run(other_weights, x)
    assert (LOWERED.store.hits, LOWERED.store.writes) == (1, 0)
    assert got_ns == fresh_ns  # the same program: the same simulated time
    with torch.no_grad():
        torch.testing.assert_close(got, other_weights(x), rtol=2e-2, atol=2e-2)
        assert not torch.allclose(fresh, got)  # its own weights, bound on the call


def test_the_weights_never_reach_the_disk(store):
    model = torch.nn.Linear(64, 1024).eval()  # 256 KiB of weights
    _run(model, torch.randn(2, 64))
    (path,) = _files(store)
    assert path.stat().st_size < 64 * 1024


def test_other_options_config_or_source_are_lowered_anew(store, monkeypatch):
    x = torch.randn(4, 32)
    _run(_mlp(), x)
    _new_process()
    _run(_mlp(), x, {**OPTIONS, "auto_cast": "none"})
    slower = load_config("tiny", ["hbm.bandwidth_bytes_per_ns_per_stack=4"])  # content, not name
    _new_process()
    _run(_mlp(), x, {**OPTIONS, "config": slower})
    monkeypatch.setattr(lowering_store, "source_hash", lambda: "an edited hwsim")
    _new_process()
    _run(_mlp(), x)
    assert LOWERED.store.hits == 0 and len(_files(store)) == 4


def test_the_source_hash_covers_the_bridge_and_torch():
    lowering_store.source_hash.cache_clear()
    first = lowering_store.source_hash()
    assert first == lowering_store.source_hash() and len(first) == 64


def test_off_disables_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv(lowering_store.ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _new_process()
    _run(_mlp(), torch.randn(4, 32))
    assert lowering_store.store_dir() is None and LOWERED.store.writes == 0
    assert not any(tmp_path.iterdir())


def test_the_default_folder_is_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(lowering_store.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert lowering_store.store_dir() == tmp_path / "hwsim" / "lowered"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "pickle"])
def test_a_corrupt_or_hostile_file_is_refused_and_lowered_again(store, tmp_path, damage):
    x = torch.randn(4, 32)
    _, fresh_ns = _run(_mlp(), x)
    (path,) = _files(store)
    marker = tmp_path / "executed"
    if damage == "garbage":
        path.write_bytes(b"not a zip at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-100])
    else:  # a pickle that would create ``marker`` if anything unpickled it
        path.write_bytes(pickle.dumps(_Planted(str(marker))))
    _new_process()
    with pytest.warns(UserWarning, match="lowering cache: ignored .*lowered again"):
        _, got_ns = _run(_mlp(), x)
    assert not marker.exists()
    assert got_ns == fresh_ns and LOWERED.store.hits == 0
    assert LOWERED.store.writes == 1  # a sound file replaced it
    _new_process()
    _run(_mlp(), x)
    assert LOWERED.store.hits == 1


class _Planted:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_another_graphs_file_under_this_name_is_refused(store):
    _run(_mlp(), torch.randn(4, 32))
    _run(_mlp(), torch.randn(8, 32))
    first, second = _files(store)
    second.write_bytes(first.read_bytes())  # a valid archive, but of the other graph
    _new_process()
    with pytest.warns(UserWarning, match="another graph's lowering"):
        _run(_mlp(), torch.randn(4, 32))
        _run(_mlp(), torch.randn(8, 32))
    assert LOWERED.store.hits == 1 and len(LOWERED.store.refused) == 1


def test_a_folder_others_may_write_is_not_used(store):
    store.mkdir(mode=0o700)
    os.chmod(store, 0o777)
    with pytest.warns(UserWarning, match="another user owns it or may write to it"):
        _run(_mlp(), torch.randn(4, 32))
    assert not _files(store) and LOWERED.store.writes == 0


def test_the_least_recently_used_files_are_evicted(store, monkeypatch):
    monkeypatch.setattr(lowering_store, "MAX_FILES", 2)
    for rows in (1, 2, 3):
        _run(_mlp(), torch.randn(rows, 32))
    assert LOWERED.store.writes == 3 and len(_files(store)) == 2


def test_a_write_that_fails_is_a_warning_and_the_graph_still_runs_on_the_simulator(
    store, monkeypatch
):
    from hwsim import bridge
    from hwsim.output_paths import OutputError
    from hwsim.workloads import saved

    def refuse(*_):
        raise OutputError("refused")

    monkeypatch.setattr(saved, "save_program", refuse)
    with pytest.warns(UserWarning, match="cannot write to"):
        _run(_mlp(), torch.randn(4, 32))
    assert not bridge.last_report().fallbacks() and LOWERED.store.writes == 0


class _WithConstant(torch.nn.Module):
    """A graph with a real-tensor constant (GPT-2's position ids are one): the store writes it
    while dynamo's fake-tensor mode is active."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(16, dtype=torch.float32).unsqueeze(0)
        return self.lin(x) + positions


def test_a_graph_with_a_constant_is_stored_and_reused_under_fake_tensors(store):
    x = torch.randn(4, 32)
    fresh, fresh_ns = _run(_WithConstant().eval(), x)
    assert len(_files(store)) == 1
    _new_process()
    again, again_ns = _run(_WithConstant().eval(), x)
    assert LOWERED.store.hits == 1
    assert torch.equal(fresh, again) and fresh_ns == again_ns


def _training_grads(seed: int, x: torch.Tensor) -> list[torch.Tensor]:
    torch._dynamo.reset()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    compiled = torch.compile(model, backend="hwsim", options=dict(OPTIONS))
    compiled(x).square().mean().backward()
    return [p.grad for p in model.parameters()]


def test_a_training_step_from_the_store_gives_the_fresh_gradients(store):
    """A training forward saves each weight's transpose for backward as a view of the weight's
    storage (``OutputBinding.storage_order``): a stored lowering that forgot how its outputs lie
    gave every gradient wrong in the next process."""
    from hwsim import bridge

    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(3))
    fresh = _training_grads(0, x)
    assert LOWERED.store.writes >= 2  # forward and backward
    _new_process()
    again = _training_grads(0, x)
    assert LOWERED.store.hits >= 2
    for want, got in zip(fresh, again, strict=True):
        assert torch.equal(want, got)
    assert bridge.last_report().numerics_ok


def test_every_field_of_a_lowering_is_stored_or_named_as_not_stored(store):
    """A field added to a lowering or its bindings and not written would come back from the
    disk as its default: wrong values in the next process, no error."""
    import dataclasses

    from hwsim.bridge.graph_bindings import InputBinding, OutputBinding
    from hwsim.bridge.graph_lowering import LoweredGraph

    def names(cls: type) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    _run(_mlp(), torch.randn(4, 32))
    [lowered] = LOWERED._graphs.values()
    fields = lowering_store._encode_fields(lowered, "key")
    assert names(LoweredGraph) == (set(fields) - {"key"}) | lowering_store.NOT_STORED
    assert names(InputBinding) == set(fields["inputs"][0])
    assert names(OutputBinding) == set(fields["outputs"][0])

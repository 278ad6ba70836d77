"""A graph node's identity travels as a typed ``Origin`` in its instructions' tags.

The trace (instruction args, the Ops track), the report's per-op times and a saved program read
op, node and a fused group's members as fields; the tag's text stays what traces show.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.errors import SavedProgramError
from hwsim.isa.origin import Origin, Tag, origin_of
from hwsim.trace.chrome import write_chrome_events
from hwsim.workloads.program_archive import content_hash
from hwsim.workloads.saved import load_program, save_program

CHAIN_MEMBERS = ("mul", "add", "relu", "mul_1", "sigmoid")


def _linear(x, w, b):
    return torch.relu(torch.addmm(b, x, w))


def _chain(x, y):
    return torch.sigmoid(torch.relu(x * y + 1.0) * 2.0)


def _lower(fn, inputs, passes):
    return lower_graph(make_fx(fn)(*inputs), inputs, config="trn2", passes=passes)


@pytest.fixture(scope="module")
def linear():
    inputs = [torch.randn(64, 32), torch.randn(32, 48), torch.randn(48)]
    lowered = _lower(_linear, inputs, "none")
    return lowered, lowered.run(inputs)


@pytest.fixture(scope="module")
def chain():
    inputs = [torch.randn(128, 64), torch.randn(128, 64)]
    lowered = _lower(_chain, inputs, ["fusion"])
    return lowered, lowered.run(inputs)


def test_each_instruction_names_its_op_and_node_as_fields(linear) -> None:
    _, run = linear
    tags = [r.instruction.tag for r in run.result.trace.instructions]
    assert all(type(tag) is Tag for tag in tags)
    origins = {origin_of(tag) for tag in tags}
    assert origins == {Origin("addmm", "addmm"), Origin("relu", "relu")}
    for tag in tags:  # the text traces show is the origin's label at the emitting line
        assert tag == f"{tag.origin.label}:{tag.location}" and tag.scope == tag.origin.label
    assert set(run.op_times) == {"addmm", "relu"}
    assert all(time.members == (node,) for node, time in run.op_times.items())


def test_a_fused_group_is_timed_as_its_members(chain) -> None:
    _, run = chain
    (origin,) = {origin_of(r.instruction.tag) for r in run.result.trace.instructions}
    assert origin == Origin(
        "fused[mul+add+relu+mul+sigmoid]", "+".join(CHAIN_MEMBERS), CHAIN_MEMBERS
    )
    (time,) = run.op_times.values()
    assert time.members == CHAIN_MEMBERS and time.instructions == len(run.result.trace.instructions)


def test_the_trace_carries_op_node_and_members(chain) -> None:
    _, run = chain
    out = io.StringIO()
    write_chrome_events(run.result.trace, out)
    events = json.loads(out.getvalue())["traceEvents"]
    sliced = [e for e in events if e.get("ph") == "X" and e.get("cat") not in ("op", "critical")]
    assert sliced and all(e["args"]["op"] == "fused[mul+add+relu+mul+sigmoid]" for e in sliced)
    assert all(e["args"]["node"] == "+".join(CHAIN_MEMBERS) for e in sliced)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "op"]
    assert ops and all(e["args"]["members"] == list(CHAIN_MEMBERS) for e in ops)


def test_a_tag_pickles_with_its_origin(linear) -> None:
    tag = linear[1].result.trace.instructions[0].instruction.tag
    again = pickle.loads(pickle.dumps(tag))
    assert (again, again.scope, again.location, again.origin) == (
        tag,
        tag.scope,
        tag.location,
        tag.origin,
    )


def _tags(program) -> list[str]:
    return [i.tag for core in program.cores for _, _, i in core.instructions()]


def test_a_saved_program_keeps_its_origins_and_a_format_2_file_loads(linear, tmp_path) -> None:
    lowered, _ = linear
    path = save_program(lowered.program, tmp_path / "linear.hwprog")
    loaded = _tags(load_program(path))
    assert loaded == _tags(lowered.program)
    assert [origin_of(t) for t in loaded] == [origin_of(t) for t in _tags(lowered.program)]

    old = _rewritten(path, tmp_path / "old.hwprog", lambda d: d.pop("origins"), version=2)
    plain = _tags(load_program(old))  # a format 2 file: no origins, plain tags
    assert plain == loaded and all(origin_of(t) is None for t in plain)


def test_an_origin_that_does_not_match_its_tag_is_refused(linear, tmp_path) -> None:
    path = save_program(linear[0].program, tmp_path / "linear.hwprog")

    def edit(document):
        document["origins"][0]["origin"]["node"] = "elsewhere"

    bad = _rewritten(path, tmp_path / "bad.hwprog", edit)
    says = r"origins\[0\]\.tag: tag '.*' does not start with its origin's 'addmm/elsewhere:'"
    with pytest.raises(SavedProgramError, match=says):
        load_program(bad)


def _rewritten(path: Path, to: Path, edit, version: int | None = None) -> Path:
    """``path``'s archive with its document edited (and its manifest's version set), rehashed."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(entries["program.json"])
    edit(document)
    entries["program.json"] = json.dumps(document).encode()
    manifest = json.loads(entries.pop("manifest.json"))
    manifest["sha256"] = content_hash(entries)
    if version is not None:
        manifest["version"] = version
    with zipfile.ZipFile(to, "w") as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
        for name, data in entries.items():
            archive.writestr(name, data)
    return to


def test_a_fused_mlp_is_timed_as_its_member_nodes() -> None:
    """An MLP group's kind (``fused[mlp:...]``) holds a colon: read back from the tag's text it
    gave the key 'fused[mlp' and no node; as a field it is the group's nodes."""
    from hwsim.config import load_config
    from tests.bridge.test_bridge_mlp_fusion import GATED_SBUF, _lower_gated

    lowered, inputs = _lower_gated(512, 128, 2048, load_config("trn1", GATED_SBUF))
    run = lowered.run(inputs)
    origins = {origin_of(r.instruction.tag) for r in run.result.trace.instructions}
    (mlp,) = [o for o in origins if o is not None and o.op.startswith("fused[mlp:")]
    assert len(mlp.members) > 3 and mlp.node == "+".join(mlp.members)
    assert run.op_times[mlp.node].members == mlp.members
    assert not any(key.startswith("fused[") for key in run.op_times)

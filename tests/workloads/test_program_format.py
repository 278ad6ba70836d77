"""The saved-program format is data: a zip of JSON and ``.npy`` arrays, written from the ISA
registry's field types, that gives back the same program and the same simulation."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import math
import types
import typing
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.dtypes import BF16, DTYPES, FP32, DType
from hwsim.errors import SavedProgramError
from hwsim.isa import ISA, AccessPattern, Instruction, MemorySpace, contiguous
from hwsim.machine.simulator import run
from hwsim.program import Program
from hwsim.workloads.program_archive import FORMAT, FORMAT_VERSION, content_hash
from hwsim.workloads.program_codec import decode_instruction, encode_instruction
from hwsim.workloads.saved import load_program, save_program
from tests.workloads.program_examples import (
    TINY_PAIR,
    TINY_V4,
    every_multicore_op_program,
    every_op_program,
    every_v4_op_program,
)


def _strict_json(data: Any) -> Any:
    """Through JSON text as the file holds it (no NaN or Infinity literals)."""
    return json.loads(json.dumps(data, allow_nan=False))


# ---- every instruction class, from its field types ----------------------------------------------


def _example(tp: Any, variant: int) -> Any:
    """A value of type ``tp``; ``variant`` picks among union members and enum members."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is AccessPattern:
        memory = (MemorySpace.SBUF, MemorySpace.PSUM, MemorySpace.HBM)[variant % 3]
        return contiguous(memory, BF16, 4, (2, 3), offset_bytes=8, tensor="t" * (variant % 2))
    if tp is DType:
        return list(DTYPES.values())[variant % len(DTYPES)]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        members = list(tp)
        return members[variant % len(members)]
    if tp is bool:
        return variant % 2 == 0
    if tp is int:
        return -7 + variant
    if tp is float:
        return (-math.inf, 0.25, math.inf, -0.0)[variant % 4]
    if tp is str:
        return f"s{variant}"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_example(args[0], variant + k) for k in range(2))
    if origin is tuple:
        return tuple(_example(a, variant) for a in args)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        members = [a for a in args if a is not type(None)] + [type(None)] * (type(None) in args)
        member = members[variant % len(members)]
        return None if member is type(None) else _example(member, variant)
    raise AssertionError(f"no example for {tp}")


def _instances(cls: type[Instruction]) -> list[Instruction]:
    hints = typing.get_type_hints(cls)
    out = []
    for variant in range(4):
        values = {
            f.name: _example(hints[f.name], variant)
            for f in dataclasses.fields(cls)
            if f.name != "engine"
        }
        out.append(cls(engine=cls.ENGINES[variant % len(cls.ENGINES)], **values))
    return out


@pytest.mark.parametrize("opcode", sorted(ISA))
def test_every_registered_instruction_class_round_trips(opcode: str) -> None:
    for instruction in _instances(ISA[opcode]):
        data = _strict_json(encode_instruction(instruction))
        assert data["opcode"] == opcode
        back = decode_instruction(data)
        assert back == instruction and back.name == instruction.name
        for f in dataclasses.fields(instruction):
            want, got = getattr(instruction, f.name), getattr(back, f.name)
            assert type(got) is type(want), (f.name, want, got)  # enums stay enums, ints ints
            if isinstance(want, float) and math.isnan(want):
                assert math.isnan(got)


def test_enums_and_dtypes_are_written_by_name() -> None:
    (instruction,) = [
        i
        for core in every_op_program().cores
        for _, _, i in core.instructions()
        if i.OPCODE == "affine_select"
    ]
    data = _strict_json(encode_instruction(instruction))
    assert data["cmp_op"] == "is_ge" and data["on_false"] == "-Infinity"
    assert data["dst"]["memory"] == "SBUF" and data["dst"]["dtype"] == "fp32"
    assert decode_instruction(data).cmp_op is instruction.cmp_op  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class _TableLookup(Instruction):
    """An instruction with a field no JSON value says the type of."""

    OPCODE: ClassVar[str] = "test_table_lookup"
    ENGINES: ClassVar[tuple[str, ...]] = ("vector",)

    dst: AccessPattern
    table: dict[str, int]


def test_an_instruction_field_the_format_cannot_express_is_refused_when_saved(
    tmp_path: Path,
) -> None:
    ISA[_TableLookup.OPCODE] = _TableLookup
    try:
        program = Program()
        dst = contiguous(MemorySpace.SBUF, FP32, 4, 8)
        program.cores[0].streams["vector"].append(
            _TableLookup(engine="vector", dst=dst, table={"a": 1})
        )
        with pytest.raises(SavedProgramError) as error:
            save_program(program, tmp_path / "bad.hwprog")
    finally:
        del ISA[_TableLookup.OPCODE]
    message = str(error.value)
    assert "instruction _TableLookup (test_table_lookup) cannot be saved: field table:" in message
    assert "dict" in message and not (tmp_path / "bad.hwprog").exists()


def test_an_unregistered_instruction_class_is_refused_when_saved(tmp_path: Path) -> None:
    program = Program()
    dst = contiguous(MemorySpace.SBUF, FP32, 4, 8)
    program.cores[0].streams["vector"].append(_TableLookup(engine="vector", dst=dst, table={}))
    with pytest.raises(
        SavedProgramError,
        match=r"cores\[0\]\.streams\.vector\[0\]: _TableLookup "
        "is not the instruction registered as 'test_table_lookup'",
    ):
        save_program(program, tmp_path / "bad.hwprog")


# ---- whole programs -----------------------------------------------------------------------------


def _opcodes(program: Program) -> set[str]:
    return {i.OPCODE for core in program.cores for _, _, i in core.instructions()}


def test_the_examples_hold_every_registered_opcode() -> None:
    examples = (every_op_program(), every_v4_op_program(), every_multicore_op_program())
    assert set().union(*map(_opcodes, examples)) == set(ISA)


@pytest.mark.parametrize("which", ["every_op", "every_v4_op", "every_multicore_op"])
def test_a_loaded_program_simulates_exactly_as_the_saved_one(which: str, tmp_path: Path) -> None:
    if which == "every_op":
        program, config = every_op_program(workload="every_op"), load_config("tiny")
    elif which == "every_v4_op":
        program, config = every_v4_op_program(), TINY_V4
    else:
        program, config = every_multicore_op_program(), TINY_PAIR
    before = run(program, config, race_check=True)
    loaded = load_program(save_program(program, tmp_path / f"{which}.hwprog"))
    after = run(loaded, config, race_check=True)
    # the same instructions (all fields), each at the same ticks, the same DMA pieces and
    # semaphore updates, and bit-identical outputs
    assert after.trace.instructions == before.trace.instructions
    assert after.trace.dma == before.trace.dma
    assert after.trace.semaphore_updates == before.trace.semaphore_updates
    assert after.summary.total_ticks == before.summary.total_ticks
    assert set(after.outputs) == set(before.outputs) <= {"out", "red", "c1.out"}
    assert after.trace.collectives == before.trace.collectives
    for name, values in before.outputs.items():
        assert after.outputs[name].tobytes() == values.tobytes()
    assert loaded.allocations == program.allocations
    assert [(d.name, d.shape, d.dtype, d.kind, d.address_bytes) for d in loaded.hbm.values()] == [
        (d.name, d.shape, d.dtype, d.kind, d.address_bytes) for d in program.hbm.values()
    ]


def test_the_file_is_a_zip_of_json_and_npy_arrays_and_is_reproducible(tmp_path: Path) -> None:
    program = every_op_program()
    path = save_program(program, tmp_path / "a.hwprog")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        entries = {name: archive.read(name) for name in names}
    assert names[:2] == ["manifest.json", "program.json"]
    assert all(n.startswith("arrays/") and n.endswith(".npy") for n in names[2:])
    manifest = json.loads(entries["manifest.json"])
    assert (manifest["format"], manifest["version"]) == (FORMAT, FORMAT_VERSION)
    assert manifest["sha256"] == content_hash(entries)

    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    document = json.loads(entries["program.json"], parse_constant=refuse)
    assert set(document) == {"hbm", "cores", "allocations", "meta", "origins"}
    for name in names[2:]:  # plain arrays: readable without pickles
        np.load(io.BytesIO(entries[name]), allow_pickle=False)
    again = save_program(program, tmp_path / "b.hwprog")
    assert again.read_bytes() == path.read_bytes()


def test_hbm_values_of_every_dtype_and_meta_values_round_trip(tmp_path: Path) -> None:
    program = Program()
    rng = np.random.default_rng(1)
    for name, dt in DTYPES.items():
        bits = rng.integers(0, 256, (3, 5 * dt.itemsize), dtype=np.uint8)
        program.add_tensor(name, (3, 5), dt, "input", bits.view(dt.numpy))
    program.hbm["fp32"].address_bytes = 64
    meta = {
        "shape": (1, 8, 128),
        "nested": {"list": [1, 2.5, None, True, "s"], "tuple": ((1, 2), [3])},
        "inf": math.inf,
        "ninf": -math.inf,
        "numpy": [np.float32(0.5), np.int64(3), np.bool_(True)],
        "arrays": [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones(4, ml_dtypes.bfloat16)],
        "version": type("Version", (str,), {})("2.13.0"),  # a str subclass, as torch's
    }
    program.meta.update(meta)
    loaded = load_program(save_program(program, tmp_path / "values.hwprog"))
    for name, decl in program.hbm.items():
        got = loaded.hbm[name]
        assert got.dtype is decl.dtype and got.values is not None and decl.values is not None
        assert got.values.dtype == decl.values.dtype
        assert got.values.tobytes() == decl.values.tobytes()  # bit-exact, NaN payloads too
    assert loaded.hbm["fp32"].address_bytes == 64
    got_meta = loaded.meta
    assert got_meta["shape"] == (1, 8, 128)
    assert got_meta["nested"] == {"list": [1, 2.5, None, True, "s"], "tuple": ((1, 2), [3])}
    assert got_meta["inf"] == math.inf and got_meta["ninf"] == -math.inf
    assert got_meta["numpy"] == [0.5, 3, True]
    ints, halves = got_meta["arrays"]
    assert ints.dtype == np.int32 and ints.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert halves.dtype == ml_dtypes.bfloat16 and halves.tolist() == [1.0] * 4
    assert got_meta["version"] == "2.13.0" and type(got_meta["version"]) is str


@pytest.mark.parametrize(
    ("meta", "path", "why"),
    [
        ({"ops": {1: 2}}, "meta.ops", "key 1: meta keys are strings"),
        ({"x": {"$tuple": 1}}, "meta.x", "not starting with '$'"),
        ({"source": {"model": object()}}, "meta.source.model", "an object cannot be saved"),
        ({"big": 2**70}, "meta.big", "outside the int64 range"),
        ({"op": MemorySpace.SBUF}, "meta.op", "save enum members by name"),
        ({"host_events": []}, "meta.host_events", "CPU events belong to a compiled run"),
        ({"model_flops": "many"}, "meta.model_flops", "expected an int >= 0"),
    ],
)
def test_meta_that_is_not_data_is_refused_when_saved(
    tmp_path: Path, meta: dict[str, Any], path: str, why: str
) -> None:
    program = Program()
    program.meta.update(meta)
    with pytest.raises(SavedProgramError) as error:
        save_program(program, tmp_path / "m.hwprog")
    assert str(error.value).startswith(f"{tmp_path / 'm.hwprog'}: cannot save the program: {path}")
    assert why in str(error.value)


def test_an_instruction_on_another_engines_stream_is_refused_when_saved(tmp_path: Path) -> None:
    program = every_op_program()
    streams = program.cores[0].streams
    streams["scalar"].append(streams["vector"][0])
    with pytest.raises(
        SavedProgramError,
        match=r"cores\[0\]\.streams\.scalar\[\d+\]\.engine: "
        "the .* says engine 'vector' but sits in the scalar stream",
    ):
        save_program(program, tmp_path / "e.hwprog")


def test_what_would_not_load_is_refused_when_saved(tmp_path: Path) -> None:
    """The checks of loading run when saving too: a file that is written loads."""
    path = tmp_path / "p.hwprog"
    program = every_op_program()
    first = program.cores[0].streams["vector"][0]
    bad_ap = dataclasses.replace(first.dst, free_strides=(1, 1))  # type: ignore[attr-defined]
    program.cores[0].streams["vector"][0] = dataclasses.replace(first, dst=bad_ap)
    with pytest.raises(
        SavedProgramError,
        match=r"cores\[0\]\.streams\.vector\[0\]\.dst\."
        r"free_strides: has 2 strides for 1 free sizes",
    ):
        save_program(program, path)
    program = every_op_program()
    program.hbm["renamed"] = program.hbm.pop("x")
    with pytest.raises(
        SavedProgramError,
        match=r"hbm\[\d+\]\.name: 'x', but the program keys it "
        "'renamed'",
    ):
        save_program(program, path)
    program = every_op_program()
    program.allocations[0] = dataclasses.replace(program.allocations[0], core=1)
    with pytest.raises(SavedProgramError, match=r"allocations\[0\]\.core: core 1 does not exist"):
        save_program(program, path)
    assert not path.exists() and list(tmp_path.iterdir()) == []

"""Registered instruction classes get an ``__init__`` that fills the instance dict
(``hwsim.isa.base._fill_dict_init``): it must behave as the frozen dataclass ``__init__`` it
replaces, for every class in the ISA and for classes it must leave alone."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

import hwsim.lang  # noqa: F401  (registers every ISA module's instructions)
from hwsim.dtypes import BF16
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import ISA, Instruction, _fill_dict_init, register


def _ap(offset: int = 0) -> AccessPattern:
    return AccessPattern(MemorySpace.SBUF, BF16, 0, 4, offset, (8,), (1,), 0, "")


@pytest.mark.parametrize("opcode", sorted(ISA))
def test_every_instruction_class_gets_the_fields_the_dataclass_init_gives(opcode):
    cls = ISA[opcode]
    assert cls.__init__.__code__.co_filename == "<string>"
    fields = dataclasses.fields(cls)
    required = {  # only __post_init__ looks at the values here: a list where it takes a tuple
        f.name: [1, 2] if "tuple" in str(f.type) else _ap(64 * i)
        for i, f in enumerate(fields)
        if f.default is dataclasses.MISSING
    }
    required["engine"] = cls.ENGINES[0]
    made = object.__new__(cls)
    cls.__init__(made, **required)  # the __post_init__ of three classes needs the fields set
    reference = object.__new__(cls)
    for f in fields:  # what the dataclass __init__ stores: the argument, else the default
        object.__setattr__(reference, f.name, required.get(f.name, f.default))
    if hasattr(cls, "__post_init__"):
        reference.__post_init__()
    assert list(vars(made)) == [f.name for f in fields]  # in field order, as the dataclass
    assert vars(made) == vars(reference)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.tag = "changed"  # type: ignore[misc]


def test_missing_unknown_and_positional_arguments_are_type_errors_as_before():
    cls = ISA["nc_matmul"]
    with pytest.raises(TypeError, match="moving"):
        cls(engine="tensor", dst=_ap(), stationary=_ap())  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        cls(engine="tensor", dst=_ap(), stationary=_ap(), moving=_ap(), bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cls("tensor")  # type: ignore[misc]


def test_post_init_still_runs():
    iota = ISA["iota"]
    fields = {f.name for f in dataclasses.fields(iota)}
    assert "steps" in fields
    made = iota(engine=iota.ENGINES[0], dst=_ap(), steps=[1, 2])  # type: ignore[call-arg]
    assert made.steps == (1, 2)  # the list became a tuple in __post_init__


def test_a_hand_written_init_and_a_default_factory_are_left_alone():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class HandInit(Instruction):
        OPCODE: ClassVar[str] = "test_hand_init"
        ENGINES: ClassVar[tuple[str, ...]] = ("vector",)

        def __init__(self, **fields: object) -> None:
            object.__setattr__(self, "engine", fields.get("engine", "vector"))

    own = HandInit.__init__
    _fill_dict_init(HandInit)
    assert HandInit.__init__ is own

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Factory(Instruction):
        OPCODE: ClassVar[str] = "test_factory"
        ENGINES: ClassVar[tuple[str, ...]] = ("vector",)
        items: list[int] = dataclasses.field(default_factory=list)

    own = Factory.__init__
    _fill_dict_init(Factory)
    assert Factory.__init__ is own
    assert Factory(engine="vector").items == []


def test_a_new_registered_class_gets_it_with_its_defaults(monkeypatch):
    monkeypatch.setattr("hwsim.isa.base.ISA", dict(ISA))

    @register("test_toy_init", engines=("vector",))
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Toy(Instruction):
        dst: AccessPattern
        scale: float = 2.0

    toy = Toy(engine="vector", dst=_ap())
    assert Toy.__init__.__code__.co_filename == "<string>"
    assert (toy.scale, toy.waits, toy.tag) == (2.0, (), "")
    assert toy == Toy(engine="vector", dst=_ap(), scale=2.0)
    assert hash(toy) == hash(Toy(engine="vector", dst=_ap(), scale=2.0))

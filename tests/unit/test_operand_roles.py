"""Operand roles as data: reads()/writes() come from the fields' roles, and the kernel language's
calls from the fields' nki.isa names; one list of engine names."""

from __future__ import annotations

import dataclasses
import inspect
from typing import ClassVar

import pytest

from hwsim.dtypes import FP32
from hwsim.engines import BUILTIN_ENGINES, engine_names
from hwsim.isa import ISA, AccessPattern, Instruction, MemorySpace, contiguous
from hwsim.isa.compute_base import Scalar
from hwsim.isa.operands import READ, READ_WRITE, ROLE, WRITE, maybe_operand, operand
from hwsim.isa.operands import derive_operand_methods as derive
from hwsim.lang import isa as lisa
from hwsim.lang.calls import isa_call
from hwsim.lang.emit import gpsimd_engine, scalar_engine, sync_engine, tensor_engine, vector_engine

#: Instructions whose regions are not whole operands: their reads/writes are hand-written.
HAND_WRITTEN = {
    ("nc_matmul", "reads"),
    ("nc_matmul_mx", "reads"),
    ("quantize_mx", "writes"),
    ("topk", "reads"),
    ("topk", "writes"),
    ("nonzero_with_count", "reads"),
    ("nonzero_with_count", "writes"),
    ("nc_stream_shuffle", "reads"),
    ("nc_stream_shuffle", "writes"),
    # a barrier's further tensors (a tuple of patterns): ``hwsim.bridge.lnc``
    ("core_barrier", "reads"),
    ("core_barrier", "writes"),
    ("barrier_wait", "reads"),
    ("barrier_wait", "writes"),
}


def tile(offset: int = 0) -> AccessPattern:
    return contiguous(MemorySpace.SBUF, FP32, 4, 8, offset_bytes=offset)


def test_every_operand_field_has_a_role_and_reads_writes_come_from_them():
    for opcode, cls in ISA.items():
        for f in dataclasses.fields(cls):
            if "AccessPattern" in str(f.type):
                assert f.metadata.get(ROLE) in (READ, WRITE, READ_WRITE), (opcode, f.name)
        for method in ("reads", "writes"):
            derived = getattr(getattr(cls, method), "_derived_from_roles", False)
            assert derived != ((opcode, method) in HAND_WRITTEN), (opcode, method)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Roles(Instruction):
    OPCODE = "roles"
    ENGINES = ("vector",)

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    scale: Scalar = maybe_operand(READ, default=1.0)
    acc: AccessPattern = operand(READ_WRITE)
    extra: AccessPattern | None = maybe_operand(WRITE, default=None)


def test_derived_reads_and_writes_follow_field_order_and_skip_immediates():
    derive(Roles)
    dst, src, scale, acc, extra = (tile(64 * i) for i in range(5))
    plain = Roles(engine="vector", dst=dst, src=src, acc=acc)
    assert plain.reads() == (src, acc) and plain.writes() == (dst, acc)
    full = Roles(engine="vector", dst=dst, src=src, scale=scale, acc=acc, extra=extra)
    assert full.reads() == (src, scale, acc) and full.writes() == (dst, acc, extra)


def test_a_hand_written_method_is_kept():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Own(Roles):
        def reads(self) -> tuple[AccessPattern, ...]:
            return (self.src,)

    derive(Own)
    own = Own(engine="vector", dst=tile(), src=tile(64), acc=tile(128))
    assert own.reads() == (own.src,) and own.writes() == (own.dst, own.acc)


def test_calls_take_nki_names_in_nki_order():
    assert (
        str(inspect.signature(lisa.tensor_tensor)) == "(dst, data1, data2, op, *, engine='vector')"
    )
    assert str(inspect.signature(lisa.activation)).startswith("(dst, op, data, *, bias=None")
    assert lisa.tensor_tensor.__module__ == "hwsim.lang.isa"
    assert lisa.tensor_tensor.__doc__ == "dst = data1 op data2, elementwise."


def test_nki_args_must_name_fields(monkeypatch):
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Misnamed(Roles):
        NKI_ARGS: ClassVar[str] = "dst, source"

    monkeypatch.setitem(ISA, "misnamed", Misnamed)
    with pytest.raises(TypeError, match=r"Misnamed\.NKI_ARGS names no field source"):
        isa_call("misnamed", "")


def test_one_list_of_engine_names():
    engines = (tensor_engine, vector_engine, scalar_engine, gpsimd_engine, sync_engine)
    assert engines == BUILTIN_ENGINES == engine_names()[: len(BUILTIN_ENGINES)]
    assert engines == ("tensor", "vector", "scalar", "gpsimd", "sync")

"""Initcheck: planted reads of never-written SBUF, PSUM and HBM, and accumulation into PSUM with no
group started, are each found with the instruction, operand, memory and exact byte range."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hwsim import lang
from hwsim.errors import HwsimError, InitCheckError
from hwsim.lang import isa as nisa
from hwsim.machine.initcheck import ENV_VAR, MAX_REPORTED, Finding, UnwrittenOutput

AluOp = lang.AluOp
P, F = 32, 64  # tiny has 32 partitions
ROW_BYTES = F * 4  # one fp32 tile row per partition
X = np.arange(P * F, dtype=np.float32).reshape(P, F)


def here() -> int:
    """The line number of the caller's next line (the instruction a finding names)."""
    return sys._getframe(1).f_lineno + 1


def findings_of(kernel: lang.Kernel, *args: object) -> tuple[list, str]:
    with pytest.raises(InitCheckError) as error:
        kernel(*args, config="tiny", initcheck=True)
    return error.value.findings, str(error.value)


def test_a_read_of_never_written_sbuf_is_found_with_its_instruction_and_bytes():
    seen = {}

    @lang.kernel
    def add_garbage(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        loaded = lang.load(x)
        never_written = lang.ndarray((P, F), lang.float32)
        total = lang.ndarray((P, F), lang.float32)
        seen["offset"], seen["line"] = never_written.offset_bytes, here()
        nisa.tensor_tensor(total, loaded, never_written, AluOp.add)
        lang.store(out, total)
        return out

    findings, message = findings_of(add_garbage, X)
    first = seen["offset"]
    assert findings == [
        Finding(
            0,
            "vector",
            0,
            "tensor_tensor",
            f"add_garbage:test_initcheck.py:{seen['line']}",
            "src1",
            "sbuf",
            (0, P - 1),
            (first, first + ROW_BYTES - 1),
            P * ROW_BYTES,
        )
    ]
    assert message == (
        f"initcheck: 1 finding(s): vector[0] tensor_tensor (add_garbage:test_initcheck.py:"
        f"{seen['line']}) reads {P * ROW_BYTES} uninitialised bytes of sbuf partitions 0..31 "
        f"bytes {first}..{first + ROW_BYTES - 1} (operand src1); values read from them reach "
        f"output 'out' (bytes 0..{P * ROW_BYTES - 1})"
    )


def test_a_read_of_psum_nothing_wrote_is_found():
    @lang.kernel
    def evacuate_nothing(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        acc = lang.ndarray((P, F), lang.float32, buffer=lang.psum)
        result = lang.ndarray((P, F), lang.float32)
        nisa.tensor_copy(result, acc)
        lang.store(out, result)
        return out

    (finding,), _ = findings_of(evacuate_nothing, X)
    assert (finding.engine, finding.opcode, finding.operand, finding.memory) == (
        "vector",
        "tensor_copy",
        "src",
        "psum",
    )
    assert (finding.partitions, finding.byte_range, finding.bytes_found) == (
        (0, P - 1),
        (0, ROW_BYTES - 1),  # the first PSUM bank
        P * ROW_BYTES,
    )


def test_a_read_of_hbm_scratch_finds_exactly_the_rows_never_stored():
    @lang.kernel
    def half_stored(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        scratch = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="scratch")
        tile = lang.load(x)
        lang.store(scratch[0:16], tile[0:16])  # rows 16..31 are never written
        lang.store(out, lang.load(scratch))
        return out

    (finding,), message = findings_of(half_stored, X)
    assert (finding.engine, finding.opcode, finding.operand) == ("sync", "dma_copy", "src")
    assert finding.memory == "hbm tensor 'scratch'" and finding.partitions is None
    assert finding.byte_range == (16 * ROW_BYTES, 32 * ROW_BYTES - 1)
    assert finding.bytes_found == 16 * ROW_BYTES
    assert f"of hbm tensor 'scratch' bytes {16 * ROW_BYTES}..{32 * ROW_BYTES - 1}" in message


def test_a_strided_partial_write_leaves_exactly_the_other_elements_unwritten():
    @lang.kernel
    def every_other(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        tile = lang.ndarray((P, F), lang.float32)
        nisa.memset(tile[:, 0:F:2], 1.0)  # even elements only
        lang.store(out, tile)
        return out

    (finding,), _ = findings_of(every_other, X)
    assert finding.bytes_found == P * (F // 2) * 4  # the odd elements, 4 bytes each
    assert finding.byte_range == (4, ROW_BYTES - 1)  # from element 1 to the last (odd) one


def test_accumulating_into_psum_no_matmul_started_is_found():
    """accumulate=True must continue a group an accumulate=False matmul started: into never
    written PSUM, into a memset, and after another engine wrote the bank."""
    ones = np.ones((P, P), np.float32)

    def matmuls(start: str) -> lang.Kernel:
        @lang.kernel
        def kernel(a):
            out = lang.ndarray((P, P), lang.float32, buffer=lang.hbm, name="out")
            stationary = lang.load(a)
            acc = lang.ndarray((P, P), lang.float32, buffer=lang.psum)
            if start == "memset":
                nisa.memset(acc, 0.0)
            if start in ("group", "vector_after"):
                nisa.nc_matmul(acc, stationary, stationary, accumulate=False)
            if start == "vector_after":
                nisa.tensor_scalar(acc, acc, AluOp.multiply, 2.0)  # ends the group
            nisa.nc_matmul(acc, stationary, stationary, accumulate=True)
            result = lang.ndarray((P, P), lang.float32)
            nisa.tensor_copy(result, acc)
            lang.store(out, result)
            return out

        return kernel

    group_bytes = P * P * 4
    (never,), message = findings_of(matmuls("nothing"), ones)
    assert never.accumulation and (never.engine, never.opcode, never.operand) == (
        "tensor",
        "nc_matmul",
        "dst",
    )
    assert (never.bytes_found, never.never_written) == (group_bytes, group_bytes)
    assert "never written): the group's first nc_matmul must have accumulate=False" in message
    for start in ("memset", "vector_after"):
        (finding,), message = findings_of(matmuls(start), ones)
        assert finding.accumulation and finding.never_written == 0
        assert finding.bytes_found == group_bytes
        assert f"accumulates into {group_bytes} bytes of psum partitions 0..31" in message
    result = matmuls("group")(ones, config="tiny", initcheck=True)
    assert np.array_equal(result.output, np.full((P, P), 2.0 * P))


def test_an_output_the_kernel_never_fully_stores_is_found():
    @lang.kernel
    def stores_half(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        lang.store(out[0:8], lang.load(x[0:8]))
        return out

    (finding,), message = findings_of(stores_half, X)
    assert finding == UnwrittenOutput(
        "out", (8 * ROW_BYTES, P * ROW_BYTES - 1), 24 * ROW_BYTES, P * ROW_BYTES
    )
    assert "output 'out' has 6144 of its 8192 bytes never written (bytes 2048..8191)" in message


def test_gather_checks_only_the_rows_its_indices_pick():
    @lang.kernel
    def gather(x, ids):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        table = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="table")
        lang.store(table[0:16], lang.load(x[0:16]))  # rows 16..31 never written
        rows = lang.ndarray((P, F), lang.float32)
        nisa.dma_gather(rows, table, lang.load(ids))
        lang.store(out, rows)
        return out

    written_rows = (np.arange(P) % 16).astype(np.int32).reshape(P, 1)
    result = gather(X, written_rows, config="tiny", initcheck=True)
    assert np.array_equal(result.output, X[written_rows[:, 0]])
    one_bad = written_rows.copy()
    one_bad[5, 0] = 20
    (finding,), _ = findings_of(gather, X, one_bad)
    assert (finding.opcode, finding.operand, finding.memory) == (
        "dma_gather",
        "src",
        "hbm tensor 'table'",
    )
    assert finding.byte_range == (20 * ROW_BYTES, 21 * ROW_BYTES - 1)


def test_uninitialised_indices_are_reported_with_the_error_they_caused():
    @lang.kernel
    def gather_by_garbage(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        ids = lang.ndarray((P, 1), lang.int32)  # never written: 0xFF bytes, index -1
        rows = lang.ndarray((P, F), lang.float32)
        nisa.dma_gather(rows, x, ids)
        lang.store(out, rows)
        return out

    (finding,), message = findings_of(gather_by_garbage, X)
    assert (finding.opcode, finding.operand) == ("dma_gather", "indices")
    assert "; then the run stopped: " in message and "index -1 at partition 0" in message


def test_every_finding_is_counted_and_the_message_lists_the_first_ones():
    reads = MAX_REPORTED + 10

    @lang.kernel
    def many(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        result = lang.load(x)
        for _ in range(reads):
            garbage = lang.ndarray((P, F), lang.float32)
            nisa.tensor_tensor(result, result, garbage, AluOp.add)
        lang.store(out, result)
        return out

    with pytest.raises(InitCheckError) as error:
        many(X, config="tiny", initcheck=True)
    assert len(error.value.findings) == reads
    assert str(error.value).startswith(f"initcheck: {reads} finding(s): vector[0] tensor_tensor")
    assert str(error.value).endswith(
        "(operand src1) (+10 more); values read from them reach output 'out' "
        f"(bytes 0..{P * ROW_BYTES - 1})"
    )


def _partly_loaded_matmul(stored_columns: int) -> lang.Kernel:
    """A matmul over a [P, F] moving tile whose last columns nothing wrote (a load of the first
    F - 8 only), then a store of the result's first ``stored_columns``."""

    @lang.kernel
    def kernel(a):
        out = lang.ndarray((P, stored_columns), lang.float32, buffer=lang.hbm, name="out")
        stationary = lang.load(a[:, 0:P])
        moving = lang.ndarray((P, F), lang.float32)
        nisa.dma_copy(moving[:, 0 : F - 8], a[:, 0 : F - 8])
        acc = lang.ndarray((P, F), lang.float32, buffer=lang.psum)
        nisa.nc_matmul(acc, stationary, moving, accumulate=False)
        nisa.nc_matmul(acc, stationary, moving, accumulate=True)
        result = lang.ndarray((P, F), lang.float32)
        nisa.tensor_copy(result, acc)
        lang.store(out, result[:, 0:stored_columns])
        return out

    return kernel


def test_garbage_a_matmul_reads_is_no_finding_while_no_output_holds_it():
    """The uninitialised moving columns make only the same result columns garbage (the
    hardware's dataflow): a store of the others is clean, a store of one of them is not."""
    a = np.arange(P * F, dtype=np.float32).reshape(P, F) / (P * F)
    result = _partly_loaded_matmul(F - 8)(a, config="tiny", initcheck=True)
    expected = 2 * a[:, 0:P].T @ a[:, 0 : F - 8]
    np.testing.assert_allclose(result.output, expected, rtol=1e-5)
    findings, message = findings_of(_partly_loaded_matmul(F - 7), a)
    assert [(f.opcode, f.operand) for f in findings] == [("nc_matmul", "moving")] * 2
    assert findings[0].bytes_found == P * 8 * 4  # the 8 columns nothing wrote, per partition
    assert message.endswith(
        # column F - 8 of each row: the first in row 0, the last in the last row
        f"reach output 'out' (bytes {(F - 8) * 4}..{P * (F - 7) * 4 - 1})"
    )


def test_garbage_that_steers_an_instruction_is_a_finding_at_once():
    """A gather's indices computed from never-written bytes: the gather's read is a finding,
    with the read that made them, though the gathered rows never reach the output."""

    @lang.kernel
    def gather_by_sum(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        garbage = lang.ndarray((P, 1), lang.int32)
        ids = lang.ndarray((P, 1), lang.int32)
        nisa.tensor_scalar(ids, garbage, AluOp.bitwise_and, 0)  # values from garbage
        rows = lang.ndarray((P, F), lang.float32)
        nisa.dma_gather(rows, x, ids)
        lang.store(out, lang.load(x))
        return out

    findings, _ = findings_of(gather_by_sum, X)
    assert [(f.opcode, f.operand) for f in findings] == [
        ("dma_gather", "indices"),
        ("tensor_scalar", "src"),
    ]


def _planted() -> lang.Kernel:
    @lang.kernel
    def planted(x):
        out = lang.ndarray((P, F), lang.float32, buffer=lang.hbm, name="out")
        garbage = lang.ndarray((P, F), lang.float32)
        lang.store(out, garbage)
        return out

    return planted


def test_off_it_checks_nothing_and_the_0xff_fill_shows_as_nan(monkeypatch):
    result = _planted()(X, config="tiny", initcheck=False)
    assert np.isnan(result.output).all()
    monkeypatch.setenv(ENV_VAR, "0")
    assert np.isnan(_planted()(X, config="tiny").output).all()
    monkeypatch.setenv(ENV_VAR, "1")
    with pytest.raises(InitCheckError):
        _planted()(X, config="tiny")
    monkeypatch.setenv(ENV_VAR, "yes")
    with pytest.raises(HwsimError, match="HWSIM_INITCHECK='yes': expected 1"):
        _planted()(X, config="tiny")


def test_timing_only_runs_cannot_check():
    spec = lang.TensorSpec((P, F))
    assert _planted()(spec, config="tiny", numerics=False).summary.total_ns > 0
    with pytest.raises(HwsimError, match="initcheck=True needs numerics=True"):
        _planted()(spec, config="tiny", numerics=False, initcheck=True)

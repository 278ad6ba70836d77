"""HBM inputs read in place (``simulator.run(inputs_read_in_place=...)``): the run reads the
caller's array itself instead of copying it into fresh memory (the bridge's weights: a
BERT-base first call spent a second in the copy's page faults). The array stays the caller's,
unchanged and read-only to the run: a program writing such an input fails loudly. Values that
cannot be read in place (another dtype, not contiguous) are copied as before."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.dtypes import dtype as hw_dtype
from hwsim.errors import MemoryAccessError
from hwsim.machine.simulator import run
from hwsim.machine.state import Hbm

FP32 = hw_dtype("float32")


def test_an_input_read_in_place_is_the_callers_bytes_read_only():
    hbm = Hbm(1, 1 << 20)
    values = np.arange(6, dtype=np.float32)
    tensor = hbm.add("w", (2, 3), FP32, values, read_in_place=True)
    assert np.shares_memory(tensor.data, values)
    assert np.array_equal(tensor.as_array(), values.reshape(2, 3))
    with pytest.raises(ValueError, match="read-only"):
        tensor.as_array()[0, 0] = 7.0
    assert values.flags.writeable and values[0] == 0.0  # the caller's array as it was


@pytest.mark.parametrize(
    "values",
    [np.arange(6, dtype=np.float64), np.arange(12, dtype=np.float32)[::2]],
    ids=["another dtype", "not contiguous"],
)
def test_values_not_readable_in_place_are_copied_as_before(values):
    hbm = Hbm(1, 1 << 20)
    tensor = hbm.add("w", (2, 3), FP32, values, read_in_place=True)
    assert not np.shares_memory(tensor.data, values)
    assert np.array_equal(tensor.as_array(), np.asarray(values, np.float32).reshape(2, 3))
    tensor.as_array()[0, 0] = 7.0  # a copy of its own: writable


@lang.kernel
def scale_rows(x):
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    tile = lang.load(x[0:128])
    lang.isa.tensor_scalar(tile, tile, lang.isa.AluOp.multiply, 3.0)
    lang.store(out[0:128], tile)
    return out


@lang.kernel
def overwrite_input(x):
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    tile = lang.load(x[0:128])
    lang.store(x[0:128], tile)  # into its own input
    lang.store(out[0:128], tile)
    return out


def _program(kernel, values):
    program = kernel.build(lang.TensorSpec(values.shape, "float32")).program
    program.hbm["x"].values = values
    return program


def test_a_run_reading_in_place_gives_the_outputs_and_ticks_of_a_run_copying():
    values = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    copied = run(_program(scale_rows, values.copy()), "trn2")
    in_place = run(_program(scale_rows, values), "trn2", inputs_read_in_place={"x"})
    [name] = in_place.outputs
    assert np.array_equal(in_place.outputs[name], copied.outputs[name])
    assert np.array_equal(in_place.outputs[name], values * 3)
    assert in_place.summary.total_ns == copied.summary.total_ns
    assert in_place.summary.total_ns > 0


def test_a_program_writing_an_input_read_in_place_is_refused_and_the_array_kept():
    values = np.ones((128, 8), np.float32)
    program = _program(overwrite_input, values)
    with pytest.raises(MemoryAccessError, match="HBM tensor 'x' is an input the run reads in"):
        run(program, "trn2", inputs_read_in_place={"x"})
    assert (values == 1).all() and values.flags.writeable
    run(program, "trn2")  # copied, as without the option: it may write its copy

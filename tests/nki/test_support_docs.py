"""docs/nki-support.md is generated from the code and current; every nisa call runs a real
kernel-language instruction; unsupported names raise naming the call."""

import inspect

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl
from hwsim.errors import IllegalInstructionError
from hwsim.lang import isa as lisa
from hwsim.nki import support_docs


def test_committed_support_doc_is_current():
    assert support_docs.main(["--check"]) == 0, "run python -m hwsim.nki.support_docs"


def test_every_generic_nisa_call_names_a_kernel_language_instruction():
    checked = 0
    for name, value in vars(nisa).items():
        if name.startswith("_"):  # the generic calls public wrappers build on
            continue
        if inspect.isfunction(value) and value.__doc__ and "either API generation" in value.__doc__:
            params = inspect.signature(getattr(lisa, name)).parameters
            assert set(value.required) <= set(params), (name, value.required, list(params))
            checked += 1
    assert checked >= 35


@nki.jit
def uses_unsupported(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(out, [x], [1.0], nl.add)
    return out


def test_unsupported_name_raises_naming_the_call_and_line():
    with pytest.raises(
        IllegalInstructionError, match=r"test_support_docs.py:\d+: nisa.dma_compute"
    ):
        nki.run(uses_unsupported, np.ones((128, 128), np.float32))

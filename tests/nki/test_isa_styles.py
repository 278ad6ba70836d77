"""The same nki.isa calls in both API generations give the same values (older: tile-returning;
newer: dst=), checked against numpy with the race checker."""

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl
from hwsim.errors import HwsimError

RNG = np.random.default_rng(7)
A = RNG.standard_normal((128, 64)).astype(np.float32)
B = RNG.standard_normal((128, 64)).astype(np.float32)


@nki.jit
def older(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    peak = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    s = nisa.tensor_tensor(x, y, op=np.add)
    t = nisa.tensor_scalar(s, np.multiply, 2.0, op1=np.add, operand1=1.0)
    e = nisa.activation(op=nl.tanh, data=t)
    m = nisa.tensor_reduce(np.max, e, axis=1, keepdims=True)
    nl.store(out, value=nisa.tensor_copy(e))
    nl.store(peak, value=m)
    return out, peak


@nki.jit
def newer(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    peak = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=x, data2=y, op=nl.add)
    nisa.tensor_scalar(dst=s, data=s, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0)
    nisa.activation(dst=s, op=nl.tanh, data=s)
    m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=nl.max, data=s, axis=1)
    nisa.dma_copy(dst=out, src=s)
    nisa.dma_copy(dst=peak, src=m)
    return out, peak


def test_both_generations_agree_with_numpy():
    expected = np.tanh((A + B) * 2 + 1)
    for kernel in (older, newer):
        out, peak = nki.run(kernel, A, B, race_check=True).outputs
        assert np.max(np.abs(out - expected)) < 1e-5, kernel
        assert np.max(np.abs(peak[:, 0] - expected.max(axis=1))) < 1e-5, kernel


@nki.jit
def unknown_reduction(a):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_reduce("median", nl.load(a), axis=1, keepdims=True))
    return out


def test_an_unknown_operator_is_refused_with_the_valid_names():
    with pytest.raises(HwsimError) as caught:
        nki.run(unknown_reduction, A)
    message = str(caught.value)
    assert "op='median' is not a reduction; valid:" in message, message
    assert "add" in message.split("valid:")[1] and "max" in message.split("valid:")[1]

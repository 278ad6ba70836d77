"""Which engine runs what: nl operators go where the compiler puts them; nisa engine= is
honoured; loads are Sync-triggered and stores GpSimdE-triggered."""

import numpy as np

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl


@nki.jit
def one_of_each(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    e = nl.exp(t)  # ScalarE activation
    s = nl.add(e, 1.0)  # VectorE tensor_scalar
    r = nl.sum(s, axis=1, keepdims=True)  # VectorE tensor_reduce
    g = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=g, data1=s, data2=e, op=nl.multiply, engine=nisa.gpsimd_engine)
    nl.store(out, value=nl.multiply(g, r))  # VectorE tensor_scalar by a column
    return out


def _opcodes(program):
    streams = program.cores[0].streams
    return {engine: [i.OPCODE for i in stream] for engine, stream in streams.items() if stream}


def test_engine_choices():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    result = nki.run(one_of_each, x, race_check=True)
    ops = _opcodes(result.program)
    assert ops["scalar"] == ["activation"]
    assert ops["vector"] == ["tensor_scalar", "tensor_reduce", "tensor_scalar"]
    assert ops["gpsimd"] == ["tensor_tensor", "dma_copy"]  # engine= and the store trigger
    assert ops["sync"] == ["dma_copy"]  # the load trigger
    tags = {t.tag.rsplit(":", 1)[0] for t in result.summary.tags}
    assert tags == {"one_of_each:test_engines.py"}  # attributed to the kernel's own lines
    e = np.exp(x.astype(np.float64))
    expected = (e + 1) * e * (e + 1).sum(axis=1, keepdims=True)
    assert np.max(np.abs(result.outputs[0] - expected) / np.abs(expected)) < 1e-5

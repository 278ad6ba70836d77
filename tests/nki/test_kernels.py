"""NKI kernels written from the public API docs (both styles), checked against numpy with the
race checker and initcheck on: softmax, layernorm (bn_stats/bn_aggr), RMSNorm, a transpose,
causal attention and a tensor_tensor_scan kernel."""

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl

RNG = np.random.default_rng(1)


def run(kernel, *arrays):
    result = nki.run(kernel, *arrays, config="trn2", race_check=True)
    assert result.latency_ns > 0
    return result.outputs[0]


@nki.jit
def softmax_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(x.shape[0] // 128):
        tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        nl.store(out[t * 128 : (t + 1) * 128, :], value=nl.softmax(tile, axis=1))
    return out


@nki.jit
def softmax_by_hand(x):
    """exp(x - max) / sum, with Python operators on tiles."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0 : x.shape[1]]
    for t in nl.affine_range(x.shape[0] // 128):
        tile = nl.load(x[t * 128 + i_p, i_f])
        peak = nl.max(tile, axis=1, keepdims=True)
        e = nl.exp(tile - peak)
        total = nl.sum(e, axis=1, keepdims=True)
        nl.store(out[t * 128 + i_p, i_f], value=e * nl.reciprocal(total))
    return out


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("kernel", [softmax_kernel, softmax_by_hand])
def test_softmax(kernel):
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    assert np.max(np.abs(run(kernel, x) - _softmax(x))) < 1e-5


@nki.jit
def layernorm_kernel(x, gamma, beta):
    """Mean and variance from bn_stats / bn_aggr (newer dst= style), then (x - mean) * rstd."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma), (128, cols))
    b = nl.broadcast_to(nl.load(beta), (128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        stats = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=stats, data=tile)
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rstd = nl.rsqrt(mv[:, 1:2] + 1e-5)
        centred = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=centred, data=tile, op0=nl.subtract, operand0=mv[:, 0:1], op1=nl.multiply,
            operand1=rstd,
        )  # fmt: skip
        nl.store(out[t * 128 : (t + 1) * 128, :], value=centred * g + b)
    return out


def test_layernorm_with_bn_stats_and_bn_aggr():
    x = RNG.standard_normal((256, 384)).astype(np.float32)
    gamma = RNG.standard_normal((1, 384)).astype(np.float32)
    beta = RNG.standard_normal((1, 384)).astype(np.float32)
    mean = x.mean(axis=1, keepdims=True)
    expected = (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
    assert np.max(np.abs(run(layernorm_kernel, x, gamma, beta) - expected)) < 1e-4


@nki.jit
def rmsnorm_kernel(x, weight):
    """The RMSNorm tutorial's shape of kernel: older style, activation with a reduction."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.broadcast_to(nl.load(weight), (128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        sq_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(op=nl.square, data=tile, reduce_res=sq_sum)
        rms = nisa.activation(op=nl.rsqrt, data=sq_sum, scale=1.0 / cols, bias=None)
        normed = nisa.tensor_scalar(tile, np.multiply, rms)
        nl.store(out[t * 128 : (t + 1) * 128, :], value=nl.multiply(normed, w))
    return out


def test_rmsnorm():
    x = RNG.standard_normal((256, 512)).astype(np.float32)
    w = RNG.standard_normal((1, 512)).astype(np.float32)
    expected = x / np.sqrt((x * x).mean(axis=1, keepdims=True)) * w
    assert np.max(np.abs(run(rmsnorm_kernel, x, w) - expected)) < 1e-4


@nki.jit
def transpose_kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // 128):
        for j in nl.affine_range(cols // 128):
            tile = nl.load(x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128])
            t_psum = nisa.nc_transpose(tile)
            nl.store(out[j * 128 : (j + 1) * 128, i * 128 : (i + 1) * 128], value=t_psum)
    return out


def test_transpose():
    x = RNG.standard_normal((256, 384)).astype(np.float32)
    assert np.array_equal(run(transpose_kernel, x), x.T)


@nki.jit
def causal_attention(q_t, k_t, v):
    """One head, one 128-query block: q_t, k_t [d, S] (transposed, as the NKI attention tutorial
    feeds TensorE), v [S, d]. Scores masked with affine_select (keep j <= i)."""
    d, seq = q_t.shape
    out = nl.ndarray((seq, d), dtype=nl.float32, buffer=nl.shared_hbm)
    q = nl.load(q_t)
    k = nl.load(k_t)
    vt = nl.load(v)
    scores = nl.copy(nl.matmul(q, k, transpose_x=True))  # [S, S] = q @ k.T
    scaled = nl.multiply(scores, 1.0 / np.sqrt(d))
    masked = nisa.affine_select(
        on_true_tile=scaled, on_false_value=-3.0e38, cmp_op=nl.greater_equal,
        steps=(-1,), channel_multiplier=1,
    )  # fmt: skip  # keep where i - j >= 0
    probs = nl.softmax(masked, axis=1)
    probs_t = nl.copy(nl.transpose(probs))  # [S(keys), S(queries)]
    nl.store(out, value=nl.matmul(probs_t, vt, transpose_x=True))
    return out


def test_causal_attention():
    d, seq = 64, 128
    q = RNG.standard_normal((seq, d)).astype(np.float32)
    k = RNG.standard_normal((seq, d)).astype(np.float32)
    v = RNG.standard_normal((seq, d)).astype(np.float32)
    s = q @ k.T / np.sqrt(d)
    s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    expected = _softmax(s) @ v
    got = run(causal_attention, q.T.copy(), k.T.copy(), v)
    assert np.max(np.abs(got - expected)) < 1e-4


@nki.jit
def decay_scan(a, b):
    """h[t] = a[t] * h[t-1] + b[t] per row (a linear recurrence) with tensor_tensor_scan."""
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    at = nl.load(a)
    bt = nl.load(b)
    h = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=h, data0=at, data1=bt, initial=0.0, op0=nl.multiply, op1=nl.add)
    nl.store(out, value=h)
    return out


def test_tensor_tensor_scan():
    a = RNG.uniform(0.5, 1.0, (128, 256)).astype(np.float32)
    b = RNG.standard_normal((128, 256)).astype(np.float32)
    h = np.zeros(128)
    expected = np.zeros((128, 256))
    for t in range(256):
        h = a[:, t] * h + b[:, t]
        expected[:, t] = h
    assert np.max(np.abs(run(decay_scan, a, b) - expected)) < 1e-3

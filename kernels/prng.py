"""XORWOW random number generators (rng, rand2, dropout, set_rng_seed) with NumPy twins.

A generator is six uint32 words ``(x0, x1, x2, x3, x4, d)``: Marsaglia's xorwow (2003), the
PRNG of NeuronCore-v4 [S3], whose state nki.isa saves and loads as 6 words per GpSimdE lane and
24 (four generators) per VectorE lane [S15]. One step::

    t = x4 ^ (x4 >> 2); t ^= t << 1; t ^= x0 ^ (x0 << 4)
    (x0, x1, x2, x3, x4) = (t, x0, x1, x2, x3); d += 362437; value = t + d   (all mod 2^32)

States are int64 arrays ``[lanes, generators, 6]`` holding uint32 values; a draw of ``count``
values per lane takes value i from generator ``i % generators`` (each generator steps in turn),
so a lane's four VectorE generators produce four values per step as [S3] describes.
``xorwow_seed`` expands one 32-bit seed into every lane's generators with SplitMix64 (the
simulator's documented choice: the hardware's seeding is unpublished).
"""

from __future__ import annotations

import numba
import numpy as np

from . import _checks

XORWOW_WORDS = 6
"""uint32 words of one xorwow generator: x0..x4 and the Weyl counter d."""
WEYL_INCREMENT = 362437
_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
#: 2^-24: a 24-bit integer times this is a float32 in [0, 1), exactly.
_UNIT = np.float32(2.0**-24)


def _state_operand(state: np.ndarray) -> np.ndarray:
    state = _checks.i64(state, "state", 3)
    if state.shape[2] != XORWOW_WORDS:
        raise ValueError(f"state must be [lanes, generators, 6], got shape {state.shape}")
    if state.size and (state.min() < 0 or state.max() > _MASK32):
        raise ValueError("state words must be uint32 values (0 .. 2^32 - 1)")
    return state


# ---------------------------------------------------------------------------------------------
# drawing


@numba.njit(cache=True)
def _draw_jit(state: np.ndarray, count: int, out: np.ndarray) -> None:
    lanes, generators, _ = state.shape
    for lane in range(lanes):
        for i in range(count):
            g = i % generators
            x0 = state[lane, g, 0]
            x4 = state[lane, g, 4]
            t = (x4 ^ (x4 >> 2)) & _MASK32
            t = (t ^ (t << 1)) & _MASK32
            t = (t ^ x0 ^ ((x0 << 4) & _MASK32)) & _MASK32
            state[lane, g, 4] = state[lane, g, 3]
            state[lane, g, 3] = state[lane, g, 2]
            state[lane, g, 2] = state[lane, g, 1]
            state[lane, g, 1] = x0
            state[lane, g, 0] = t
            d = (state[lane, g, 5] + WEYL_INCREMENT) & _MASK32
            state[lane, g, 5] = d
            out[lane, i] = (t + d) & _MASK32


def xorwow_draw(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` 32-bit values per lane (int64[lanes, count]) and the state after them.

    state: int64[lanes, generators, 6] of uint32 words (not modified; the new state is
    returned). Value i of a lane comes from its generator ``i % generators``.
    """
    state = _state_operand(state).copy()
    out = np.empty((state.shape[0], int(count)), dtype=np.int64)
    _draw_jit(state, int(count), out)
    return out, state


def xorwow_draw_ref(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference for ``xorwow_draw``: the same recurrence, vectorised over lanes in uint32."""
    s = _state_operand(state).astype(np.uint32)
    generators = s.shape[1]
    out = np.empty((s.shape[0], int(count)), dtype=np.int64)
    for i in range(int(count)):
        g = i % generators
        x0, x4 = s[:, g, 0].copy(), s[:, g, 4]
        t = x4 ^ (x4 >> np.uint32(2))
        t ^= t << np.uint32(1)
        t ^= x0 ^ (x0 << np.uint32(4))
        s[:, g, 1:5] = s[:, g, 0:4].copy()
        s[:, g, 0] = t
        s[:, g, 5] += np.uint32(WEYL_INCREMENT)
        out[:, i] = (t + s[:, g, 5]).astype(np.int64)
    return out, s.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# seeding


@numba.njit(cache=True)
def _splitmix(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True)
def _seed_jit(seed: np.uint64, out: np.ndarray) -> None:
    lanes, generators, _ = out.shape
    for lane in range(lanes):
        for g in range(generators):
            z = (seed << np.uint64(32)) | np.uint64(lane * generators + g)
            nonzero = False
            for w in range(XORWOW_WORDS):
                z = z + np.uint64(_GOLDEN)
                word = np.int64(_splitmix(z) & np.uint64(_MASK32))
                out[lane, g, w] = word
                if w < XORWOW_WORDS - 1 and word != 0:
                    nonzero = True
            if not nonzero:
                out[lane, g, 0] = 1


def _seed_operand(seed: int, lanes: int, generators: int) -> np.uint64:
    if not 0 <= int(seed) <= _MASK32:
        raise ValueError(f"seed must be a 32-bit value (0 .. 2^32 - 1), got {seed}")
    if lanes < 1 or generators < 1:
        raise ValueError(f"need at least one lane and generator, got {lanes} and {generators}")
    return np.uint64(int(seed))


def xorwow_seed(seed: int, lanes: int, generators: int) -> np.ndarray:
    """Every lane's generators seeded from one 32-bit ``seed``: int64[lanes, generators, 6].

    Generator g of lane l takes six successive SplitMix64 outputs (low 32 bits) of the counter
    ``(seed << 32 | l * generators + g) + k * 0x9E3779B97F4A7C15``, k = 1..6; x0..x4 all zero
    (which xorwow cannot leave) becomes x0 = 1. Distinct seeds and lanes give distinct streams.
    """
    z = _seed_operand(seed, lanes, generators)
    out = np.empty((lanes, generators, XORWOW_WORDS), dtype=np.int64)
    _seed_jit(z, out)
    return out


def xorwow_seed_ref(seed: int, lanes: int, generators: int) -> np.ndarray:
    """Reference for ``xorwow_seed``, vectorised in uint64 (wrapping) arithmetic."""
    z = _seed_operand(seed, lanes, generators)
    index = np.arange(lanes * generators, dtype=np.uint64).reshape(lanes, generators)
    base = (z << np.uint64(32)) | index
    out = np.empty((lanes, generators, XORWOW_WORDS), dtype=np.int64)
    with np.errstate(over="ignore"):
        for w in range(XORWOW_WORDS):
            x = base + np.uint64(_GOLDEN) * np.uint64(w + 1)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(_MIX1)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(_MIX2)
            x ^= x >> np.uint64(31)
            out[:, :, w] = (x & np.uint64(_MASK32)).astype(np.int64)
    dead = ~out[:, :, : XORWOW_WORDS - 1].any(axis=2)
    out[:, :, 0][dead] = 1
    return out


# ---------------------------------------------------------------------------------------------
# values from random bits


def _unit_float(bits: np.ndarray) -> np.ndarray:
    """32-bit values -> float32 in [0, 1): the top 24 bits times 2^-24 (exact)."""
    return (bits >> 8).astype(np.float32) * _UNIT


@numba.njit(cache=True, error_model="numpy")
def _uniform_jit(bits: np.ndarray, low: np.ndarray, high: np.ndarray, out: np.ndarray) -> None:
    for p in range(bits.shape[0]):
        span = high[p] - low[p]
        for i in range(bits.shape[1]):
            out[p, i] = low[p] + np.float32(bits[p, i] >> 8) * _UNIT * span


def _uniform_operands(
    bits: np.ndarray, low: np.ndarray | float, high: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bits = _checks.i64(bits, "bits", 2)
    low = _checks.per_partition(low, bits.shape[0], "low")
    high = _checks.per_partition(high, bits.shape[0], "high")
    return bits, low, high


def uniform(bits: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """VectorE ``rand2``'s values: ``low + u * (high - low)`` in fp32, u the top 24 bits of each
    32-bit random value times 2^-24 (uniform in [0, 1), exact). bits int64[P, N]; low/high
    f32[P] or scalars. Returns f32[P, N] (in [low, high] after fp32 rounding)."""
    bits, low, high = _uniform_operands(bits, low, high)
    out = np.empty(bits.shape, dtype=np.float32)
    _uniform_jit(bits, low, high, out)
    return out


def uniform_ref(bits: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """Reference for ``uniform``."""
    bits, low, high = _uniform_operands(bits, low, high)
    return low[:, None] + _unit_float(bits) * (high - low)[:, None]


@numba.njit(cache=True, error_model="numpy")
def _dropout_jit(x: np.ndarray, bits: np.ndarray, prob: np.ndarray, out: np.ndarray) -> None:
    parts, size = x.shape
    for p in range(parts):
        for i in range(size):
            u = np.float32(bits[p, i] >> 8) * _UNIT
            out[p, i] = x[p, i] if u >= prob[p] else 0


def _dropout_operands(
    x: np.ndarray, bits: np.ndarray, prob: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = _checks.numeric(x, "x", 2)
    bits = _checks.i64(bits, "bits", 2)
    _checks.same_shape(x, bits, "x and bits")
    return x, bits, _checks.per_partition(prob, x.shape[0], "prob")


def dropout(x: np.ndarray, bits: np.ndarray, prob: np.ndarray | float) -> np.ndarray:
    """VectorE ``dropout``: x where ``u >= prob`` (u as in ``uniform``) else 0, per element [S15].

    x: f32 or int64 [P, N]; bits: int64[P, N] of 32-bit random values (``xorwow_draw``); prob: the
    drop probability, f32[P] or a scalar. prob 1 drops everything, prob 0 nothing. No rescaling
    (nki.isa's dropout only replaces elements with zeros); a dropped NaN or inf becomes 0 too.
    """
    x, bits, prob = _dropout_operands(x, bits, prob)
    out = np.empty_like(x)
    _dropout_jit(x, bits, prob, out)
    return out


def dropout_ref(x: np.ndarray, bits: np.ndarray, prob: np.ndarray | float) -> np.ndarray:
    """Reference for ``dropout``."""
    x, bits, prob = _dropout_operands(x, bits, prob)
    keep = _unit_float(bits) >= prob[:, None]
    return np.where(keep, x, np.zeros_like(x))

"""The PRNG family: rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state.

Values are checked against an independent plain-Python xorwow (Marsaglia 2003) run from the
documented seeding (``kernels.xorwow_seed_ref``); ticks on tiny (VectorE 2 values per lane per
cycle, GpSimdE 1) and trn3 (VectorE 4 per lane per cycle [S3], 2 ticks per cycle).
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32, INT8, INT16, INT32, UINT8, UINT16, UINT32
from hwsim.isa.random_ops import Dropout, Rand2, RandGetState, RandSetState, Rng, SetRngSeed
from hwsim.kernels import xorwow_seed_ref

from .helpers import (
    PSUM,
    V3_VECTOR_FIXED,
    SmallProgram,
    assert_timing,
    check_illegal,
    inp,
    out,
    run_single,
)
from .helpers import tile_ap as ap

V4 = load_config("tiny", {"chip.generation": "v4"})


def xorwow(words: list[int]) -> int:
    """One step of Marsaglia's xorwow on [x0, x1, x2, x3, x4, d] (in place); the value."""
    t = words[4] ^ (words[4] >> 2)
    t = (t ^ (t << 1)) & 0xFFFFFFFF
    t ^= words[0] ^ ((words[0] << 4) & 0xFFFFFFFF)
    words[1:5] = words[0:4]
    words[0] = t
    words[5] = (words[5] + 362437) & 0xFFFFFFFF
    return (t + words[5]) & 0xFFFFFFFF


def expected_bits(seed: int, lanes: range, count: int, generators: int) -> np.ndarray:
    state = xorwow_seed_ref(seed, 128, generators)
    out = np.empty((len(lanes), count), np.int64)
    for row, lane in enumerate(lanes):
        gens = [list(map(int, state[lane, g])) for g in range(generators)]
        for i in range(count):
            out[row, i] = xorwow(gens[i % generators])
    return out


@pytest.mark.parametrize(
    ("dtype", "engine", "start"),
    [(UINT32, "vector", 0), (INT8, "vector", 5), (UINT16, "gpsimd", 3), (INT16, "vector", 0)],
)
def test_rng_values_follow_xorwow_from_the_seed(dtype, engine, start):
    prog = SmallProgram()
    seed = prog.load("seed", [[1234]], UINT32)
    if engine == "vector":
        prog.b.emit(SetRngSeed(engine="vector", src_seeds=seed))
    dst = prog.tile(6, 10, dtype, start=start)
    prog.b.emit(Rng(engine=engine, dst=dst))
    prog.store("out", dst)
    got = prog.run().outputs["out"]
    # unseeded engines start as if seeded with 0 (isa.engine_state)
    bits = expected_bits(
        1234 if engine == "vector" else 0,
        range(start, start + 6),
        10,
        4 if engine == "vector" else 1,
    )
    width = 8 * dtype.itemsize
    low = bits & ((1 << width) - 1)
    if dtype.is_signed_int:
        low = np.where(low >= 1 << (width - 1), low - (1 << width), low)
    np.testing.assert_array_equal(got.astype(np.int64), low)


def test_state_save_and_load_replays_the_sequence():
    prog = SmallProgram()
    state = prog.tile(8, 6, UINT32)
    first, again = prog.tile(8, 12, UINT32), prog.tile(8, 12, UINT32)
    prog.b.emit(RandGetState(engine="gpsimd", dst=state))
    prog.b.emit(Rng(engine="gpsimd", dst=first))
    prog.b.emit(RandSetState(engine="gpsimd", src_seeds=state))
    prog.b.emit(Rng(engine="gpsimd", dst=again))
    for name, tile in (("state", state), ("first", first), ("again", again)):
        prog.store(name, tile)
    result = prog.run()
    np.testing.assert_array_equal(result.outputs["first"], result.outputs["again"])
    np.testing.assert_array_equal(result.outputs["state"], xorwow_seed_ref(0, 128, 1)[:8, 0])
    np.testing.assert_array_equal(result.outputs["first"], expected_bits(0, range(8), 12, 1))


def test_vector_state_is_24_words_per_lane_and_loads_on_v4():
    words = np.arange(4 * 24, dtype=np.int64).reshape(4, 24) * 7919 + 1
    prog = SmallProgram()
    src = prog.load("state", words, UINT32)
    dst = prog.tile(4, 8, UINT32)
    prog.b.emit(RandSetState(engine="vector", src_seeds=src))
    prog.b.emit(Rng(engine="vector", dst=dst))
    prog.store("out", dst)
    got = prog.run(V4).outputs["out"]
    expected = np.empty((4, 8), np.int64)
    for lane in range(4):
        gens = [list(map(int, words[lane, 6 * g : 6 * g + 6])) for g in range(4)]
        for i in range(8):
            expected[lane, i] = xorwow(gens[i % 4])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [FP32, BF16, INT32])
def test_rand2_is_uniform_in_its_range(dtype):
    prog = SmallProgram()
    low = prog.load("low", np.arange(4).reshape(4, 1) * 10.0, FP32)
    dst = prog.tile(4, 200, dtype)
    prog.b.emit(Rand2(engine="vector", dst=dst, min=low, max=100.0))
    prog.store("out", dst)
    got = prog.run(V4).outputs["out"].astype(np.float64)
    bits = expected_bits(0, range(4), 200, 4)
    u = (bits >> 8).astype(np.float32) * np.float32(2.0**-24)
    lows = (np.arange(4) * 10.0).astype(np.float32)[:, None]
    values = lows + u * (np.float32(100.0) - lows)
    from hwsim.dtypes import cast

    np.testing.assert_array_equal(got, cast(values, dtype).astype(np.float64))
    assert (got >= lows).all() and (got <= 100).all()


@pytest.mark.parametrize("prob", [0.0, 1.0, 0.3])
def test_dropout_drops_where_the_draw_is_below_prob(prob):
    x = np.random.default_rng(0).uniform(1, 2, (8, 64))
    run_ = run_single(
        lambda aps: Dropout(engine="vector", dst=aps["d"], data=aps["x"], prob=prob),
        {"x": inp(x, FP32)},
        {"d": out((8, 64), FP32)},
    )
    u = (expected_bits(0, range(8), 64, 4) >> 8) * 2.0**-24
    expected = np.where(u >= prob, x.astype(np.float32), 0.0)
    np.testing.assert_array_equal(run_.outputs["d"], expected)
    if prob == 0.3:
        assert 0.2 < (run_.outputs["d"] == 0).mean() < 0.4


@pytest.mark.parametrize(
    ("make", "config", "cycles", "latency", "dtype"),
    [
        (lambda aps: Rng(engine="vector", dst=aps["d"]), "tiny", 20, 10, UINT32),  # 40 / 2
        (lambda aps: Rng(engine="gpsimd", dst=aps["d"]), "tiny", 10 + 40, 10, UINT32),
        # 40/4 < 64, + trn3 VectorE's fixed cycles (trn2's calibrated value, carried)
        (lambda aps: Rng(engine="vector", dst=aps["d"]), "trn3", 64 + V3_VECTOR_FIXED, 100, UINT32),
        (lambda aps: Rand2(engine="vector", dst=aps["d"], min=0.0, max=1.0), V4, 20, 10, FP32),
        (
            lambda aps: Dropout(engine="vector", dst=aps["d"], data=aps["x"], prob=0.5),
            "tiny",
            40,  # [S16] max(MIN_II, N): the data stream, slower than 2 draws per cycle
            10,
            FP32,
        ),
    ],
)
def test_prng_costs(make, config, cycles, latency, dtype):
    inputs = {"x": inp(np.ones((4, 40)), FP32)}
    run_ = run_single(make, inputs, {"d": out((4, 40), dtype)}, config=config, numerics=False)
    assert_timing(run_, 2 * cycles, 2 * cycles + 2 * latency)


def test_rng_rate_on_trn3_is_four_values_per_lane_per_cycle():
    run_ = run_single(
        lambda aps: Rng(engine="vector", dst=aps["d"]),
        {},
        {"d": out((128, 1024), UINT32)},
        config="trn3",
        numerics=False,
    )
    # 1024 / 4 cycles at 2 ticks per cycle, + trn3 VectorE's fixed cycles (trn2's, carried)
    assert_timing(run_, 2 * (256 + V3_VECTOR_FIXED), 2 * (256 + V3_VECTOR_FIXED) + 200)


V2, V3 = load_config("trn1"), load_config("trn2")


@pytest.mark.parametrize(
    ("make", "config", "fragments"),
    [
        (
            lambda: Rng(engine="vector", dst=ap(4, 8)),
            "tiny",
            ("operand 'dst' is fp32; it must be int8",),
        ),
        (
            lambda: Rng(engine="gpsimd", dst=ap(4, 8, dtype=UINT8)),
            V2,
            ("NeuronCore-v3/NeuronCore-v4 only",),
        ),
        (
            lambda: Rand2(engine="vector", dst=ap(4, 8), min=0.0, max=1.0),
            V3,
            ("NeuronCore-v4 only; this config is NeuronCore-v3",),
        ),
        (
            lambda: Rand2(engine="vector", dst=ap(4, 8), min=1.0, max=1.0),
            V4,
            ("min=1.0 must be less than max=1.0",),
        ),
        (
            lambda: RandSetState(engine="vector", src_seeds=ap(4, 24, dtype=UINT32)),
            V3,
            ("NeuronCore-v4 only",),
        ),
        (
            lambda: RandSetState(engine="gpsimd", src_seeds=ap(4, 24, dtype=UINT32)),
            V3,
            ("gpsimd's xorwow state is 6 uint32 per lane",),
        ),
        (
            lambda: RandGetState(engine="gpsimd", dst=ap(4, 6, dtype=INT32)),
            V3,
            ("operand 'dst' is int32; it must be uint32",),
        ),
        (
            lambda: RandGetState(engine="gpsimd", dst=ap(4, 6, PSUM, UINT32)),
            V3,
            ("gpsimd engine cannot write psum",),
        ),
        (
            lambda: SetRngSeed(engine="vector", src_seeds=ap(1, 1, dtype=UINT16)),
            "tiny",
            ("it must be 32-bit",),
        ),
        (
            lambda: Dropout(engine="vector", dst=ap(4, 8, dtype=BF16), data=ap(4, 8), prob=0.5),
            "tiny",
            ("dst must have data's dtype",),
        ),
        (
            lambda: Dropout(
                engine="vector",
                dst=ap(4, 8, dtype=INT32),
                data=ap(4, 8, dtype=INT32),
                prob=ap(4, 1, dtype=BF16),
            ),
            "tiny",
            ("an integer data's prob must be fp32",),
        ),
    ],
)
def test_illegal(make, config, fragments):
    check_illegal(make(), config, *fragments)

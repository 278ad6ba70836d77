"""The NKI API surface public kernels use (docs/nki-support.md): dtypes both ways, grids of
the entry points, reshape views, index arithmetic, constant masks, direct allocation, and the
reductions across iterations and SPMD instances (each test would fail on the old behaviour)."""

import ml_dtypes
import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.compiler as ncc
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl
from hwsim.errors import IllegalInstructionError

RNG = np.random.default_rng(7)


def test_dtypes_are_numpy_types_both_ways():
    assert np.dtype(nl.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    x = nl.static_cast(np.array([1.00390625, 2.0]), nl.bfloat16)
    assert x.dtype == nl.bfloat16 and float(x[0]) == 1.0  # rounded to nearest even
    assert np.zeros(2, dtype=nl.float32).dtype == np.float32
    assert nl.finfo(nl.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)

    @nki.jit
    def same_dtype(a):
        assert a.dtype == nl.float8_e4m3 and a.dtype != nl.float32
        out = nl.ndarray(a.shape, dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.load(a), dtype=np.float32))
        return out

    a = nl.static_cast(RNG.standard_normal((4, 8)), nl.float8_e4m3)
    np.testing.assert_array_equal(nki.simulate(same_dtype)(a), a.astype(np.float32))


@nki.jit
def _add_blocks(a, b, config):
    """A kernel parameter named ``config`` (nki-samples' FlashConfig) is the kernel's."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * config, (i + 1) * config)
    nl.store(out[rows], nl.add(nl.load(a[rows]), nl.load(b[rows])))
    return out


def test_baremetal_and_simulate_kernel_take_a_grid_and_the_kernels_own_config():
    a, b = RNG.random((256, 64), np.float32), RNG.random((256, 64), np.float32)
    launch = nki.baremetal(_add_blocks)
    np.testing.assert_allclose(nki.simulate_kernel(launch[2], a, b, config=128), a + b)
    bench = nki.benchmark(warmup=1, iters=1)(_add_blocks)[2]
    bench(a, b, config=128)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_reshape_is_a_view_of_hbm_and_of_on_chip_tiles():
    @nki.jit
    def flip(a):
        out = nl.ndarray((128, 4, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a.reshape((128, 128)))  # HBM [4, 4096] as [128, 128]
        grouped = tile.reshape((128, 4, 32))  # on chip: the free dims regrouped
        nl.store(out, grouped)
        return out.reshape((4, 4096))  # the output as the kernel returns it

    a = RNG.random((4, 4096), np.float32)
    np.testing.assert_array_equal(nki.simulate(flip)(a), a)
    with pytest.raises(IllegalInstructionError, match="partition dimension"):

        @nki.jit
        def bad(a):
            nl.load(a).reshape((64, 256))
            return a

        nki.simulate(bad)(RNG.random((128, 128), np.float32))


def test_index_arithmetic_and_transposed_index_grids():
    """``x[i_p0, i_f2 * X + i_f1]`` (a sum of iterators) and ``out[i_f, i_p]`` (grid positions
    against the axis order: the transposed view; before, it was indexed in axis order and the
    result came out untransposed, silently)."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, 12), dtype=a.dtype, buffer=nl.shared_hbm)
        outT = nl.ndarray((12, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a)
        i_p = nl.arange(128)[:, None, None]
        i_x = nl.arange(3)[None, :, None]
        i_y = nl.arange(4)[None, None, :]
        swapped = nl.ndarray((128, 12), dtype=a.dtype)
        swapped[i_p, i_y * 3 + i_x] = nl.copy(tile[i_p, i_x * 4 + i_y])
        nl.store(out, swapped)
        ip, jf = nl.arange(128)[:, None], nl.arange(12)[None, :]
        nl.store(outT[jf, ip], swapped)
        return out, outT

    a = RNG.random((128, 12), np.float32)
    want = a.reshape(128, 3, 4).transpose(0, 2, 1).reshape(128, 12)
    got, got_t = nki.simulate(kernel)(a)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_t, want.T)


def test_a_constant_false_mask_emits_nothing_and_true_is_no_mask():
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros(a.shape, dtype=a.dtype)
        for i in nl.affine_range(3):
            acc[...] = nl.add(acc, nl.load(a), mask=(i * 128 < 256))  # i = 2 is masked off
        nl.store(out, acc)
        return out

    a = RNG.random((128, 16), np.float32)
    run = nki.run(kernel, a)
    np.testing.assert_allclose(run.outputs[0], 2 * a, rtol=1e-6)
    loads = sum(type(i).__name__ == "DmaCopy" for i in run.program.cores[0].streams["sync"])
    assert loads == 2


def test_direct_allocation_places_tiles_where_the_kernel_says():
    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        bufs = nl.ndarray(
            (4, nl.par_dim(128), 64),
            dtype=a.dtype,
            buffer=ncc.sbuf.mod_alloc(base_addr=4096, num_free_tiles=(2,)),
        )
        for i in nl.affine_range(4):
            bufs[i] = nl.load(a[:, nl.ds(i * 64, 64)])
            nl.store(out[:, nl.ds(i * 64, 64)], bufs[i])
        return out

    a = RNG.random((128, 256), np.float32)
    run = nki.run(kernel, a, schedule="program")  # the loads in the order they were written
    np.testing.assert_array_equal(run.outputs[0], a)
    loads = [i for i in run.program.cores[0].streams["sync"] if type(i).__name__ == "DmaCopy"]
    # block i at 4096 + (i mod 2) * 256 bytes (64 fp32 per partition): the modulo placement
    assert [ld.dst.offset_bytes for ld in loads] == [4096, 4352, 4096, 4352]


def test_a_tile_declared_in_a_traced_loop_body_is_where_the_first_iteration_put_it():
    """NKI runs an affine_range body's Python once: nki-samples' allocated kernels advance their
    own ``cur_addr`` after each mod_alloc in the body, and every iteration's tile is where the
    first put it (before, each iteration placed it one tile further on, past SBUF at seq 4096).
    A static_range body runs per iteration in NKI too: its tiles move with the counter."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        cur_addr = 4096
        for i in nl.affine_range(4):
            tile = nl.ndarray(
                (nl.par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=cur_addr)
            )
            cur_addr += 64 * 4
            tile[...] = nl.load(a[:, nl.ds(i * 64, 64)])
            nl.store(out[:, nl.ds(i * 64, 64)], tile)
        cur_addr = 8192
        for j in nl.static_range(2):
            tile = nl.ndarray(
                (nl.par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=cur_addr)
            )
            cur_addr += 64 * 4
            tile[...] = nl.load(a[:, nl.ds(j * 64, 64)])
        return out

    a = RNG.random((128, 256), np.float32)
    run = nki.run(kernel, a, schedule="program")  # the loads in the order they were written
    np.testing.assert_array_equal(run.outputs[0], a)
    loads = [i for i in run.program.cores[0].streams["sync"] if type(i).__name__ == "DmaCopy"]
    places = [ld.dst.offset_bytes for ld in loads if ld.dst.memory.value == "sbuf"]
    assert places == [4096, 4096, 4096, 4096, 8192, 8448]


def test_a_matmul_of_a_masked_operand_writes_the_kept_part_of_a_wider_psum_tile():
    """nki-samples' rmsnorm_quant: ``psum[ip, jf] = nc_matmul(ones, gamma[i0, kf][kf < 100])``
    writes columns 0..99 of the [128, 128] PSUM view (the mask narrows the instruction), and a
    [P, 1] scale indexed by another nl.mgrid is narrowed with the rows a mask keeps of the data.
    Before, the matmul stopped (dst [128, 128] against a [128, 100] result)."""

    @nki.jit
    def kernel(ones, gamma, x, scale):
        out = nl.ndarray((128, 100), dtype=np.float32, buffer=nl.shared_hbm)
        ip, jf = nl.mgrid[0:128, 0:128]
        i0, kf = nl.mgrid[0:1, 0:128]
        ic, _ = nl.mgrid[0:128, 0:1]
        broadcast = nl.ndarray((128, 128), dtype=np.float32, buffer=nl.psum)
        broadcast[ip, jf] = nisa.nc_matmul(nl.load(ones), nl.load(gamma)[i0, kf][kf < 100])
        scaled = nl.ndarray((128, 128), dtype=np.float32, buffer=nl.sbuf)
        scaled[ip, jf] = nisa.scalar_tensor_tensor(
            data=nl.load(x)[ip, jf],
            op0=nl.multiply,
            operand0=nl.load(scale)[ic, 0],
            op1=nl.multiply,
            operand1=broadcast[ip, jf],
            mask=(ip < 96) & (jf < 100),
        )
        nl.store(out[ip, jf], scaled[ip, jf], mask=(ip < 96) & (jf < 100))
        nl.store(out[96:128, 0:100], nl.zeros((32, 100), dtype=np.float32))
        return out

    ones, gamma = np.ones((1, 128), np.float32), RNG.random((1, 128), np.float32)
    x, scale = RNG.random((128, 128), np.float32), RNG.random((128, 1), np.float32)
    want = np.zeros((128, 100), np.float32)
    want[:96] = (x * scale * gamma)[:96, :100]
    np.testing.assert_allclose(nki.simulate(kernel)(ones, gamma, x, scale), want, rtol=1e-6)


def test_loop_reduce_accumulators_are_per_spmd_instance():
    """An SPMD instance is an outer loop too: before, instance 1's ``nl.loop_reduce``
    accumulator started from instance 0's sums (nki-samples' flash_attn_bwd, head 1's dq)."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray((2, 128, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        g = nl.program_id(0)
        for k in nl.affine_range(4):
            acc = nl.loop_reduce(nl.load(a[g, k]), op=np.add, loop_indices=[k])
        nl.store(out[g], acc)
        return out

    a = RNG.random((2, 4, 128, 8), np.float32)
    np.testing.assert_allclose(nki.simulate(kernel[2])(a), a.sum(axis=1), rtol=1e-6)


def test_what_does_not_run_names_the_api_and_the_support_page():
    @nki.jit
    def kernel(a):
        nl.gather_flattened(a, a)
        return a

    with pytest.raises(IllegalInstructionError, match=r"nl\.gather_flattened: .*nki-support"):
        nki.simulate(kernel)(RNG.random((4, 4), np.float32))
    with pytest.raises(AttributeError, match=r"docs/nki-support\.md"):
        nl.no_such_name  # noqa: B018

"""``nki.isa`` (``nisa``) on the simulator: every instruction of hwsim.lang.isa under its NKI name,
in the newer (``dst=``) and the older (tile-returning) form (``hwsim.nki.isa_ops``)."""

from __future__ import annotations

import enum
import math
from typing import Any

from hwsim.isa.ap import MemorySpace
from hwsim.isa.engine_state import ReduceCmd
from hwsim.lang import isa as lisa
from hwsim.lang.tiles import sbuf
from hwsim.nki import pending as pd
from hwsim.nki import tensor as nt
from hwsim.nki.isa_ops import call
from hwsim.nki.state import state


class engine(enum.Enum):
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    sync = "sync"
    unknown = "unknown"


tensor_engine, vector_engine, scalar_engine = engine.tensor, engine.vector, engine.scalar
gpsimd_engine, sync_engine, unknown_engine = engine.gpsimd, engine.sync, engine.unknown
reduce_cmd = ReduceCmd


class dge_mode:
    unknown, none, swdge, hwdge = "unknown", "none", "swdge", "hwdge"


class oob_mode:
    error, skip = "error", "skip"


class matmul_perf_mode:
    none, double_row = "none", "double_row"
    double_row_gen3 = "double_row"  # the older NKI name (NeuronCore-v3's double-row mode)


#: perf_mode spellings of the NKI releases -> the simulator's.
_PERF_MODES = {"double_row_gen3": "double_row"}


class nc_version(enum.IntEnum):
    gen2, gen3, gen4 = 2, 3, 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the config being built for (trn1 v2, trn2 v3, trn3 v4)."""
    from hwsim.lang.kernel import current

    generation = current().config.chip.generation
    return {"v2": nc_version.gen2, "v3": nc_version.gen3}.get(generation, nc_version.gen4)


def _generic(name: str, *required: str) -> Any:
    def instruction(*args: Any, **kwargs: Any) -> Any:
        return call(name, ("dst", *required), args, kwargs)

    instruction.__name__ = name
    instruction.required = ("dst", *required)  # type: ignore[attr-defined]
    instruction.__doc__ = f"nki.isa.{name} (either API generation); see hwsim.lang.isa.{name}"
    return instruction


tensor_tensor = _generic("tensor_tensor", "data1", "data2", "op")
tensor_scalar = _generic("tensor_scalar", "data", "op0", "operand0")
scalar_tensor_tensor = _generic(
    "scalar_tensor_tensor", "data", "op0", "operand0", "op1", "operand1"
)
tensor_tensor_scan = _generic("tensor_tensor_scan", "data0", "data1", "initial", "op0", "op1")
tensor_scalar_reduce = _generic(
    "tensor_scalar_reduce", "data", "op0", "operand0", "reduce_op", "reduce_res"
)
tensor_scalar_cumulative = _generic("tensor_scalar_cumulative", "src", "op0", "op1", "imm0")
tensor_copy = _generic("tensor_copy", "src")
reciprocal = _generic("reciprocal", "data")
_activation = _generic("activation", "op", "data")


def activation(*args: Any, **kwargs: Any) -> Any:
    """``activation(op, data, bias=, scale=)`` (either API generation); with
    ``reduce_res=`` (and ``reduce_op=nl.add``, ``reduce_cmd=reset_reduce``) it also sums each
    partition's results into ``reduce_res``: ScalarE's ``activation_reduce``."""
    if kwargs.get("reduce_res") is None:
        for key in ("reduce_op", "reduce_res", "reduce_cmd"):
            kwargs.pop(key, None)
        return _activation(*args, **kwargs)
    command = kwargs.pop("reduce_cmd", None)
    name = str(getattr(command, "name", command or "reset_reduce"))
    if name != "reset_reduce":
        raise nt.fail(
            "nisa.activation",
            f"reduce_cmd={name}: only reset_reduce (a fresh sum per instruction) is modelled "
            "(docs/nki-support.md)",
        )
    return activation_reduce(*args, **kwargs)


activation.required = _activation.required  # type: ignore[attr-defined]
_activation_reduce = _generic("activation_reduce", "op", "data", "reduce_res")


def activation_reduce(*args: Any, **kwargs: Any) -> Any:
    """``activation_reduce(..., reduce_op=nl.add, reduce_res=...)`` (either API generation):
    the activation, and its sum along the free axis into ``reduce_res`` (the only reduction
    the instruction has, as the NKI docs say)."""
    from hwsim.nki.isa_ops import reduce_op

    given = kwargs.pop("reduce_op", None)
    if given is not None and reduce_op(given, "nisa.activation_reduce").name != "add":
        raise nt.fail("nisa.activation_reduce", f"reduce_op={given!r}: the reduction is add")
    return _activation_reduce(*args, **kwargs)


activation_reduce.required = _activation_reduce.required  # type: ignore[attr-defined]
tensor_partition_reduce = _generic("tensor_partition_reduce", "op", "data")
bn_stats = _generic("bn_stats", "data")
bn_aggr = _generic("bn_aggr", "data")
select = _generic("select", "predicate", "on_true", "on_false")
_affine_select = _generic("affine_select", "on_true_tile", "on_false_value", "cmp_op")


def affine_select(*args: Any, **kwargs: Any) -> Any:
    """``affine_select(pred=q_pos >= k_pos, on_true_tile=t, on_false_value=v)`` (older: the
    predicate a comparison of index expressions, ``hwsim.nki.index.Affine``), or the
    kernel language's explicit form (``dst``, ``cmp_op``, ``steps``, ``offset``,
    ``channel_multiplier``); GpSimdE."""
    from hwsim.nki.index import Affine

    pred = kwargs.pop("pred", None)
    if pred is None:
        return _affine_select(*args, **kwargs)
    if not isinstance(pred, Affine):
        raise nt.fail("nisa.affine_select", f"pred= must compare index expressions, got {pred!r}")
    if kwargs.pop("mask", None) is not None:
        raise nt.fail("nisa.affine_select", "pred= with mask= is not supported")
    on_true = nt.as_tensor(kwargs.pop("on_true_tile"), "nisa.affine_select")
    on_false = float(kwargs.pop("on_false_value"))
    dtype = kwargs.pop("dtype", None)
    target = kwargs.pop("dst", None)
    if kwargs or args:
        raise nt.fail("nisa.affine_select", f"unknown arguments {sorted(kwargs) or args}")
    if target is None:
        target = nt.allocate(on_true.shape, on_true.dtype if dtype is None else dtype, sbuf)
    if on_true.memory is MemorySpace.PSUM:  # GpSimdE reads SBUF: the compiler copies it there
        on_true = pd.PendingCopy(on_true, on_true.hw_dtype, None).materialize()
    select = pred.select_args(on_true.shape)
    cmp_op = select.pop("cmp_op")
    lisa.affine_select(nt.dst(target), nt.src(on_true), on_false, cmp_op, **select)
    return target


affine_select.required = _affine_select.required  # type: ignore[attr-defined]
max8 = _generic("max8", "src")
nc_find_index8 = _generic("nc_find_index8", "data", "vals")
nc_match_replace8 = _generic("nc_match_replace8", "data", "vals", "imm")
range_select = _generic("range_select", "on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1")
select_reduce = _generic("select_reduce", "predicate", "on_true", "on_false")
tensor_copy_predicated = _generic("tensor_copy_predicated", "src", "predicate")
tensor_copy_dynamic_src = _generic("tensor_copy_dynamic_src", "src", "offset")
tensor_copy_dynamic_dst = _generic("tensor_copy_dynamic_dst", "src", "offset")
local_gather = _generic("local_gather", "src_buffer", "index")
nc_n_gather = _generic("nc_n_gather", "data", "indices")
nc_stream_shuffle = _generic("nc_stream_shuffle", "src", "shuffle_mask")


def topk(*args: Any, **kwargs: Any) -> Any:
    """nki.isa.topk(val_dst, idx_dst, src, n) (either API generation); see hwsim.lang.isa.topk"""
    return call("topk", ("val_dst", "idx_dst", "src", "n"), args, kwargs)


topk.required = ("val_dst", "idx_dst", "src", "n")  # type: ignore[attr-defined]
nonzero_with_count = _generic("nonzero_with_count", "src")
sequence_bounds = _generic("sequence_bounds", "segment_ids")
dropout = _generic("dropout", "data", "prob")
rng = _generic("rng")
rand2 = _generic("rand2", "min", "max")
rand_get_state = _generic("rand_get_state")
exponential = _generic("exponential", "src")
activate2 = _generic("activate2", "op", "data")
quantize_mx = _generic("quantize_mx", "src", "dst_scale")
dma_gather = _generic("dma_gather", "src", "indices")


def set_rng_seed(src_seeds: Any) -> Any:
    return lisa.set_rng_seed(nt.src(src_seeds))


def rand_set_state(src_seeds: Any, engine: Any = "gpsimd") -> Any:
    from hwsim.nki.isa_ops import _engine

    return lisa.rand_set_state(nt.src(src_seeds), engine=_engine(engine) or "gpsimd")


def nc_matmul(*args: Any, **kwargs: Any) -> Any:
    """``nc_matmul(dst, stationary, moving, ..., accumulate=None)`` (newer: None accumulates onto
    an open group, as the compiler decides) or ``nc_matmul(stationary, moving)`` (older:
    returns the PSUM result, which ``psum_tile += ...`` accumulates)."""
    mask = kwargs.pop("mask", None)
    for key in ("tile_position", "tile_size", "name"):
        if kwargs.pop(key, None) not in (None, (), ""):
            state().note(f"nisa.nc_matmul({key}=...): accepted, no effect (no PE tiling model)")
    if kwargs.pop("is_transpose", False):
        kwargs["is_transpose"] = True  # the PE passes stationary through: its transpose
    accumulate = kwargs.pop("accumulate", None)
    newer = "dst" in kwargs or len(args) + sum(k in kwargs for k in ("stationary", "moving")) >= 3
    names = ("dst", "stationary", "moving") if newer else ("stationary", "moving")
    bound = dict(zip(names, args, strict=False)) | {k: kwargs.pop(k) for k in names if k in kwargs}
    flags = {k: kwargs.pop(k) for k in list(kwargs) if k in _MATMUL_FLAGS}
    if kwargs:
        raise nt.fail("nisa.nc_matmul", f"unknown arguments {sorted(kwargs)}")
    if "perf_mode" in flags:
        mode = str(getattr(flags["perf_mode"], "name", flags["perf_mode"]))
        flags["perf_mode"] = _PERF_MODES.get(mode, mode)
    pending = pd.PendingMatmul(bound["stationary"], bound["moving"], mask, flags)
    if not newer:
        return pending
    target = nt.as_tensor(bound["dst"], "nisa.nc_matmul")
    pd.emit_matmul(target, pending.stationary, pending.moving, accumulate, mask, flags)
    return target


_MATMUL_FLAGS = ("is_stationary_onezero", "is_moving_onezero", "perf_mode", "is_transpose")


def nc_matmul_mx(*args: Any, **kwargs: Any) -> Any:
    return call("nc_matmul_mx", ("dst", "stationary", "moving"), args, kwargs)


def nc_transpose(*args: Any, **kwargs: Any) -> Any:
    return call("nc_transpose", ("dst", "data"), args, kwargs)


def tensor_reduce(*args: Any, **kwargs: Any) -> Any:
    """``tensor_reduce([dst,] op, data, axis, negate=False, keepdims=False)``."""
    newer = "dst" in kwargs or len(args) >= 4 or (len(args) == 3 and "axis" in kwargs)
    names = ("dst", "op", "data", "axis") if newer else ("op", "data", "axis")
    bound = dict(zip(names, args, strict=False)) | kwargs
    data = nt.as_tensor(bound["data"], "nisa.tensor_reduce")
    axis = bound.pop("axis", 1)
    axes = sorted({a % data.ndim for a in ((axis,) if isinstance(axis, int) else axis)})
    if axes != list(range(data.ndim - len(axes), data.ndim)) or 0 in axes:
        raise nt.fail("nisa.tensor_reduce", f"axis={axis}: reduce the innermost free axes")
    keep = bound.pop("keepdims", False)
    if not newer:
        kept = data.shape[: data.ndim - len(axes)]
        shape = (*kept, *([1] * len(axes))) if keep else (*kept, 1)
        given = bound.pop("dtype", None)
        bound["dst"] = nt.allocate(shape, data.dtype if given is None else given, sbuf)
    bound.pop("dtype", None)
    mask = bound.pop("mask", None)
    from hwsim.nki.isa_ops import reduce_op

    lisa.tensor_reduce(
        nt.dst(bound["dst"], mask),
        reduce_op(bound["op"], "nisa.tensor_reduce"),
        nt.src(data, mask),
        axes=len(axes),
        negate=bound.get("negate", False),
    )
    return bound["dst"]


def memset(*args: Any, **kwargs: Any) -> Any:
    """``memset(dst, value)`` (newer) or ``memset(shape, value, dtype)`` (older)."""
    from hwsim.nki.isa_ops import _engine

    engine = _engine(kwargs.pop("engine", None)) or "vector"
    mask = kwargs.pop("mask", None)
    if "dst" in kwargs or (args and isinstance(args[0], nt.NkiTensor)):
        target, rest = (kwargs.pop("dst"), args) if "dst" in kwargs else (args[0], args[1:])
        value = kwargs.pop("value", rest[0] if rest else None)
        lisa.memset(nt.dst(target, mask), float(value), engine=engine)
        return target
    names = ("shape", "value", "dtype")
    bound = dict(zip(names, args, strict=False)) | kwargs
    out = nt.allocate(bound["shape"], bound.get("dtype", "fp32"), sbuf)
    lisa.memset(out.masked(mask), float(bound["value"]), engine=engine)
    return out


def iota(*args: Any, **kwargs: Any) -> Any:
    """Older ``iota(expr, dtype)`` (nl.iota), or the kernel language's
    ``iota(dst, steps=, offset=, channel_multiplier=)``."""
    if (args and isinstance(args[0], nt.NkiTensor)) or "dst" in kwargs:
        target = kwargs.pop("dst") if "dst" in kwargs else args[0]
        return lisa.iota(nt.dst(target), **kwargs)
    from hwsim.nki.language import iota as nl_iota

    return nl_iota(*args, **kwargs)


def dma_copy(*args: Any, **kwargs: Any) -> Any:
    """``dma_copy(dst, src, ..., dge_mode=, engine=)``: the trigger engine is the compiler's
    (loads: Sync, rotating queues; stores: GpSimdE on its own queue) unless ``engine=``."""
    from hwsim.nki.isa_ops import _engine

    mask = kwargs.pop("mask", None)
    names = ("dst", "src")
    bound = dict(zip(names, args, strict=False)) | kwargs
    engine = _engine(bound.pop("engine", None))
    mode = str(getattr(bound.get("dge_mode"), "name", bound.get("dge_mode") or "unknown"))
    bound.pop("dge_mode", None)
    for key in ("oob_mode", "name"):
        bound.pop(key, None)
    target = nt.as_tensor(bound.pop("dst"), "nisa.dma_copy")
    source = nt.as_tensor(bound.pop("src"), "nisa.dma_copy")
    target, source = _same_shapes(target, source)
    if bound:
        raise nt.fail("nisa.dma_copy", f"unknown arguments {sorted(bound)}")
    st = state()
    store = target.memory is MemorySpace.HBM
    if engine is None and mode == "unknown":
        engine = "gpsimd" if store else "sync"
    queue = st.store_queue if store else st.next_load_queue()
    lisa.dma_copy(
        nt.dst(target, mask), nt.src(source, mask), engine=engine, queue=queue, dge_mode=mode
    )
    return target


def _same_shapes(target: nt.NkiTensor, source: nt.NkiTensor) -> tuple[Any, Any]:
    """A 1-D HBM side of a DMA viewed as the other side's shape (``a_vec`` [128] to an SBUF
    [128, 1] column and back: the same elements in order, NKI's DMA between them)."""
    from hwsim.nki.views import reshape

    if target.shape == source.shape or math.prod(target.shape) != math.prod(source.shape):
        return target, source
    if source.memory is MemorySpace.HBM and source.ndim == 1:
        return target, reshape(source, target.shape)
    if target.memory is MemorySpace.HBM and target.ndim == 1:
        return reshape(target, source.shape), source
    return target, source


def dma_transpose(*args: Any, **kwargs: Any) -> Any:
    return call("dma_transpose", ("dst", "src"), args, kwargs)


def _honour_constant_masks() -> None:
    """Every nisa call takes ``mask=True`` / ``mask=False`` (``hwsim.nki.masking``)."""
    from types import FunctionType

    from hwsim.nki.masking import honours_constant_mask

    for name, value in list(globals().items()):
        if (
            isinstance(value, FunctionType)
            and not name.startswith("_")
            and name != "get_nc_version"
        ):
            wrapped = honours_constant_mask(value)
            if hasattr(value, "required"):
                wrapped.required = value.required  # type: ignore[attr-defined]
            globals()[name] = wrapped


_honour_constant_masks()

#: nki.isa names of the public docs that this simulator does not implement, and why.
UNSUPPORTED = {
    "dma_compute": "DMA-engine compute is not modelled",
    "register_alloc": "engine registers (dynamic control flow) are not modelled",
    "register_load": "engine registers (dynamic control flow) are not modelled",
    "register_move": "engine registers (dynamic control flow) are not modelled",
    "register_store": "engine registers (dynamic control flow) are not modelled",
}


def core_barrier(data: Any, cores: Any = (0, 1), engine: Any = None, name: str = "") -> None:
    """``nisa.core_barrier``: the cores of ``cores`` wait for each other; this core's accesses
    of ``data`` before it are done before any core passes it (``hwsim.lang.isa.core_barrier``)."""
    from hwsim.lang.isa_multicore import core_barrier as lang_core_barrier
    from hwsim.nki.isa_ops import _engine

    chosen = _engine(engine) or "gpsimd"
    shared = nt.src(data, call="nisa.core_barrier")
    lang_core_barrier(shared, core=state().core, cores=tuple(int(c) for c in cores), engine=chosen)


def sendrecv(
    src: Any,
    dst: Any,
    send_to_rank: int,
    recv_from_rank: int,
    pipe_id: int = 0,
    dma_engine: Any = None,
    name: str = "",
) -> None:
    """``nisa.sendrecv``: send ``src`` to core ``send_to_rank``'s ``dst`` while core
    ``recv_from_rank`` sends into this core's ``dst`` (``hwsim.lang.isa.sendrecv``). Both
    DMA modes run on the DMA engines here (``dma_engine`` is accepted, without effect)."""
    from hwsim.lang.isa_multicore import sendrecv as lang_sendrecv

    lang_sendrecv(
        nt.src(src, call="nisa.sendrecv"), nt.dst(dst, call="nisa.sendrecv"),
        send_to=int(send_to_rank), recv_from=int(recv_from_rank), pipe=int(pipe_id),
    )  # fmt: skip


def __getattr__(name: str) -> Any:
    """An NKI name this simulator lacks: calling it is one clear error naming the kernel line."""
    return nt.unsupported_name("isa", "nisa", UNSUPPORTED, name)

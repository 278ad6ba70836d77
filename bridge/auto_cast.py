"""Auto-cast on the CPU: the reference a simulated run under ``auto_cast`` is judged against.

``reference_casts(precision)`` is a ``TorchDispatchMode`` that makes PyTorch on the CPU round
where the simulator's casts round (``bridge.precision`` has the semantics):

- ``matmult``: the FP32 operands of TensorE ops (``TENSORE_OPERANDS``: the two factors of a
  matmul, a convolution's input and weight, attention's q, k and v) are rounded to
  ``auto_cast_type`` and the op runs in fp32 — products of two rounded values are exact in fp32
  for bf16, fp16 and fp8, so this is fp32 accumulation of the cast operands, as PSUM does;
- ``all``: every FP32 op's floating operands are rounded, and its results too (the simulator
  keeps them in ``auto_cast_type`` tiles until the store writes them out in the graph's dtype).

Matmuls the bridge's decompositions make of ops that are not matmuls (``EXACT_ORIGINS``:
embedding_bag's mask, the one-hot gradients of embedding and nll_loss) keep their dtype: they
implement a gather or a scatter-add, which the compiler has no reason to cast. Such a node is
known by its ``original_aten`` (AOTAutograd's metadata); ``run_graph`` interprets a graph with
the casts switched off for it, as the lowering does.

A CPU kernel that fuses matmuls over values it computes itself (oneDNN's LSTM layer, whose
recurrent matmul reads the hidden state of the step before) is run through the bridge's own
decomposition (``RECOMPOSED``) so that each of its matmuls rounds as on the simulator.

Rounding is ``hwsim.dtypes.cast`` (round to nearest even, as the DMA and the engines cast), so
tf32 and fp8_e4m3 round exactly as on the simulator. The mode also records which results came
from a cast op (``cast_through``): only those are judged with the cast dtype's tolerance; a result
no cast op touched is held to its own dtype's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from hwsim.bridge.fx_interpreter import Interpreter
from hwsim.bridge.precision import Precision
from hwsim.dtypes import cast as hw_cast

aten = torch.ops.aten

#: ATen ops that run on TensorE, and the positions of their operands auto-cast rounds (a
#: bias or an additive mask is not a TensorE operand: it is added on the PSUM evacuation).
TENSORE_OPERANDS: dict[Any, tuple[int, ...]] = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten.baddbmm.default: (1, 2),
    aten.convolution.default: (0, 1),
    aten._convolution.default: (0, 1),
    aten.convolution_backward.default: (0, 1, 2),
    aten._scaled_dot_product_flash_attention_for_cpu.default: (0, 1, 2),
    aten._scaled_dot_product_efficient_attention.default: (0, 1, 2),
}


#: Ops the bridge implements with a one-hot or mask matmul (``bridge.embedding_bag``,
#: ``bridge.training_decompositions``): the matmuls they decompose into are not auto-cast.
EXACT_ORIGINS = frozenset(
    {
        aten._embedding_bag.default,
        aten._embedding_bag_forward_only.default,
        aten.embedding_dense_backward.default,
        aten.nll_loss_forward.default,
        aten.nll_loss_backward.default,
        aten.nll_loss2d_forward.default,
        aten.nll_loss2d_backward.default,
    }
)


_EXACT_NAMES = frozenset(str(op) for op in EXACT_ORIGINS)

#: Fused CPU kernels with inner matmuls on values they compute (module docstring), run through
#: the bridge's decomposition (``bridge.model_decompositions``) under the casts.
RECOMPOSED = frozenset({aten.mkldnn_rnn_layer.default})


def _recomposed(func: Any) -> Any:
    from hwsim.bridge.model_decompositions import model_decompositions

    decomposition = model_decompositions()[func]

    def lstm_layer(*args: Any) -> Any:
        """oneDNN's CPU layer takes [T, B, I] (its batch_first flag only says what the module
        was) and hx, cx as [B, H]; the decomposition takes them [1, B, H]."""
        hx, cx = args[5], args[6]
        flat = hx.dim() == 2
        if flat:
            hx, cx = hx.unsqueeze(0), cx.unsqueeze(0)
        out, hy, cy, workspace = decomposition(*args[:5], hx, cx, *args[7:14], False, *args[15:])
        return out, *((hy[0], cy[0]) if flat else (hy, cy)), workspace

    return lstm_layer


def exact_origin(origin: Any) -> bool:
    """Whether ``origin`` (a node's ``original_aten``) is one of ``EXACT_ORIGINS``, by name:
    AOTAutograd's metadata may hold another object for the same overload."""
    return origin is not None and str(origin) in _EXACT_NAMES


def casts_node(target: Any, origin: Any) -> bool:
    """Whether auto-cast applies to a TensorE op ``target`` decomposed from ``origin`` (a
    node's ``original_aten``, None if it was not decomposed)."""
    return target in TENSORE_OPERANDS and not exact_origin(origin)


def round_to(tensor: torch.Tensor, precision: Precision) -> torch.Tensor:
    """An fp32 tensor with its values rounded to ``precision.auto_cast_type`` (still fp32)."""
    if tensor.dtype != torch.float32 or tensor.numel() == 0:
        return tensor
    kind = precision.auto_cast_type
    if kind == "fp16" or (kind == "bf16" and type(tensor) is not torch.Tensor):
        # torch's own cast: a tensor subclass (the hwsim device's) has no .numpy()
        return tensor.to(torch.float16 if kind == "fp16" else torch.bfloat16).float()
    # bf16 too: ml_dtypes' RNE gives torch's values (NaN payloads aside) at a third of the cost
    # of torch's fp32 -> bf16 -> fp32 on a CPU without bf16 instructions; this runs on every
    # matmul operand of every checked call.
    source = tensor.detach()
    # A permuted dense tensor (a transposed weight) is rounded in its memory order and comes
    # back with its own strides, as torch's cast keeps them, without two transposing copies.
    strides = source.stride()
    order = sorted(range(source.dim()), key=lambda d: -strides[d])
    dense = source.permute(order) if kind == "bf16" else source
    if not dense.is_contiguous():
        order, dense = list(range(source.dim())), source.contiguous()
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf round as torch's do, quietly
        values = hw_cast(dense.numpy(), precision.cast_dtype).astype("float32")
    rounded = torch.from_numpy(values).reshape(dense.shape)
    return rounded.permute([order.index(d) for d in range(source.dim())])


class reference_casts(TorchDispatchMode):
    """The CPU with ``precision``'s casts (module docstring); ``cast_through(t)`` says whether
    tensor ``t`` came from a cast op, directly or through later ops."""

    def __init__(self, precision: Precision) -> None:
        super().__init__()
        self.precision = precision
        self._cast: WeakIdKeyDictionary = WeakIdKeyDictionary()
        #: Set while ``run_graph`` interprets a node whose matmul is not cast (EXACT_ORIGINS).
        self.exact = False

    def cast_through(self, tensor: Any) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor in self._cast

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.precision.casts and func in RECOMPOSED:  # its inner matmuls through the mode
            with self:
                return _recomposed(func)(*args, **kwargs)
        if self.precision.casts and func not in TENSORE_OPERANDS:
            with self:  # a composite op met inside a decomposition (linear): its parts here
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        tainted = any(t in self._cast for t in inputs)
        mode = self.precision.auto_cast
        operands = TENSORE_OPERANDS.get(func)
        everything = mode == "all" and not func.is_view
        if mode == "matmult" and operands is not None and not self.exact:
            args = tuple(
                round_to(a, self.precision) if i in operands and _fp32(a) else a
                for i, a in enumerate(args)
            )
            tainted = True
        elif everything and any(_fp32(t) for t in inputs):
            args, kwargs = pytree.tree_map_only(
                torch.Tensor, lambda t: round_to(t, self.precision), (args, kwargs)
            )
            tainted = True
        result = func(*args, **kwargs)
        if everything and tainted:
            result = _round_results(result, self.precision)
        if tainted:
            for leaf in pytree.tree_leaves(result):
                if isinstance(leaf, torch.Tensor):
                    self._cast[leaf] = True
        return result


def _fp32(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


def _round_results(result: Any, precision: Precision) -> Any:
    """Results of an op under ``all``, rounded; an in-place op's written tensor in place."""

    def one(t: torch.Tensor) -> torch.Tensor:
        if not _fp32(t):
            return t
        rounded = round_to(t.detach(), precision)
        with torch.no_grad():
            t.copy_(rounded)  # the same tensor object: in-place ops return their argument
        return t

    return pytree.tree_map_only(torch.Tensor, one, result)


def compute_dtype(precision: Precision, target: Any, value: Any, origin: Any = None) -> str:
    """The dtype a node of op ``target`` whose result is ``value`` (torch metadata) computes
    in under ``precision``: TensorE ops' operands by the matmul rule (unless decomposed from
    ``origin`` in ``EXACT_ORIGINS``), every other op's tiles by the tile rule; integer and
    bool results keep their own (the report's dtype per op)."""
    from hwsim.bridge.dtypes import to_hw

    first = next((t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)), None)
    if first is None:
        return ""
    try:
        own = to_hw(first.dtype)
    except KeyError:  # a dtype the device has no form of (complex): nothing to say
        return ""
    if not own.is_float:
        return own.name
    if casts_node(target, origin):
        return precision.matmul_dtype(own).name
    return precision.tile_dtype(own).name


def run_graph(gm: torch.fx.GraphModule, args: Any, casts: reference_casts) -> Any:
    """``gm(*args)`` on the CPU under ``casts`` (entered by the caller), node by node, with the
    casts off for matmuls decomposed from ``EXACT_ORIGINS`` (module docstring)."""

    class _Interpreter(Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            casts.exact = exact_origin(node.meta.get("original_aten"))
            try:
                return super().run_node(node)
            finally:
                casts.exact = False

    return _Interpreter(gm).run(*args)

"""``hwsim fuzz``'s ``graph`` kind: random PyTorch graphs through torch.compile(backend="hwsim").

A case (spec, plain JSON) is a dtype, input shapes (broadcastable to each other), a chain of
ops and which values are outputs, forward only or a training step (``train``: the first input
requires grad and the loss is the sum of the outputs). Ops, on value numbers:

- ``["add"|"sub"|"mul"|"maximum", a, b]``: broadcasting binary ops;
- ``["relu"|"gelu"|"tanh"|"sigmoid"|"silu"|"neg"|"exp", a]``;
- ``["softmax"|"layer_norm"|"sum"|"mean", a]`` over the last dimension (sum/mean keep it);
- ``["scale", a, c]``: a * c;
- ``["matmul", a, b]``: a [..., M, K] @ b [K, N];
- ``["transpose", a]`` (the last two dimensions) and ``["stride", a]`` (``a[..., ::2]``): views
  with other strides, so layouts and the residency pass meet non-contiguous values.

The chains are what the fusion and residency passes look for (elementwise runs, matmul
epilogues, row ops). Each case is compiled with ``fallback="error"`` and ``measure_passes``,
then checked: it compiles and runs; outputs (and the first input's gradient) within tolerance of
eager PyTorch; a second call gives the same values and simulated times; no run below its roofline
floor; and no pass that is on makes its graph slower than without it (beyond ``PASS_SLACK``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from hwsim.fuzz.checks import Failure
from hwsim.fuzz.kinds import FuzzKind
from hwsim.fuzz.spec import Draw, FuzzError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BINARY = ("add", "sub", "mul", "maximum")
UNARY = ("relu", "gelu", "tanh", "sigmoid", "silu", "neg", "exp")
ROW = ("softmax", "layer_norm", "sum", "mean")
DIMS = (1, 3, 8, 16, 32, 64, 100, 128)
#: A pass on may be this much slower than off before it counts (the DMA model's processor
#: sharing is not exactly monotone).
PASS_SLACK = 0.001
#: |compiled - eager| allowed, as a share of max(1, max |eager|), per dtype.
TOLERANCE = {"float32": 2e-3, "bfloat16": 6e-2}
MAX_OPS = 8
#: Elements of the largest input.
MAX_ELEMENTS = 1 << 15
#: A graph case takes seconds to check: its shrink gets fewer attempts than a kernel's.
SHRINK_ATTEMPTS = 30
KEYS = {"dtype", "train", "inputs", "ops", "outputs"}


def generate(draw: Draw) -> dict[str, Any]:
    dtype = draw.choice(tuple(DTYPES))
    rank = draw.integer(2, 3)
    shape = [draw.choice(DIMS) for _ in range(rank)]
    while math.prod(shape) > MAX_ELEMENTS:  # keeps a case to seconds, not minutes
        shape[shape.index(max(shape))] //= 2
    inputs = [shape]
    for _ in range(draw.integer(0, 2)):
        inputs.append(draw.choice([shape, shape[-1:], [*shape[:-1], 1], shape[-2:]]))
    shapes = [tuple(s) for s in inputs]
    ops: list[list[Any]] = []
    for _ in range(draw.integer(1, MAX_OPS)):
        op = _draw_op(draw, shapes)
        if op is not None:
            ops.append(op)
            shapes.append(_shape_of(op, shapes))
    last = len(shapes) - 1
    outputs = sorted({last, draw.integer(0, last)})
    train = dtype == "float32" and draw.choice((False, True))
    return {"dtype": dtype, "train": train, "inputs": inputs, "ops": ops, "outputs": outputs}


def _draw_op(draw: Draw, shapes: list[tuple[int, ...]]) -> list[Any] | None:
    kind = draw.choice(("binary", "unary", "row", "scale", "matmul", "view"))
    a = draw.integer(0, len(shapes) - 1)
    if kind == "binary":
        b = draw.integer(0, len(shapes) - 1)
        try:
            torch.broadcast_shapes(shapes[a], shapes[b])
        except RuntimeError:
            return None
        return [draw.choice(BINARY), a, b]
    if kind == "unary":
        return [draw.choice(UNARY), a]
    if kind == "row":
        return [draw.choice(ROW), a]
    if kind == "scale":
        return ["scale", a, draw.choice((0.5, -1.0, 2.0))]
    if kind == "view":
        if len(shapes[a]) < 2 or shapes[a][-1] < 2:
            return None
        return [draw.choice(("transpose", "stride")), a]
    return _matmul(draw, a, shapes)


def _matmul(draw: Draw, a: int, shapes: list[tuple[int, ...]]) -> list[Any] | None:
    """a @ b with b a 2-D value [K, N] (an input or an earlier value), if one fits."""
    k = shapes[a][-1]
    fits = [i for i, s in enumerate(shapes) if len(s) == 2 and s[0] == k and i != a]
    return ["matmul", a, draw.choice(fits)] if fits else None


def _shape_of(op: list[Any], shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    name, a = op[0], shapes[op[1]]
    if name in BINARY:
        return tuple(torch.broadcast_shapes(a, shapes[op[2]]))
    if name in ("sum", "mean"):
        return (*a[:-1], 1)
    if name == "matmul":
        return (*a[:-1], shapes[op[2]][-1])
    if name == "transpose":
        return (*a[:-2], a[-1], a[-2])
    if name == "stride":
        return (*a[:-1], (a[-1] + 1) // 2)
    return a


def value_shapes(spec: dict[str, Any]) -> list[tuple[int, ...]]:
    shapes = [tuple(s) for s in spec["inputs"]]
    for op in spec["ops"]:
        shapes.append(_shape_of(op, shapes))
    return shapes


def check_spec(spec: Any) -> dict[str, Any]:
    try:
        if not isinstance(spec, dict) or set(spec) != KEYS or spec["dtype"] not in DTYPES:
            raise ValueError(f"keys {sorted(KEYS)} and dtype one of {list(DTYPES)}")
        if not isinstance(spec["train"], bool) or not 1 <= len(spec["inputs"]) <= 3:
            raise ValueError("train must be a boolean, with 1 to 3 inputs")
        for shape in spec["inputs"]:
            if not 1 <= len(shape) <= 3 or any(
                type(d) is not int or not 1 <= d <= 512 for d in shape
            ):
                raise ValueError(f"input shape {shape!r}")
        count = len(spec["inputs"])
        shapes = [tuple(s) for s in spec["inputs"]]
        for op in spec["ops"]:
            _check_op(op, count, shapes)
            shapes.append(_shape_of(op, shapes))
            count += 1
        if not spec["outputs"] or any(
            type(i) is not int or not 0 <= i < count for i in spec["outputs"]
        ):
            raise ValueError(f"outputs {spec['outputs']!r}")
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as exc:
        raise FuzzError(f"not a valid graph case ({type(exc).__name__}: {exc})") from None
    return spec


def _check_op(op: Any, count: int, shapes: list[tuple[int, ...]]) -> None:
    arity = {
        **dict.fromkeys(BINARY, 3),
        **dict.fromkeys(UNARY + ROW, 2),
        "scale": 3,
        "matmul": 3,
        "transpose": 2,
        "stride": 2,
    }
    if not isinstance(op, list) or not op or arity.get(op[0]) != len(op):
        raise ValueError(f"op {op!r}")
    refs = [1, 2] if op[0] in BINARY or op[0] == "matmul" else [1]
    for i in refs:
        if type(op[i]) is not int or not 0 <= op[i] < count:
            raise ValueError(f"op {op!r}: {op[i]!r} is not an earlier value")
    if op[0] == "scale" and not isinstance(op[2], (int, float)):
        raise ValueError(f"op {op!r}: the scale must be a number")
    if op[0] == "matmul":
        b = shapes[op[2]]
        if len(b) != 2 or b[0] != shapes[op[1]][-1]:
            raise ValueError(f"op {op!r}: shapes {shapes[op[1]]} @ {b}")
    if op[0] in ("transpose", "stride") and len(shapes[op[1]]) < 2:
        raise ValueError(f"op {op!r}: needs two dimensions")


class GraphCase(torch.nn.Module):
    """The case as a module: forward interprets the ops (no code is generated and run)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.ops = [tuple(op) for op in spec["ops"]]
        self.outputs = tuple(spec["outputs"])

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(inputs)
        for op in self.ops:
            values.append(_apply(op, values))
        return tuple(values[i] for i in self.outputs)


def _apply(op: tuple[Any, ...], v: list[torch.Tensor]) -> torch.Tensor:
    name, a = op[0], v[op[1]]
    if name == "add":
        return a + v[op[2]]
    if name == "sub":
        return a - v[op[2]]
    if name == "mul":
        return a * v[op[2]]
    if name == "maximum":
        return torch.maximum(a, v[op[2]])
    if name == "scale":
        return a * op[2]
    if name == "matmul":
        return a @ v[op[2]]
    if name == "transpose":
        return a.transpose(-1, -2)
    if name == "stride":
        return a[..., ::2]
    if name == "softmax":
        return torch.softmax(a, dim=-1)
    if name == "layer_norm":
        return torch.nn.functional.layer_norm(a, a.shape[-1:])
    if name == "sum":
        return a.sum(dim=-1, keepdim=True)
    if name == "mean":
        return a.mean(dim=-1, keepdim=True)
    if name == "exp":
        return torch.exp(torch.tanh(a))  # bounded: a chain of exps never overflows
    return getattr(torch.nn.functional, name)(a) if name != "neg" else -a


def inputs_of(spec: dict[str, Any], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    dtype = DTYPES[spec["dtype"]]
    return [(torch.rand(tuple(s), generator=generator) * 4 - 2).to(dtype) for s in spec["inputs"]]


def check_case(spec: dict[str, Any], config: str = "trn2") -> list[Failure]:
    """The checks of the module docstring on one graph case."""
    import torch._dynamo

    from hwsim.bridge import dynamo as hwsim_dynamo

    torch._dynamo.reset()  # each case compiles afresh (and dynamo's recompile limit stays away)
    model = GraphCase(spec)
    inputs = inputs_of(spec)
    if spec["train"]:
        inputs[0].requires_grad_(True)
    options: dict[str, Any] = {"config": config, "fallback": "error", "measure_passes": True}
    compiled = torch.compile(model, backend="hwsim", options=options)
    try:
        got = compiled(*inputs)
        grad = _grad(got, inputs[0]) if spec["train"] else None
        report = hwsim_dynamo.last_report()
        again = compiled(*inputs)
    except Exception as exc:
        cause = exc.__cause__ or exc
        return [Failure("build", f"{type(cause).__name__}: {str(cause)[:400]}")]
    failures: list[Failure] = []
    with torch.no_grad():
        expected = model(*[x.detach().requires_grad_(x.requires_grad) for x in inputs])
    failures += _compare("output", got, expected, spec["dtype"])
    if spec["train"]:
        reference = inputs[0].detach().clone().requires_grad_(True)
        eager = model(reference, *inputs[1:])
        failures += _compare("gradient", (grad,), (_grad(eager, reference),), spec["dtype"])
    if any(
        a.detach().float().tolist() != b.detach().float().tolist()
        for a, b in zip(got, again, strict=True)
    ):
        failures.append(Failure("determinism", "a second call returned other values"))
    failures += _runs(report)
    return failures


def _grad(outputs: tuple[torch.Tensor, ...], x: torch.Tensor) -> torch.Tensor:
    """d(sum of the outputs)/dx (zero when no output depends on x)."""
    used = [o.float().sum() for o in outputs if o.requires_grad]
    if not used:
        return torch.zeros_like(x)
    loss = torch.stack(used).sum()
    (g,) = torch.autograd.grad(loss, x, allow_unused=True)
    return g if g is not None else torch.zeros_like(x)


def _compare(what: str, got: Any, expected: Any, dtype: str) -> list[Failure]:
    out = []
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g64, e64 = g.detach().double(), e.detach().double()
        if g64.shape != e64.shape:
            out.append(
                Failure("numerics", f"{what} {i}: shape {tuple(g64.shape)} vs {tuple(e64.shape)}")
            )
            continue
        err = float((g64 - e64).abs().max()) if g64.numel() else 0.0
        scale = max(1.0, float(e64.abs().max()) if e64.numel() else 0.0)
        if not math.isfinite(err) or err > TOLERANCE[dtype] * scale:
            out.append(
                Failure(
                    "numerics",
                    f"{what} {i}: max |error| {err:.4g} > "
                    f"{TOLERANCE[dtype]:g} x {scale:.4g} against eager PyTorch",
                )
            )
    return out


def _runs(report: Any) -> list[Failure]:
    out = []
    times: dict[str, list[float]] = {}
    for run in report.runs:
        total, floor = float(run.get("total_ns") or 0.0), run.get("floor_ns")
        times.setdefault(str(run.get("graph")), []).append(total)
        if floor and total < float(floor) * (1 - 1e-9):
            out.append(
                Failure(
                    "roofline",
                    f"{run.get('graph')}: {total:,.1f} ns below its "
                    f"floor {float(floor):,.1f} ns ({run.get('floor_binding')})",
                )
            )
    for graph, seen in times.items():
        if len(set(seen)) > 1:
            out.append(
                Failure(
                    "determinism",
                    f"{graph}: simulated times differ across calls: {sorted(set(seen))}",
                )
            )
    for effects in report.pass_effects:
        for row in effects["rows"]:
            on, off = row["with"]["total_ns"], row["without"]["total_ns"]
            if on > off * (1 + PASS_SLACK):
                out.append(
                    Failure(
                        "passes",
                        f"{effects.get('graph', '')} pass {row['pass']}: "
                        f"{on:,.1f} ns with it, {off:,.1f} ns without",
                    )
                )
    return out


def kind() -> FuzzKind:
    """The ``graph`` kind (the ``hwsim.fuzz_kinds`` entry point)."""
    from hwsim.bridge.fuzz_graphs_shrink import candidates, reproduction

    return FuzzKind(
        "graph",
        generate,
        check_spec,
        check_case,
        candidates,
        reproduction,
        shrink_attempts=SHRINK_ATTEMPTS,
    )

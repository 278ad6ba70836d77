"""Text generation on the simulated NeuronCore, timed token by token.

``generate(model, input_ids, max_new_tokens=16)`` runs ``transformers``' ``model.generate`` (greedy
by default) on whichever front door the model is set up for: parameters on the ``hwsim`` device
(eager ops, or a compiled ``forward``), or a ``forward`` compiled with
``torch.compile(backend="hwsim")`` on CPU tensors. It returns the tokens and a ``Generation``
record: the simulated time of the prefill (the prompt's forward pass, and an encoder's) and of
every decode step (one token each), the programs the bridge lowered during each step, and the
host<->device transfers inside them. The record is also appended to the report the work went to
(``Report.generations``): the device's report for a model on the device, else the compile
report.

**Static shapes, one decode program.** The simulator, like the Neuron compiler, runs programs
of static shapes. ``transformers``' default ``DynamicCache`` grows the key/value cache by one
position per token, so every decode step has new shapes and the bridge lowers a new program per
token (a dynamo graph with symbolic sizes is specialized per shape; eager ops are cached per
layout). ``cache="static"`` (the default here) uses ``transformers``' ``StaticCache`` instead:
keys and values written in place at the token's position in a buffer of ``max_cache_len``
positions, attention masked to the positions written, so every decode step has the same shapes
and the decode program is lowered once. ``max_cache_len`` is rounded up to a multiple of
``bucket`` (Neuron's sequence-length buckets): later calls whose prompt and new tokens fit the
same bucket reuse the programs too. The prefill is lowered once per prompt length.
``Generation.recompiles`` counts the programs the model's forward lowered during decode steps
after the first; ``loop_recompiles`` those of the loop's own device ops (module ``Step``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from rich.table import Table

from hwsim.bridge.report_records import GenerationRow
from hwsim.units import time_text

#: Default multiple the static cache's length is rounded up to.
DEFAULT_BUCKET = 64


@dataclass
class Step:
    """One forward call of the generation loop and what followed it until the next call:
    simulated ns, programs lowered inside the model's forward and outside it (the loop's own
    device ops: appending the token to the ids and the 2-D mask, which grow every step), host
    <-> device transfers, and host wall seconds."""

    sim_ns: float
    forward_programs: int = 0
    loop_programs: int = 0
    transfers: int = 0
    wall_s: float = 0.0


@dataclass
class Generation:
    """The timing of one ``generate`` call (the tokens are returned beside it).

    steps[0] is the prefill (everything from the call's start to the second forward call: an
    encoder, the prompt's forward pass, the first token's selection); steps[1:] are the decode
    steps, one new token each."""

    front_door: str
    cache: str
    prompt_tokens: int
    new_tokens: int
    batch: int
    max_cache_len: int | None
    steps: list[Step] = field(default_factory=list)

    @property
    def prefill_ns(self) -> float:
        return self.steps[0].sim_ns if self.steps else 0.0

    @property
    def decode_ns(self) -> list[float]:
        return [s.sim_ns for s in self.steps[1:]]

    @property
    def decode_mean_ns(self) -> float:
        decode = self.decode_ns
        return sum(decode) / len(decode) if decode else 0.0

    @property
    def recompiles(self) -> int:
        """Programs the model's forward lowered during decode steps after the first (0: one
        decode program served every token)."""
        return sum(s.forward_programs for s in self.steps[2:])

    @property
    def loop_recompiles(self) -> int:
        """Programs the generation loop's own device ops lowered after the first decode step:
        ``transformers`` appends each token to ids and mask tensors that grow, so on the device
        these one-op programs are new shapes every step (0 under torch.compile on CPU tensors,
        where the loop runs on the host)."""
        return sum(s.loop_programs for s in self.steps[2:])

    def to_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        steps = fields.pop("steps")
        return {
            **fields,
            "prefill_ns": self.prefill_ns,
            "decode_ns": self.decode_ns,
            "decode_mean_ns": self.decode_mean_ns,
            "recompiles": self.recompiles,
            "loop_recompiles": self.loop_recompiles,
            "steps": steps,
        }


def generate(
    model: Any,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int = 16,
    cache: str = "static",
    bucket: int = DEFAULT_BUCKET,
    report: Any = None,
    **generate_kwargs: Any,
) -> tuple[Any, Generation]:
    """``model.generate(input_ids, max_new_tokens=..., do_sample=False, ...)`` timed per token.

    cache: 'static' (a StaticCache of ``max_cache_len`` rounded up to ``bucket``: one decode
    program) or 'dynamic' (transformers' default: one program per cache length).
    report: the ``Report`` to append the record to (default: the device's for a model on the
    ``hwsim`` device, else the latest compile report).
    Returns what ``model.generate`` returns (the ids, prompt included; or its output object
    with ``return_dict_in_generate=True``, e.g. to compare each step's logits) and the record.
    """
    if cache not in ("static", "dynamic"):
        raise ValueError(f"generate: cache={cache!r}; valid: 'static', 'dynamic'")
    if bucket < 1:
        raise ValueError(f"generate: bucket={bucket} must be a positive number of positions")
    kwargs: dict[str, Any] = {"do_sample": False, **generate_kwargs}
    batch, prompt = int(input_ids.shape[0]), int(input_ids.shape[-1])
    max_cache_len = None
    if cache == "static":
        needed = prompt + max_new_tokens
        max_cache_len = -(-needed // bucket) * bucket
        kwargs |= {"cache_implementation": "static", "max_cache_len": max_cache_len}
    door = front_door(model)
    on_device = door == "device"
    record = Generation(
        front_door=door,
        cache=cache,
        prompt_tokens=prompt,
        new_tokens=0,
        batch=batch,
        max_cache_len=max_cache_len,
    )
    clock = _SimClock()
    with _StepTimer(model, clock, record), torch.no_grad():
        output = model.generate(input_ids, max_new_tokens=max_new_tokens, **kwargs)
    tokens = output if isinstance(output, torch.Tensor) else output.sequences
    # an encoder-decoder's sequences start with the decoder's start token, a decoder's with the
    # prompt
    record.new_tokens = int(tokens.shape[-1]) - (1 if model.config.is_encoder_decoder else prompt)
    target = report if report is not None else _default_report(on_device)
    if target is not None:
        target.add(GenerationRow(record.to_dict()))
    return output, record


def front_door(model: Any) -> str:
    """'device' for a model on the ``hwsim`` device, 'compile' for one whose ``forward`` is
    compiled; otherwise nothing would run on the simulator, which is an error."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule):
        raise ValueError(
            "generate: torch.compile(model) compiles model(...) but not the forward calls "
            "model.generate makes; compile the forward instead: "
            "model.forward = torch.compile(model.forward, backend='hwsim', options=...)"
        )
    parameter = next(iter(model.parameters()), None)
    if parameter is not None and parameter.device.type == "hwsim":
        return "device"
    if getattr(model.forward, "_torchdynamo_orig_callable", None) is not None:
        return "compile"
    raise ValueError(
        "generate: nothing of this model would run on the simulator: move it to the device "
        "(model.to('hwsim')) or compile its forward "
        "(model.forward = torch.compile(model.forward, backend='hwsim'))"
    )


def _default_report(on_device: bool) -> Any:
    if on_device:
        from hwsim.bridge import device

        return device.report()
    from hwsim.bridge.dynamo import reports

    found = reports()
    return found[-1] if found else None


class _SimClock:
    """Simulated ns, programs lowered and transfers so far, over every report being filled:
    the compile reports (``dynamo.reports()``) and the device session's."""

    def now(self) -> tuple[float, int, int]:
        from hwsim.bridge.dynamo import reports
        from hwsim.bridge.graph_lowering import programs_lowered

        filled = list(reports())
        device = _device_report()
        if device is not None and all(device is not r for r in filled):
            filled.append(device)
        sim_ns = sum(r.total_sim_ns for r in filled)
        transfers = sum(1 for r in filled for op in r.ops if op.status == "transfer")
        return sim_ns, programs_lowered(), transfers


def _device_report() -> Any:
    from hwsim.bridge.device_session import _CURRENT

    return _CURRENT[-1].report if _CURRENT else None


class _StepTimer:
    """While active, ``model.forward`` marks step boundaries: each call closes the previous step
    (from the previous call's start, or the generation's start, to this call's start)."""

    def __init__(self, model: Any, clock: _SimClock, record: Generation) -> None:
        self.model, self.clock, self.record = model, clock, record
        self.inner: Callable[..., Any] | None = None
        self.mark: tuple[float, int, int] = (0.0, 0, 0)
        self.wall = 0.0
        self.calls = 0
        self.forward_programs = 0  # lowered inside forward calls since the last mark

    def __enter__(self) -> _StepTimer:
        self.inner = self.model.forward
        had_own = "forward" in vars(self.model)
        self.restore = self.inner if had_own else None

        def timed_forward(*args: Any, **kwargs: Any) -> Any:
            from hwsim.bridge.graph_lowering import programs_lowered

            self.calls += 1
            if self.calls >= 2:  # the prefill step lasts until the second call
                self._close()
            assert self.inner is not None
            before = programs_lowered()
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.forward_programs += programs_lowered() - before

        self.mark, self.wall = self.clock.now(), time.perf_counter()
        self.model.forward = timed_forward
        return self

    def _close(self) -> None:
        now, wall = self.clock.now(), time.perf_counter()
        sim_ns, lowered, transfers = (a - b for a, b in zip(now, self.mark, strict=True))
        forward = self.forward_programs
        self.record.steps.append(
            Step(sim_ns, forward, int(lowered) - forward, int(transfers), wall - self.wall)
        )
        self.mark, self.wall, self.forward_programs = now, wall, 0

    def __exit__(self, *exc: Any) -> None:
        if self.restore is not None:
            self.model.forward = self.restore
        else:
            del self.model.forward
        if exc[0] is None and self.calls:
            self._close()


def generation_table(generations: list[dict[str, Any]]) -> Table | None:
    """The report's table of timed generations (None when there are none)."""
    if not generations:
        return None
    table = Table(title="generation (simulated time per token)", title_justify="left")
    for column in (
        "front door",
        "cache",
        "batch",
        "prompt",
        "new tokens",
        "prefill",
        "decode / token (mean)",
        "decode min-max",
        "recompiles in decode (forward / loop)",
    ):
        table.add_column(column)
    for g in generations:
        decode = g["decode_ns"]
        spread = f"{time_text(min(decode))} to {time_text(max(decode))}" if decode else "-"
        cache = g["cache"] + (f" ({g['max_cache_len']})" if g["max_cache_len"] else "")
        table.add_row(
            g["front_door"],
            cache,
            str(g["batch"]),
            str(g["prompt_tokens"]),
            str(g["new_tokens"]),
            time_text(g["prefill_ns"]),
            time_text(g["decode_mean_ns"]),
            spread,
            f"{g['recompiles']} / {g['loop_recompiles']}",
        )
    return table

"""Greedy generation with a KV cache on the simulator, timed per token, on both front doors.

    .venv/bin/python bench/generation.py [--models gpt2 llama ...] [--doors compile device]
        [--tokens 16] [--cache static|dynamic] [--json PATH]

For each model of the zoo (default: GPT-2, Llama, Mistral, Qwen2, T5) and each front door
(``compile``: ``forward`` compiled with backend 'hwsim' on CPU tensors; ``device``: the model on
the ``hwsim`` device, eager ops), ``bridge.generation.generate`` makes ``--tokens`` greedy
tokens from one 8-token prompt (T5: a 12-token input) under fallback 'error'. Printed per run:
whether the tokens equal eager's (target: yes), the CPU ops (target 0), the simulated prefill
and mean decode time per token, the programs lowered during decoding after the first step
(target 0 with the static cache; the device's loop ops separately), and the wall seconds.
Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent  # (see bench/bridge.py: don't shadow ``bridge``)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import hwsim  # noqa: E402,F401  (first: one BLAS thread before numpy loads)

# isort: split
import torch  # noqa: E402
import torch._dynamo  # noqa: E402

from hwsim import bridge  # noqa: E402
from hwsim.bridge import device, zoo  # noqa: E402
from hwsim.bridge.generation import generate  # noqa: E402

MODELS = ["gpt2", "llama", "mistral", "qwen2", "t5"]


def run_one(name: str, door: str, tokens: int, cache: str) -> dict[str, object]:
    entry = zoo.ZOO[name]
    prompt = entry.inputs()["input_ids"][:1]
    with torch.no_grad():
        expected = entry.build().generate(prompt, max_new_tokens=tokens, do_sample=False)
    torch._dynamo.reset()
    model = entry.build()
    if door == "device":
        device.configure("trn2", fallback="error")
        model, prompt = model.to("hwsim"), prompt.to("hwsim")
    else:
        options = {"config": "trn2", "fallback": "error"}
        model.forward = torch.compile(model.forward, backend="hwsim", options=options)
    start = time.perf_counter()
    try:
        got, record = generate(model, prompt, max_new_tokens=tokens, cache=cache)
    except Exception as error:
        return {"model": name, "door": door, "error": f"{type(error).__name__}: {error}"}
    wall_s = time.perf_counter() - start
    reports = [device.report()] if door == "device" else [bridge.last_report()]
    return {
        "model": name,
        "door": door,
        "equal": bool(torch.equal(got.cpu(), expected)),
        "cpu_ops": sum(len(r.fallbacks()) for r in reports),
        "wall_s": round(wall_s, 1),
        **record.to_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS, choices=list(zoo.ZOO))
    parser.add_argument("--doors", nargs="*", default=["compile", "device"])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--cache", default="static", choices=["static", "dynamic"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    print(
        f"{'model':<8} {'door':<8} {'equal':>5} {'cpu':>4} {'prefill us':>11} "
        f"{'decode us/token':>16} {'recompiles':>10} {'loop':>5} {'wall s':>7}"
    )
    for name in args.models:
        for door in args.doors:
            row = run_one(name, door, args.tokens, args.cache)
            rows.append(row)
            if "error" in row:
                print(f"{name:<8} {door:<8} FAIL {row['error'][:200]}", flush=True)
                continue
            print(
                f"{name:<8} {door:<8} {'yes' if row['equal'] else 'NO':>5} {row['cpu_ops']:>4} "
                f"{row['prefill_ns'] / 1e3:>11.1f} {row['decode_mean_ns'] / 1e3:>16.1f} "
                f"{row['recompiles']:>10} {row['loop_recompiles']:>5} {row['wall_s']:>7}",
                flush=True,
            )
    met = [r for r in rows if r.get("equal") and r.get("cpu_ops") == 0]
    print(f"{len(met)}/{len(rows)} runs with eager's tokens and 0 CPU ops (target: all)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()

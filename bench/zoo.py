"""The model zoo through torch.compile(backend="hwsim") with fallback 'error': one line per model.

    .venv/bin/python bench/zoo.py [--config trn2] [--models gpt2 bloom ...] [--json PATH]

Each architecture of ``bridge.zoo`` (docs/models.md) is built from its config (random weights),
run eagerly, then compiled with fallback 'error' and run once. Printed per model: the wall
seconds of the compiled first call (capture, AOTAutograd, lowering, simulation, the check
against the CPU), the simulated time of the run, the nodes on the simulator and on the CPU
(target 0: under 'error' a CPU op raises and the line says FAIL with why), and the output's
largest difference from eager judged with the fp32 tolerance. Ends with the count of models
meeting the target (all ops on the simulator, output equal to eager). Always exits 0.
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
from hwsim.bridge import zoo  # noqa: E402
from hwsim.bridge.precision import TOLERANCES, compare  # noqa: E402


def run_one(name: str, config: str) -> dict[str, object]:
    entry = zoo.ZOO[name]
    model, inputs = entry.build(), entry.inputs()
    torch._dynamo.reset()
    with torch.no_grad():
        expected = entry.pick(model(**inputs))
        compiled = torch.compile(
            model, backend="hwsim", options={"config": config, "fallback": "error"}
        )
        start = time.perf_counter()
        try:
            got = entry.pick(compiled(**inputs))
        except Exception as error:  # a CPU op under 'error', or a lowering that failed
            return {"model": name, "ok": False, "error": f"{type(error).__name__}: {error}"}
        wall_s = time.perf_counter() - start
    report = bridge.last_report()
    stats = compare(got.float(), expected.float(), TOLERANCES["fp32"])
    cpu = len(report.fallbacks())
    return {
        "model": name,
        "family": entry.family,
        "wall_s": round(wall_s, 1),
        "sim_us": round(report.total_sim_ns / 1e3, 1),
        "simulator_nodes": len(report.lowered()),
        "cpu_nodes": cpu,
        "max_abs_vs_eager": stats.max_abs,
        "numerics_ok": report.numerics_ok,
        "ok": cpu == 0 and stats.ok and report.numerics_ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--models", nargs="*", default=list(zoo.ZOO), choices=list(zoo.ZOO))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    print(
        f"{'model':<12} {'family':<8} {'wall s':>7} {'sim us':>9} {'nodes':>6} {'cpu':>4}  "
        "max |err| vs eager"
    )
    for name in args.models:
        row = run_one(name, args.config)
        rows.append(row)
        if "error" in row:
            print(f"{name:<12} FAIL {row['error'][:200]}", flush=True)
            continue
        verdict = "PASS" if row["ok"] else "MISS"
        print(
            f"{name:<12} {row['family']:<8} {row['wall_s']:>7} {row['sim_us']:>9} "
            f"{row['simulator_nodes']:>6} {row['cpu_nodes']:>4}  {row['max_abs_vs_eager']:.1e} "
            f"{verdict}",
            flush=True,
        )
    passed = sum(bool(r["ok"]) for r in rows)
    print(
        f"{passed}/{len(rows)} models with every op on the simulator and eager's output "
        "(target: all)"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

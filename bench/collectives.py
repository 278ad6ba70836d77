"""All-reduce time against message size on 2 to 32 ranks, simulated, beside the ring formula.

    .venv/bin/python bench/collectives.py [--config trn2] [--ranks 2 4 8 16 32] [--algorithm ring]

Each row is one simulated run (timing only) of one all-reduce of a bf16 buffer of the given size
over N ranks, each rank a logical NeuronCore (``chip.cores_per_logical_core`` physical cores;
on trn2, 4 ranks a chip, so 8 ranks span 2 chips and 32 ranks 8 chips of the 4x4 torus). The
collective runs on the ranks' collective engines (``hwsim.machine.collectives``); its time is
the span from the moment every rank arrived to its end, read from the trace.

Beside it, the ring formula at its two ends, from the config's named link parameters alone:

- latency-bound (small messages): ``2 (N - 1) x alpha + launch``, alpha the slowest hop's
  latency in the ring;
- bandwidth-bound (large messages): ``(N - 1) / N x B x (t_reduce + t_copy)``, per byte of a
  step the slower of the slowest hop's link (``1 / beta``) and the rank's share of its HBM stack
  (``touches / beta_hbm``, 3 touches a reduced byte, 2 a forwarded one: ``collectives.*``);
  with HBM off this is the textbook ``2 (N - 1) / N x B / beta``.

``ring/formula`` is the simulated ring time over ``max(lat-bound, bw-bound)``: near 1 at both
ends when the simulated ring is the textbook ring; between the ends the sum of both terms shows
(up to 2x).

Published figures, for comparison only (nothing here is fitted to them): the NCCOM-TEST user
guide's example all-reduce of 32 MiB on 2 ranks, 768 us (40.69 GB/s bus bandwidth; the guide does
not say which instance ran it) [nccom-test guide]; the per-hop latency of Ring/KangaRing within an
instance, about 1-2 us, and ~15 us between instances (HARDWARE.md §1.2 [S32]).
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

from hwsim.chip import spmd
from hwsim.config import HardwareConfig, load_config
from hwsim.cost.collectives import CollectiveCosts
from hwsim.lang import TensorSpec, bfloat16, hbm, kernel, ndarray
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import run

KIB = 1024
SIZES = [KIB * 4**k for k in range(11)]  # 1 KiB .. 1 GiB
PUBLISHED = [("nccom-test guide example, 2 ranks", 2, 32 * KIB * KIB, 768_000.0)]


def _program(config: HardwareConfig, ranks: int, nbytes: int, algorithm: str):
    per = config.chip.cores_per_logical_core
    group = tuple(per * r for r in range(ranks))
    cols = max(1, nbytes // 2 // 128)
    rows = 128 if nbytes >= 256 else nbytes // 2

    @kernel
    def rank_kernel(x, rank):  # type: ignore[no-untyped-def]
        out = ndarray(x.shape, x.dtype, buffer=hbm, name="y")
        nisa.collective(
            "all_reduce", out, x, group=group, rank=rank, cores_per_rank=per, algorithm=algorithm
        )
        return out

    spec = TensorSpec((rows, cols), bfloat16)
    program = spmd(lambda r: rank_kernel.build(spec, r, config=config).program, ranks)
    return program, group


def simulate_ns(config: HardwareConfig, ranks: int, nbytes: int, algorithm: str) -> tuple:
    program, group = _program(config, ranks, nbytes, algorithm)
    result = run(program, config, numerics=False, core_ids=group)
    record = result.trace.collectives[0]
    ns_per_tick = Fraction(1000, result.trace.base_mhz)
    return float((record.end_tick - record.start_tick) * ns_per_tick), record.algorithm


def ring_ends_ns(costs: CollectiveCosts, config: HardwareConfig, ranks: int, nbytes: int):
    """(latency-bound, bandwidth-bound) ends of the ring formula for this group."""
    from hwsim.cost.collectives import _Plan  # the ring's hops, as the cost model places them

    per = config.chip.cores_per_logical_core
    plan = _Plan(costs, "all_reduce", nbytes, tuple(per * r for r in range(ranks)), per)
    hops = [plan.hop(i, i + 1) for i in range(ranks)]
    alpha = max(h.latency_ns for h in hops)
    beta = min(h.bandwidth for h in hops)
    beta_hbm = min(h.hbm for h in hops)
    touches = config.collectives
    per_byte = sum(
        max(1 / beta, Fraction(t) / beta_hbm)
        for t in (touches.hbm_touches_per_reduce_byte, touches.hbm_touches_per_copy_byte)
    )
    launch = Fraction(str(config.collectives.launch_ns))
    latency_bound = 2 * (ranks - 1) * alpha + launch
    bandwidth_bound = Fraction(ranks - 1, ranks) * nbytes * per_byte
    return float(latency_bound), float(bandwidth_bound)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", KIB**3), ("MiB", KIB**2), ("KiB", KIB)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    parser.add_argument("--algorithm", default="ring", help="ring, mesh, rdh, kangaring, auto")
    args = parser.parse_args()
    config = load_config(args.config)
    costs = CollectiveCosts(config)
    began = time.perf_counter()
    print(f"all-reduce on {config.chip.name}, bf16, one rank = a logical core of "
          f"{config.chip.cores_per_logical_core} physical cores; times in µs")  # fmt: skip
    print(f"{'ranks':>5} {'size':>8} {'ring':>11} {'auto':>11} {'(picks)':>10} "
          f"{'lat-bound':>10} {'bw-bound':>11} {'ring/formula':>12}")  # fmt: skip
    for ranks in args.ranks:
        for nbytes in SIZES:
            ring_ns, _ = simulate_ns(config, ranks, nbytes, args.algorithm)
            auto_ns, picked = simulate_ns(config, ranks, nbytes, "auto")
            lat, bw = ring_ends_ns(costs, config, ranks, nbytes)
            ratio = ring_ns / max(lat, bw)
            print(f"{ranks:>5} {_size(nbytes):>8} {ring_ns / 1e3:>11.2f} {auto_ns / 1e3:>11.2f} "
                  f"{picked:>10} {lat / 1e3:>10.2f} {bw / 1e3:>11.2f} {ratio:>12.2f}")  # fmt: skip
    print("\npublished (compare only, never fitted):")
    for name, ranks, nbytes, published_ns in PUBLISHED:
        simulated, picked = simulate_ns(config, ranks, nbytes, "auto")
        print(f"  {name}: all-reduce {_size(nbytes)} on {ranks} ranks: published "
              f"{published_ns / 1e3:.0f} µs, simulated {simulated / 1e3:.1f} µs ({picked}) "
              f"on {config.chip.name}")  # fmt: skip
    hop = config.topology
    print(f"  per-hop latency [S32]: intra-instance about 1-2 us (config: intra-chip "
          f"{hop.intra_chip.hop_latency_ns / 1e3:g} µs, chip-to-chip "
          f"{hop.chip_to_chip.hop_latency_ns / 1e3:g} µs); inter-instance ~15 µs (config "
          f"{hop.instance_to_instance.hop_latency_ns / 1e3:g} µs)")  # fmt: skip
    print(f"\nwall time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()

"""LNC=2: an NKI kernel split over rows, and the bridge's graphs, on one core and on the pair.

    .venv/bin/python bench/lnc.py [--config trn2] [--rows 4096] [--cols 2048] [--passes 8]
                                  [--matmul 2048] [--layers 2] [--seq 512] [--no-bridge]

The kernel splits its rows between ``nl.program_id(0)`` instances; launched as ``kernel[nl.nc(2)]``
the two instances run in parallel on the two physical cores of the logical NeuronCore, launched
plainly the one instance does every row on one core. Each row tile is loaded, put through
``passes`` ScalarE activations and stored, so the work splits evenly. Target: the pair runs close
to 2x faster (printed; fixed latencies and the HBM stack the pair shares keep it below 2x).

A second kernel moves a [128, cols] fp32 tile between the pair with ``nisa.sendrecv`` and prints
the exchange's cost as the timeline shows it: the transfer pieces on each core's DMA queues and
the span from the later core reaching the exchange to both exchanges completing.

The bridge (``bridge.lnc``): a large linear layer (x[M, K] @ W[K, N] + b, then gelu; the
compiler's default auto-cast multiplies in bf16) lowered with the option ``lnc=1`` and ``lnc=2``,
and a GPT-2 model (``--layers`` blocks of GPT-2 small, ``--seq`` tokens) through
``torch.compile(backend="hwsim")`` both ways: simulated time, speed-up, and which ops split.
The model is also compiled with ``lnc`` left to the bridge, which keeps each graph's faster
lowering: target, no slower than the faster of the two. Outputs must be equal bit for bit. The
pair's speed-up has no target: it says how far below 2x the pair stays (both cores stream the
operands they share from one HBM stack, the pair meets at a barrier between ops that read each
other's halves, small ops run on one core).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl

TARGET_SPEEDUP = 1.8  # "close to 2x" for an evenly split kernel


def tanh_rows(passes: int):  # type: ignore[no-untyped-def]
    @nki.jit
    def kernel(x):  # type: ignore[no-untyped-def]
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        cores = nl.num_programs(0)
        me = nl.program_id(0)
        per = x.shape[0] // 128 // cores
        for t in nl.affine_range(per):
            rows = slice((me * per + t) * 128, (me * per + t + 1) * 128)
            y = nl.load(x[rows, :])
            for _ in range(passes):
                y = nl.tanh(y)
            nl.store(out[rows, :], value=y)
        return out

    return kernel


@nki.jit
def swap_halves(x):  # type: ignore[no-untyped-def]
    """Core k loads rows k of x and sends them to the other core, which stores them."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    me = nl.program_id(0)
    mine = nl.load(x[me * 128 : (me + 1) * 128, :])
    got = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - me, recv_from_rank=1 - me, pipe_id=0)
    nl.store(out[me * 128 : (me + 1) * 128, :], value=got)
    return out


def speedup(config: str, rows: int, cols: int, passes: int) -> tuple[float, float, float, bool]:
    """(one core's ns, the pair's ns, one core's ns on half the rows, outputs equal)."""
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    kernel = tanh_rows(passes)
    one = nki.run(kernel, x, config=config)
    two = nki.run(kernel[nl.nc(2)], x, config=config)
    half = nki.run(kernel, x[: rows // 2], config=config, numerics=False)
    equal = bool(np.array_equal(one.result(), two.result()))
    return one.latency_ns, two.latency_ns, half.latency_ns, equal


def exchange(config: str, cols: int) -> dict[str, float]:
    """The sendrecv's timeline: when each core reached it, its pieces, both completions."""
    x = np.random.default_rng(1).standard_normal((256, cols)).astype(np.float32)
    result = nki.run(swap_halves[nl.nc(2)], x, config=config)
    np.testing.assert_array_equal(result.result()[:128], x[128:])
    np.testing.assert_array_equal(result.result()[128:], x[:128])
    trace = result.trace
    ns = 1000 / trace.base_mhz
    sends = [r for r in trace.instructions if r.instruction.OPCODE == "sendrecv"]
    ends = {(s.core, s.engine, s.pc) for s in sends}
    pieces = [p for p in trace.dma if (p.core, p.trigger_engine, p.trigger_pc) in ends]
    reached = max(s.start_tick for s in sends)
    done = max(p.end_tick for p in pieces)
    return {
        "bytes": float(sum(p.transfer_bytes for p in pieces)),
        "pieces": float(len(pieces)),
        "cores": float(len({p.core for p in pieces})),
        "reached_to_done_ns": (done - reached) * ns,
        "total_ns": result.latency_ns,
    }


def bridge_matmul(config: str, size: int) -> dict[str, object]:
    """A [size, size] @ [size, size] linear + gelu graph at lnc=1 and lnc=2."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from hwsim.bridge.context import TilingOptions
    from hwsim.bridge.graph_lowering import lower_graph

    def linear_gelu(x, w, b):  # type: ignore[no-untyped-def]
        return torch.nn.functional.gelu(torch.addmm(b, x, w))

    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(size, size, generator=gen) for _ in range(2)]
    inputs.append(torch.randn(size, generator=gen))
    graph = make_fx(linear_gelu)(*inputs)
    runs, plans = {}, {}
    for lnc in (1, 2):
        lowered = lower_graph(graph, inputs, config=config, options=TilingOptions(lnc=lnc))
        runs[lnc] = lowered.run(inputs)
        plans[lnc] = lowered.pipeline["lnc"]
    one, two = (runs[k].result.summary.total_ns for k in (1, 2))
    return {
        "one_ns": one,
        "two_ns": two,
        "equal": bool(torch.equal(runs[1].outputs, runs[2].outputs)),
        "plan": plans[2],
    }


def bridge_model(config: str, layers: int, seq: int) -> dict[str, object]:
    """GPT-2 small's first ``layers`` blocks, ``seq`` tokens, compiled with lnc=1, lnc=2 and the
    option left at None (each graph on the pair or on one core, whichever simulates faster)."""
    import torch
    import transformers

    import hwsim.bridge as bridge

    cfg = transformers.GPT2Config(n_layer=layers, use_cache=False)
    torch.manual_seed(0)
    model = transformers.GPT2Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    times, outputs = {}, {}
    for lnc in (1, 2, None):
        options = {"config": config, "fallback": "error", "check": False, "lnc": lnc}
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="hwsim", options=options)
        with torch.no_grad():
            outputs[lnc] = compiled(input_ids=ids).last_hidden_state
        runs = bridge.last_report().runs
        times[lnc] = sum(run["total_ns"] for run in runs)
    return {
        "one_ns": times[1],
        "two_ns": times[2],
        "chosen_ns": times[None],
        "equal": all(torch.equal(outputs[1], outputs[k]) for k in (2, None)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=2048)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--matmul", type=int, default=2048, help="the bridge's linear layer size")
    parser.add_argument("--layers", type=int, default=2, help="GPT-2 small blocks")
    parser.add_argument("--seq", type=int, default=512, help="GPT-2 tokens")
    parser.add_argument("--no-bridge", action="store_true", help="the NKI kernels only")
    args = parser.parse_args()
    began = time.perf_counter()
    one, two, half, equal = speedup(args.config, args.rows, args.cols, args.passes)
    ratio = one / two
    verdict = "PASS" if ratio >= TARGET_SPEEDUP and equal else "FAIL"
    print(f"tanh x{args.passes} over [{args.rows}, {args.cols}] fp32 on {args.config}: one core "
          f"{one / 1e3:.1f} µs, LNC=2 pair {two / 1e3:.1f} µs, speed-up {ratio:.2f}x "
          f"(target >= {TARGET_SPEEDUP}x, outputs equal: {equal}) {verdict}")  # fmt: skip
    print(f"  half the rows on one core: {half / 1e3:.1f} µs (the pair's two halves run at once, "
          "so the pair takes about this; one core's time is not linear in rows)")  # fmt: skip
    swap = exchange(args.config, args.cols)
    print(f"sendrecv of a [128, {args.cols}] fp32 tile each way: {swap['bytes']:.0f} B in "
          f"{swap['pieces']:.0f} DMA pieces on {swap['cores']:.0f} cores, "
          f"{swap['reached_to_done_ns']:.0f} ns from both cores reaching it to both transfers "
          f"done (kernel {swap['total_ns'] / 1e3:.1f} µs)")  # fmt: skip
    if not args.no_bridge:
        mm = bridge_matmul(args.config, args.matmul)
        plan = mm["plan"]
        assert isinstance(plan, dict)
        print(f"bridge: gelu(x @ W + b), [{args.matmul}]^3 fp32 (bf16 matmul) on {args.config}: "
              f"lnc=1 {float(mm['one_ns']) / 1e3:.1f} µs, lnc=2 {float(mm['two_ns']) / 1e3:.1f} "
              f"µs, speed-up {float(mm['one_ns']) / float(mm['two_ns']):.2f}x (outputs equal: "
              f"{mm['equal']}; split: {', '.join(plan['split'])}; barriers "
              f"{plan['barriers']})")  # fmt: skip
        gpt = bridge_model(args.config, args.layers, args.seq)
        print(f"bridge: GPT-2 small, {args.layers} blocks, {args.seq} tokens, torch.compile on "
              f"{args.config}: lnc=1 {float(gpt['one_ns']) / 1e3:.1f} µs, lnc=2 "
              f"{float(gpt['two_ns']) / 1e3:.1f} µs, speed-up "
              f"{float(gpt['one_ns']) / float(gpt['two_ns']):.2f}x (outputs equal: "
              f"{gpt['equal']})")  # fmt: skip
        best = min(float(gpt["one_ns"]), float(gpt["two_ns"]))
        chosen = float(gpt["chosen_ns"])
        verdict = "PASS" if chosen <= best else "FAIL"
        print(f"  lnc left to the bridge (each graph the faster of its two lowerings): "
              f"{chosen / 1e3:.1f} µs (target <= the faster of the two, {best / 1e3:.1f} µs) "
              f"{verdict}")  # fmt: skip
    print(f"wall time {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()

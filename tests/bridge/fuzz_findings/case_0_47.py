"""A graph hwsim fuzz found failing (graph case 47 of seed 0), shrunk; run it: python THIS_FILE.

The module below is the case; the checks (hwsim.bridge.fuzz_graphs.check_case) compile the same
graph from SPEC with torch.compile(backend="hwsim") on trn2 and compare it with eager
PyTorch, across two calls, against its roofline floor and with each graph pass off; it prints
what fails and exits 1 while anything does.
"""
# Failures when it was found:
#   passes: graph0 pass residency: 65,172.7 ns with it, 64,600.2 ns without
#   passes: graph0 pass all (all): 65,172.7 ns with it, 64,600.2 ns without

import torch

SPEC = {
    "dtype": "float32",
    "train": False,
    "inputs": [[32, 16, 64], [64]],
    "ops": [["sub", 0, 1], ["softmax", 1], ["stride", 2]],
    "outputs": [3, 4],
}
CONFIG = "trn2"


class Case(torch.nn.Module):
    def forward(self, v0, v1):
        v2 = v0 - v1
        v3 = torch.softmax(v1, dim=-1)
        v4 = v2[..., ::2]
        return (
            v3,
            v4,
        )


if __name__ == "__main__":
    import sys

    from hwsim.bridge.fuzz_graphs import check_case, inputs_of

    compiled = torch.compile(Case(), backend="hwsim", options={"config": CONFIG})
    print([tuple(o.shape) for o in compiled(*inputs_of(SPEC))])
    failures = check_case(SPEC, CONFIG)
    for failure in failures:
        print(f"FAIL {failure.check}: {failure.message}")
    print("no check fails" if not failures else f"{len(failures)} check(s) fail")
    sys.exit(1 if failures else 0)

"""``hwsim.nki``: run NKI kernels (nki.language / nki.isa) on the simulator, with timing.

    import hwsim.nki as nki
    import hwsim.nki.language as nl
    import hwsim.nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a) + nl.load(b))
        return out

    nki.simulate(add)(x, y)                      # numpy outputs, like AWS's nki.simulate
    hwsim.nki.run(add, x, y, config="trn2")      # .outputs, .latency_ns, .summary, .write(DIR)

``hwsim.nki.install()`` makes ``import nki`` / ``neuronxcc.nki`` resolve here for unmodified
files; ``hwsim nki FILE.py:KERNEL`` runs one from the command line. docs/nki.md.
"""

from hwsim.nki import collectives, compiler, isa, language, typing
from hwsim.nki.install import install, uninstall
from hwsim.nki.kernel import (
    NkiKernel,
    NkiRun,
    baremetal,
    benchmark,
    jit,
    last_run,
    per_rank,
    profile,
    run,
    simulate,
    simulate_kernel,
)
from hwsim.nki.tensor import NkiTensor

tensor = NkiTensor

__all__ = [
    "NkiKernel",
    "NkiRun",
    "NkiTensor",
    "baremetal",
    "benchmark",
    "collectives",
    "compiler",
    "install",
    "isa",
    "jit",
    "language",
    "last_run",
    "per_rank",
    "profile",
    "run",
    "simulate",
    "simulate_kernel",
    "tensor",
    "typing",
    "uninstall",
]

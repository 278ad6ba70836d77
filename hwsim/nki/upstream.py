"""Upstream NKI source files, run verbatim: the vendored nki-samples and Neuron SDK sample code
(``third_party/``, byte-exact, MIT-0) and a local mirror of sources that may not be copied.

``load(path)`` imports one file as it is, with ``import nki`` / ``neuronxcc.nki`` resolving to
``hwsim.nki`` (``hwsim.nki.install``); ``kernel(path, name)`` gives one of its ``@nki.jit``
kernels; ``run_tutorial_matmul`` runs the matrix multiplication tutorial's kernels (the V1 ...
V1c calibration kernels, HARDWARE.md §5) verbatim for a config, shapes only, for timing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hwsim.errors import HwsimError
from hwsim.workloads.pyfile import import_python_file, lookup_attribute

#: The checkout's vendored sources (not installed with the package: a checkout has them).
THIRD_PARTY = Path(__file__).resolve().parents[2] / "third_party"
NKI_SAMPLES = THIRD_PARTY / "nki-samples"
SDK_SAMPLES = THIRD_PARTY / "aws-neuron-sdk"
#: Where sources without a licence to copy them are read from, when a mirror is present: a
#: folder of ``owner+name/repo`` bare git directories, ``.mirror`` beside the checkout unless
#: ``HWSIM_NKI_MIRROR`` names another.
MIRROR = Path(os.environ.get("HWSIM_NKI_MIRROR", THIRD_PARTY.parent.parent / ".mirror"))

#: The matrix multiplication tutorial as trn1's tutorial publishes it (the calibration set's
#: V1, V1a-V1c are measured on it), and as the SDK documentation has it now (newer API).
MATMUL_TRN1 = (
    "nki-samples/at-fc5c69f/src/nki_samples/tutorials/matrix_multiplication/"
    "matrix_multiplication_nki_kernels.py"
)
MATMUL_SDK = (
    "aws-neuron-sdk/nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py"
)
#: Calibration case -> the tutorial kernel it is measured on.
TUTORIAL_KERNELS = {
    "V1a": "nki_matmul_tiled_",
    "V1b": "nki_matmul_hoist_load_",
    "V1c": "nki_matmul_block_free_dimension_",
    "V1": "nki_matmul_fully_optimized_",
}


def source(relpath: str) -> Path:
    """A vendored file by its path under ``third_party/``."""
    path = THIRD_PARTY / relpath
    if not path.is_file():
        raise HwsimError(f"{path}: no such vendored file (third_party/*/SOURCE.md lists them)")
    return path


def load(path: str | Path, search: tuple[Path, ...] = ()) -> ModuleType:
    """Import the file at ``path`` as it is (once per process), with the NKI imports resolving
    to hwsim.nki and ``search`` (plus the file's folder and nki-samples' ``src``) importable."""
    path = Path(path)
    if not path.is_absolute():
        path = source(str(path))
    import hwsim.nki

    hwsim.nki.install()
    for folder in (path.parent, NKI_SAMPLES / "src", *search):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    package_root = NKI_SAMPLES / "src"
    if package_root in path.parents:  # a module of the nki_samples package: its own name, so
        dotted = ".".join(path.relative_to(package_root).with_suffix("").parts)
        return importlib.import_module(dotted)  # its relative imports resolve
    return import_python_file(path, "hwsim_upstream", str(path), wrap_errors=False)


def kernel(path: str | Path, name: str) -> Any:
    """One kernel (or kernel-calling function) of an upstream file."""
    path = Path(path)
    return lookup_attribute(load(path), name, path, str(path))


def run_tutorial_matmul(
    case: str,
    config: str = "trn1",
    shape: tuple[int, int, int] = (8192, 4096, 8192),
    dtype: str = "bf16",
    path: str = MATMUL_TRN1,
    **kernel_kwargs: Any,
) -> Any:
    """Run the matmul tutorial's kernel of a calibration ``case`` (V1, V1a, V1b, V1c) verbatim
    through hwsim.nki on ``config``: lhsT [K, M] and rhs [K, N] of ``shape`` = (K, M, N), shapes
    only (timing; no numerics). Returns the ``hwsim.nki.NkiRun``."""
    from hwsim.lang.kernel import TensorSpec
    from hwsim.nki.kernel import run

    if case not in TUTORIAL_KERNELS:
        raise HwsimError(f"calibration case {case!r}; valid: {', '.join(TUTORIAL_KERNELS)}")
    k, m, n = shape
    lhsT, rhs = TensorSpec((k, m), dtype), TensorSpec((k, n), dtype)
    fn = kernel(path, TUTORIAL_KERNELS[case])
    return run(fn, lhsT, rhs, config=config, numerics=False, **kernel_kwargs)

"""hwsim: a cycle-level simulator of AWS Trainium NeuronCores.

The simulator core never imports torch or the bridge; numerics live in ``kernels``.
"""

import os

# The numerics multiply many small tiles (<= 128 x 512); multi-threaded BLAS makes those slower and
# erratic under load (measured 5-60x), so use one BLAS thread unless the user chose otherwise.
# This must happen before numpy loads its BLAS, i.e. before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _writable(folder: str) -> bool:
    """Whether files can be made in ``folder``, or in its nearest existing parent."""
    while not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent
    return os.access(folder, os.W_OK | os.X_OK)


def _numba_cache_somewhere() -> None:
    """Numba caches compiled kernels beside their source, else in the user's cache folder, and
    fails at import (a traceback) when it can write neither: hwsim installed on a read-only
    filesystem with a read-only home. Then the cache goes to a folder of the temporary
    directory instead. Must run before numba is imported."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if _writable(os.path.join(here, "__pycache__")) or _writable(os.path.join(home, "numba")):
        return
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else 0
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"hwsim-numba-{uid}")


_numba_cache_somewhere()

__version__ = "0.1.0"

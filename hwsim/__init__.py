"""hwsim: a cycle-level simulator of AWS Trainium NeuronCores.

The simulator core never imports torch or the bridge; numerics live in ``kernels``.
"""

import os

# The numerics multiply many small tiles (<= 128 x 512); multi-threaded BLAS makes those slower and
# erratic under load (measured 5-60x), so use one BLAS thread unless the user chose otherwise.
# This must happen before numpy loads its BLAS, i.e. before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

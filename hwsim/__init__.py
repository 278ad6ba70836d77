"""hwsim: a cycle-level simulator of AWS Trainium NeuronCores.

The simulator core never imports torch or the bridge; numerics live in ``kernels``.
"""

__version__ = "0.1.0"

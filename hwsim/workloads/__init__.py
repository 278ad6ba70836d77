"""Workloads: the strings ``hwsim run`` and sweeps take (``resolve``), the ``Workload`` type they
resolve to (``registry``), and the built-in ``gemm:`` workload, Python-file workloads and saved
programs. Import the submodules; this package imports nothing, so no import cycle runs through it.
"""

"""hwsim fuzz: generated kernels (and, through the bridge, PyTorch graphs) checked for numerics,
determinism, races and timing invariants; failures shrunk to a ready-to-run reproduction."""

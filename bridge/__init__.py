"""The PyTorch bridge: lowers PyTorch (Core ATen) ops onto the simulated NeuronCore.

Not implemented yet; see the PyTorch-bridge issue. Imports hwsim, kernels and torch.
"""

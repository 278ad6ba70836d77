"""Simulator tests: a package, so its helpers.py does not clash with tests/kernels/helpers.py."""

"""The ``hwsim`` command line: one module per command group; errors print one line."""

from hwsim.cli.main import main

__all__ = ["main"]

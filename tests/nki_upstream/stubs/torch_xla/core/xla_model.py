"""Stand-in for torch_xla.core.xla_model (stubs/README.md): using it is an error."""


def __getattr__(name: str):
    raise RuntimeError(f"torch_xla.core.xla_model.{name}: no Neuron device here (harness stand-in)")

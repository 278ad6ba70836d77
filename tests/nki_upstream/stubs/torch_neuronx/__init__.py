"""Stand-in for a Neuron host framework the harness does not have (stubs/README.md)."""

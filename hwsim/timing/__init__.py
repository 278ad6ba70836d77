"""Cost models: closed-form per-instruction costs, and the pluggable TensorE timing models."""

"""Cost models: closed-form per-instruction costs, and the pluggable TensorE timing models.

Importing the package registers every TensorE timing model: ``tensor_models`` holds the registry
and ``closed_form``, ``systolic_models`` adds the cycle-level ones (importing ``tensor_models``),
so the two modules do not import each other.
"""

from hwsim.timing import systolic_models as _systolic_models  # noqa: F401  (registers models)

"""hwsim tune: search a kernel's declared space with a maintained optimiser (Optuna), the simulator
as the cost model; results cached by kernel, point and config hash."""

from hwsim.tune.space import SearchSpace, TuneError, space, space_of

__all__ = ["SearchSpace", "TuneError", "space", "space_of"]

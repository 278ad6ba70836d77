"""The ``"hwsim"`` backend's settings and what it reports.

``configure(config="trn2", cores_per_rank=1)`` before ``init_process_group`` chooses the hardware
the ranks' collectives are timed on (rank r's first physical core is ``r * cores_per_rank``);
the environment variables ``HWSIM_DIST_CONFIG`` and ``HWSIM_DIST_CORES_PER_RANK`` do the same
for processes started by torchrun. ``report()`` is the calling rank's timeline summary (it
warns when the rank ran collectives but no compiled graph: a model dynamo skipped).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

from hwsim.config import HardwareConfig, load_config
from hwsim.errors import HwsimError


@dataclass(frozen=True)
class Settings:
    config: HardwareConfig
    cores_per_rank: int


_SETTINGS: dict[str, Any] = {}


def configure(config: str | HardwareConfig = "trn2", cores_per_rank: int = 1) -> None:
    """The hardware every ``"hwsim"`` process group made after this call is timed on."""
    if cores_per_rank < 1:
        raise HwsimError(f"cores_per_rank={cores_per_rank}: a rank is at least one core")
    hw = config if isinstance(config, HardwareConfig) else load_config(str(config))
    _SETTINGS["now"] = Settings(hw, cores_per_rank)


def settings() -> Settings:
    if "now" not in _SETTINGS:
        configure(
            os.environ.get("HWSIM_DIST_CONFIG", "trn2"),
            int(os.environ.get("HWSIM_DIST_CORES_PER_RANK", "1")),
        )
    found: Settings = _SETTINGS["now"]
    return found


def current_clock() -> Any:
    from hwsim.bridge.distributed.clock import current_clock as find

    return find()


def report() -> dict[str, Any]:
    """The calling rank's summary (``RankClock.summary``); raises outside a hwsim group."""
    clock = current_clock()
    if clock is None:
        raise HwsimError("report(): this thread is not a rank of a 'hwsim' process group")
    summary: dict[str, Any] = clock.summary()
    total = summary["total"]
    if total["graphs"] == 0 and total["collectives"] > 0:
        warnings.warn(_NO_GRAPHS, stacklevel=2)
    return summary


_NO_GRAPHS = (
    "hwsim: this rank ran collectives but no compiled graph on its simulated core, so its "
    "compute is not timed. If the model was compiled with backend='hwsim', dynamo handed the "
    "bridge no graph: it skips torch.nn's own modules (nn.Linear, nn.Sequential, ...) "
    "reached through DDP; wrap them in a model class of your own "
    "(torch._dynamo.explain says why a function gives no graph)"
)

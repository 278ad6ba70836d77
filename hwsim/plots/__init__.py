"""Figures of runs (matplotlib, imported lazily): timeline, utilisation, memory, roofline, time
by op, DMA queues."""

from hwsim.plots.perf_plots import plot_dma, plot_ops
from hwsim.plots.run_plots import (
    PLOTS,
    plot,
    plot_memory,
    plot_roofline,
    plot_timeline,
    plot_utilisation,
)

PLOTS.update({"ops": plot_ops, "dma": plot_dma})  # drawn by ``hwsim plot``, not by every run
PLOT_KINDS = tuple(PLOTS)

__all__ = [
    "PLOTS",
    "PLOT_KINDS",
    "plot",
    "plot_dma",
    "plot_memory",
    "plot_ops",
    "plot_roofline",
    "plot_timeline",
    "plot_utilisation",
]

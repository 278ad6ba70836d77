"""Figures of runs (matplotlib, imported lazily): timeline, utilisation, memory, roofline."""

from hwsim.plots.run_plots import (
    PLOTS,
    plot,
    plot_memory,
    plot_roofline,
    plot_timeline,
    plot_utilisation,
)

PLOT_KINDS = tuple(PLOTS)

__all__ = [
    "PLOTS",
    "PLOT_KINDS",
    "plot",
    "plot_memory",
    "plot_roofline",
    "plot_timeline",
    "plot_utilisation",
]

"""Design-space sweeps: a YAML spec of configs x workloads, run in parallel, results in SQLite.

    from hwsim.sweep import load_sweep, run_sweep, load_results

    plan = load_sweep("configs/sweeps/pe_array_sbuf.yaml")   # validates every config first
    run_sweep(plan, "results.sqlite", jobs=2)                # resumes if interrupted
    frame = load_results("results.sqlite")                   # pandas DataFrame (or dicts)

The command line is ``hwsim sweep`` (see ``configs/sweeps/README.md``).
"""

from hwsim.sweep.errors import SpecError, SweepError
from hwsim.sweep.execute import SweepOutcome, run_sweep
from hwsim.sweep.spec import SweepPlan, SweepSpec, load_spec, load_sweep
from hwsim.sweep.store import export_results, load_results
from hwsim.workloads.saved import load_program, save_program

__all__ = [
    "SpecError",
    "SweepError",
    "SweepOutcome",
    "SweepPlan",
    "SweepSpec",
    "export_results",
    "load_program",
    "load_results",
    "load_spec",
    "load_sweep",
    "run_sweep",
    "save_program",
]

"""Built-in workloads: named program builders that the CLI, benchmarks and sweeps run."""

from hwsim.workloads.registry import Workload, list_workloads, resolve_workload

__all__ = ["Workload", "list_workloads", "resolve_workload"]

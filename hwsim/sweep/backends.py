"""Where a sweep's runs execute: joblib with local processes (loky), a Dask cluster, or Ray.

``open_backend`` is a context manager that sets joblib's backend for the sweep and yields how
many workers there are; it starts (and stops) a local Dask cluster or Ray instance unless an
``address`` names an existing one. Dask and Ray are optional extras: asking for one that is not
installed is an error that says what to install.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hwsim.sweep.errors import SweepError

BACKENDS = ("loky", "dask", "ray")
#: Seconds to wait for an existing cluster's scheduler and its first worker.
CONNECT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Backend:
    name: str
    workers: int
    description: str


def default_jobs() -> int:
    """Local workers by default: one per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def capped_jobs(requested: int | None, runs: int, address: str | None) -> tuple[int, str]:
    """(workers to start, why fewer than asked, or ''): ``--jobs`` (default: all cores), never
    more than the runs to do, nor, for workers on this machine (no cluster ``address``), more
    than its cores: 64 workers on 2 cores spend their time starting and importing, not running."""
    cores = default_jobs()
    jobs = requested or cores
    limits = [(max(1, runs), f"{runs} run{'s' if runs != 1 else ''} to do")]
    if address is None:
        limits.append((cores, f"{cores} core{'s' if cores != 1 else ''} here"))
    capped = min(jobs, *(limit for limit, _ in limits))
    if requested is None or capped >= requested:
        return capped, ""
    why = ", ".join(text for limit, text in limits if limit < requested)
    plural = "s" if capped != 1 else ""
    return capped, f"--jobs {requested}: starting {capped} worker{plural} ({why})"


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SweepError(
            f"this needs the '{module}' package: pip install 'hwsim[{extra}]'"
        ) from None


@contextmanager
def open_backend(name: str, jobs: int, address: str | None = None) -> Iterator[Backend]:
    """Configure joblib for ``name`` (loky, dask, ray) with ``jobs`` local workers."""
    joblib = require("joblib", "sweep")
    if name not in BACKENDS:
        raise SweepError(f"unknown backend '{name}'; valid: {', '.join(BACKENDS)}")
    if name == "loky":
        if address:
            raise SweepError("--address names a Dask or Ray cluster; use --backend dask or ray")
        # inner_max_num_threads=1: each worker starts with OMP/BLAS/Numba limited to one thread
        with joblib.parallel_config(backend="loky", n_jobs=jobs, inner_max_num_threads=1):
            where = "this process" if jobs == 1 else f"{jobs} local processes"
            yield Backend("loky", jobs, where)
        return
    if name == "dask":
        with _dask(joblib, jobs, address) as backend:
            yield backend
        return
    with _ray(joblib, jobs, address) as backend:
        yield backend


@contextmanager
def _dask(joblib: Any, jobs: int, address: str | None) -> Iterator[Backend]:
    distributed = require("distributed", "dask")
    cluster = None
    try:
        if address:
            client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S)
        else:
            cluster = distributed.LocalCluster(
                n_workers=jobs,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            client = distributed.Client(cluster)
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        workers = len(client.scheduler_info()["workers"])
        threads = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values())
        where = address or "a local cluster"
        with joblib.parallel_config(backend="dask", n_jobs=-1):
            yield Backend("dask", threads, f"{workers} Dask workers ({threads} threads) on {where}")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@contextmanager
def _ray(joblib: Any, jobs: int, address: str | None) -> Iterator[Backend]:
    ray = require("ray", "ray")
    from ray.util.joblib import register_ray

    register_ray()
    try:
        if address:
            ray.init(address=address, ignore_reinit_error=True)
        else:
            ray.init(num_cpus=jobs, ignore_reinit_error=True, include_dashboard=False)
    except (ConnectionError, RuntimeError) as exc:
        raise SweepError(f"cannot start or reach Ray ({address or 'local'}): {exc}") from exc
    try:
        cpus = int(ray.cluster_resources().get("CPU", jobs))
        with joblib.parallel_config(backend="ray", n_jobs=cpus):
            yield Backend("ray", cpus, f"Ray with {cpus} CPUs on {address or 'this machine'}")
    finally:
        ray.shutdown()

"""The search: Optuna's TPE sampler over a declared space, the simulator as the cost model.

Each candidate is built timing-only and simulated on the config; its total simulated time is
the objective. The first candidate is the kernel's start point (its defaults, or one given), so
the path begins where the author's kernel is. Candidates go out in batches of ``jobs`` on the
sweep backends (local processes, Dask or Ray, ``hwsim.sweep.backends``); a point the sampler
proposes again, or that the cache already holds (same kernel source, inputs and config hash), is
answered without simulating. A point the kernel refuses (it does not fit SBUF, an illegal
instruction) is infeasible: recorded with its reason, and told to the sampler as failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwsim.config import config_hash, load_config
from hwsim.errors import HwsimError
from hwsim.tune.cache import Outcome, TuneCache
from hwsim.tune.space import TuneError, Value, point_key

#: Proposals the sampler may make per candidate budgeted before the search gives up finding
#: new points (TPE repeats points once it has converged).
ASKS_PER_TRIAL = 25


@dataclass(frozen=True)
class Trial:
    """One candidate in the order it was tried; ``best_ns``: the best time so far."""

    index: int
    point: dict[str, Value]
    outcome: Outcome
    cached: bool
    best_ns: float | None


@dataclass
class TuneResult:
    target: str
    config: str
    config_hash: str
    trials: list[Trial] = field(default_factory=list)
    space_size: int = 0
    simulated: int = 0
    wall_s: float = 0.0

    @property
    def start(self) -> Trial:
        return self.trials[0]

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.outcome.ok]
        return min(ok, key=lambda t: (t.outcome.total_ns, t.index)) if ok else None

    def path(self) -> list[Trial]:
        """The start, then every candidate that beat all before it."""
        steps, best = [], None
        for trial in self.trials:
            ns = trial.outcome.total_ns if trial.outcome.ok else None
            if trial.index == 0 or (ns is not None and (best is None or ns < best)):
                steps.append(trial)
            if ns is not None and (best is None or ns < best):
                best = ns
        return steps

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {
            "target": self.target,
            "config": self.config,
            "config_hash": self.config_hash,
            "space_size": self.space_size,
            "candidates": len(self.trials),
            "simulated": self.simulated,
            "wall_s": round(self.wall_s, 2),
            "start": _trial_dict(self.start) if self.trials else None,
            "best": _trial_dict(best) if best else None,
            "path": [_trial_dict(t) for t in self.path()],
            "trials": [_trial_dict(t) for t in self.trials],
        }


def _trial_dict(trial: Trial) -> dict[str, Any]:
    o = trial.outcome
    return {
        "index": trial.index,
        "point": trial.point,
        "status": o.status,
        "total_ns": o.total_ns,
        "bottleneck": o.bottleneck,
        "error": o.error,
        "cached": trial.cached,
        "best_ns": trial.best_ns,
    }


def evaluate(target: Any, point: dict[str, Value], config_name: Any, overrides: list[str]):
    """Build and simulate one candidate (timing only); runs in a worker process."""
    from hwsim.kernels import warm_up
    from hwsim.machine.simulator import run

    config = _config(config_name, overrides)
    warm_up()
    start = time.perf_counter()
    try:
        program = target.build(point, config)
        summary = run(program, config, numerics=False).summary
    except HwsimError as exc:
        return Outcome("infeasible", error=str(exc)[:500], wall_s=time.perf_counter() - start)
    return Outcome(
        "ok",
        float(summary.total_ns),
        summary.bottleneck,
        wall_s=round(time.perf_counter() - start, 3),
        instructions=program.instruction_count,
    )


def tune(
    target: Any,
    config_name: Any = "trn2",
    overrides: list[str] | None = None,
    *,
    trials: int = 30,
    jobs: int = 1,
    backend: str = "loky",
    address: str | None = None,
    seed: int = 0,
    cache: TuneCache | None = None,
    start: dict[str, Value] | None = None,
    on_trial: Callable[[Trial], None] | None = None,
) -> TuneResult:
    """Search ``target``'s space for the lowest simulated time (see the module docstring).

    ``target``: a ``Target``, or anything with ``ref``, ``space``, ``identity``, ``defaults()``
    and ``build(point, config) -> Program`` (the bridge's graphs are tuned so)."""
    if trials < 1:
        raise TuneError("trials must be at least 1")
    overrides = list(overrides or [])
    search = _Search(target, _config(config_name, overrides), trials, seed, cache, on_trial)
    search.result.config = config_name if isinstance(config_name, str) else search.result.config
    search.study.enqueue_trial(_start_point(target, target.space, start, search.config))
    clock = time.perf_counter()
    from hwsim.sweep.backends import open_backend

    with open_backend(backend, jobs, address) as opened:
        while search.going():
            batch = search.propose(opened.workers)
            outcomes = _run_batch(target, [p for _, p, _ in batch], config_name, overrides)
            search.finish(batch, outcomes)
            if not batch and search.asks >= search.max_asks:
                break
    search.result.wall_s = time.perf_counter() - clock
    return search.result


class _Search:
    """The state of one search: the Optuna study, what each point gave, the budget."""

    def __init__(
        self,
        target: Any,
        config: Any,
        trials: int,
        seed: int,
        cache: TuneCache | None,
        on_trial: Callable[[Trial], None] | None,
    ) -> None:
        self.optuna = _optuna()
        self.target, self.config, self.on_trial = target, config, on_trial
        self.space = target.space
        self.cache = cache or TuneCache(None)
        self.chash = config_hash(config)
        self.result = TuneResult(
            target.ref, config.chip.name, self.chash, space_size=self.space.size(config)
        )
        self.distributions = {
            name: self.optuna.distributions.CategoricalDistribution(list(values))
            for name, values in self.space.params.items()
        }
        sampler = self.optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
        self.study = self.optuna.create_study(direction="minimize", sampler=sampler)
        self.told: dict[str, Outcome] = {}
        #: The budget counts candidates the kernel accepted; refusals cost no simulation.
        self.feasible = 0
        self.budget = min(trials, self.result.space_size)
        self.asks = 0
        self.max_asks = self.budget * ASKS_PER_TRIAL

    def going(self) -> bool:
        return (
            self.feasible < self.budget
            and len(self.told) < self.result.space_size
            and self.asks < self.max_asks
        )

    def propose(self, workers: int) -> list[tuple[Any, dict[str, Value], str]]:
        """Up to ``workers`` new points to simulate; refused, repeated and cached points are
        answered on the way without simulating."""
        batch: list[tuple[Any, dict[str, Value], str]] = []
        failed = self.optuna.trial.TrialState.FAIL
        while len(batch) < workers and self.feasible + len(batch) < self.budget:
            self.asks += 1
            if self.asks > self.max_asks:
                break
            trial = self.study.ask(self.distributions)
            point = dict(trial.params)
            key = point_key(point)
            if not self.space.admits(point, self.config):
                self.study.tell(trial, state=failed)
            elif key in self.told or any(key == k for _, _, k in batch):
                known = self.told.get(key)
                if known is not None and known.ok:
                    self.study.tell(trial, known.total_ns)
                else:
                    self.study.tell(trial, state=failed)
            else:
                cached = self.cache.get(self.target.identity, key, self.chash)
                if cached is None:
                    batch.append((trial, point, key))
                    continue
                self._record(key, point, cached, True)
                _tell(self.study, trial, cached, self.optuna)
        return batch

    def finish(
        self, batch: list[tuple[Any, dict[str, Value], str]], outcomes: list[Outcome]
    ) -> None:
        """Store and record a simulated batch, then tell the sampler (after all are recorded,
        so the trial order is the batch's)."""
        self.result.simulated += len(batch)
        for (_, point, key), outcome in zip(batch, outcomes, strict=True):
            self.cache.put(self.target.identity, key, self.chash, outcome)
            self._record(key, point, outcome, False)
        for (trial, _, _), outcome in zip(batch, outcomes, strict=True):
            _tell(self.study, trial, outcome, self.optuna)

    def _record(self, key: str, point: dict[str, Value], outcome: Outcome, cached: bool) -> None:
        self.told[key] = outcome
        self.feasible += outcome.ok
        trials = self.result.trials
        ok_ns = [t.outcome.total_ns for t in trials if t.outcome.ok and t.outcome.total_ns]
        if outcome.ok and outcome.total_ns is not None:
            ok_ns.append(outcome.total_ns)
        trial = Trial(len(trials), point, outcome, cached, min(ok_ns, default=None))
        trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(trial)


def _config(config: Any, overrides: list[str]) -> Any:
    """A preset name or path (with overrides), or a HardwareConfig as it is."""
    if isinstance(config, str):
        return load_config(config, overrides)
    if overrides:
        from hwsim.advise.advice import what_if_config
        from hwsim.config.loader import parse_override

        return what_if_config(config, dict(map(parse_override, overrides)))
    return config


def _tell(study: Any, trial: Any, outcome: Outcome, optuna: Any) -> None:
    if outcome.ok:
        study.tell(trial, outcome.total_ns)
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


def _run_batch(
    target: Any, points: list[dict[str, Value]], config_name: Any, overrides: list[str]
) -> list[Outcome]:
    if len(points) <= 1:
        return [evaluate(target, p, config_name, overrides) for p in points]
    import joblib

    jobs = joblib.Parallel()(
        joblib.delayed(evaluate)(target, p, config_name, overrides) for p in points
    )
    return list(jobs)


def _start_point(
    target: Any, space: Any, start: dict[str, Value] | None, config: Any
) -> dict[str, Value]:
    """The given start point completed with the target's defaults (each must be in the space)."""
    defaults = target.defaults()
    point: dict[str, Value] = {}
    for name, values in space.params.items():
        if start and name in start:
            point[name] = start[name]
        else:
            point[name] = defaults.get(name, values[0])
    if not space.admits(point, config):
        raise TuneError(
            f"{target.ref}: the start point {point_key(point)} is not in the declared space "
            "(add the kernel's defaults to it, or pass --start)"
        )
    return point


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise TuneError("hwsim tune needs Optuna: pip install 'hwsim[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna

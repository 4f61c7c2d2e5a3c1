"""What a sweep runs, checked before any trial starts: a grid of RunSpecs, or Optuna samples of a search
space on top of a task's base run, with the metric to optimise and an optional scheduler.

Planning imports neither Ray Tune, Optuna nor MLflow, so that `fedbench sweep --dry-run` answers at once."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedbench.config.parse import parse_run
from fedbench.config.task import TaskSpec, initials
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.runspec import RunSpec
from fedbench.tuning.resources import for_trial
from fedbench.tuning.search_space import ALGORITHM, SearchSpace, apply, load_search_space

SCHEDULERS = ("asha",)

EVERY_ROUND = (
    M.TRAIN_LOSS_MEAN,
    M.ACC_LOCAL_MEAN,
    M.ACC_LOCAL_STD,
    M.ACC_LOCAL_MIN,
    M.ACC_LOCAL_WEIGHTED,
    M.ACC_LOCAL_PI_WEIGHTED,
)
"""Metrics a trial reports every round (with `eval_every: 1`): the only ones a scheduler can compare early."""


def known_metrics() -> list[str]:
    """Names `--metric` accepts: every last-value metric, bare or as `final.<key>`."""
    return [*M.LAST, *(M.FINAL_PREFIX + key for key in M.LAST)]


SEED = "seed"
"""A search trial's config holds its seed under this key, beside the sampled fields."""

GRID_KEY = "run"
"""A grid trial's config holds its whole RunSpec (as a dict) under this one key."""


@dataclass(frozen=True)
class TrialSpecs:
    """A trial's config -> its RunSpec, as the trial runs it. Picklable: Tune ships it to every trial.

    The one place that tells the two kinds of trial apart: a grid's (no `base`) config carries the whole
    RunSpec under `GRID_KEY`; a search's config carries the sampled fields, applied on top of `base`.
    """

    base: dict[str, Any] | None = None
    references: tuple[str, ...] = ()
    """A search's reference algorithms (`SearchSpace.references`): their trials are not samples."""

    def __call__(self, config: dict[str, Any]) -> RunSpec:
        if self.base is None:
            return for_trial(parse_run(config[GRID_KEY]))
        spec = for_trial(apply(self.base, config))
        return spec if spec.run_name else spec.replace(run_name=sample_name(spec, self.sampled(config)))

    def sampled(self, config: dict[str, Any]) -> dict[str, Any]:
        """The fields a search sampled for this trial (its seed is the task's, not sampled); none for a grid point
        or a reference."""
        if self.base is None or self.is_reference(config):
            return {}
        return {path: value for path, value in config.items() if path != SEED}

    def is_reference(self, config: dict[str, Any]) -> bool:
        """Whether the trial runs one of the search's references, not a sample."""
        return self.base is not None and config.get(f"{ALGORITHM}.name") in self.references

    def trial_key(self, config: dict[str, Any], trial_id: str) -> str:
        """What `--resume` counts a trial as done by: its run hash, the same in every attempt."""
        return self(config).run_hash


def sample_name(spec: RunSpec, sampled: dict[str, Any]) -> str:
    """A search trial's name from what it sampled, numbers to 3 significant digits (`fedprox-mu0.0123-s0`), as a
    grid point is named by its axes; a reference is its algorithm and seed (`fedavg-s0`). The run hash, not the
    name, tells two trials apart."""
    parts = [spec.algorithm.name]
    for path, value in sampled.items():
        if path != f"{ALGORITHM}.name":
            field = path.rsplit(".", 1)[-1]
            key = initials(path) if "_" in field else field  # lr, mu, tau; wr for warmup_rounds
            parts.append(f"{key}{f'{value:.3g}' if isinstance(value, float) else value}")
    return "-".join([*parts, f"s{spec.seed}"])


@dataclass(frozen=True)
class SweepPlan:
    """A grid (`specs`) or a search (`space` sampled `num_samples` times on `base`), for task `task`."""

    task: str
    specs: tuple[RunSpec, ...] = ()
    space: SearchSpace | None = None
    base: dict[str, Any] | None = None
    num_samples: int = 0
    metric: str | None = None
    mode: str = "max"
    scheduler: str | None = None
    seeds: tuple[int, ...] = (0,)
    """A search's seeds: every sampled configuration runs on each, and its score is their mean."""

    @property
    def trials(self) -> int:
        """A grid's trials; a search's at most (each sample and reference on every seed; samples answered from the
        store run none)."""
        if not self.space:
            return len(self.specs)
        return (self.num_samples + len(self.space.references)) * len(self.seeds)

    @property
    def name(self) -> str:
        """Stable for the same task and configurations, so `--resume` finds the interrupted sweep."""
        if self.space:
            key = json.dumps(
                [self.base, repr(self.space), self.num_samples, self.metric, self.mode, self.scheduler, self.seeds],
                sort_keys=True,
                default=str,
            )
        else:
            key = ",".join(sorted(s.run_hash for s in self.specs)) + f"|{self.metric}|{self.mode}|{self.scheduler}"
        return f"{self.task}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"

    @property
    def spec_of(self) -> TrialSpecs:
        return TrialSpecs(self.base, self.space.references if self.space else ())

    def max_rounds(self) -> int:
        """The longest trial's rounds (a scheduler's time budget)."""
        if self.specs:
            return max(s.rounds for s in self.specs)
        assert self.base is not None, "a search plan has its base run"
        return apply(self.base, {}).rounds


def make_plan(
    task: TaskSpec,
    space: SearchSpace | None = None,
    num_samples: int | None = None,
    metric: str | None = None,
    mode: str = "max",
    scheduler: str | None = None,
) -> SweepPlan:
    """The sweep to run, with every problem reported now: unknown metric or scheduler, a search space field
    that does not exist or a value it cannot take, a metric no trial would report."""
    metric = M.canonical(metric) if metric else metric
    if mode not in ("max", "min"):
        raise ConfigError("--mode", mode, "max or min")
    if scheduler is not None and scheduler not in SCHEDULERS:
        raise ConfigError("--scheduler", scheduler, " or ".join(SCHEDULERS))
    if (space or scheduler) and metric is None:
        raise ConfigError(
            "--metric", None, f"a metric to {'search' if space else 'schedule'} on, one of {', '.join(known_metrics())}"
        )
    if metric is not None and metric not in known_metrics():
        raise ConfigError("--metric", metric, ", ".join(known_metrics()))
    bare = metric.removeprefix(M.FINAL_PREFIX) if metric else None
    if scheduler and bare not in EVERY_ROUND:
        raise ConfigError(
            "--metric", metric, f"a metric reported every round for --scheduler {scheduler}: {', '.join(EVERY_ROUND)}"
        )
    if space is None:
        if num_samples is not None:
            raise ConfigError("--num-samples", num_samples, "only with --search SPACE.yaml")
        plan = SweepPlan(task.name, tuple(task.expand()), metric=metric, mode=mode, scheduler=scheduler)
        runs = plan.specs
    else:
        if num_samples is None or num_samples < 1:
            raise ConfigError("--num-samples", num_samples, "an integer >= 1 with --search")
        base = task.run_dict()
        space = space.resolved(base)
        space.check(base)
        seeds = (base["seed"],) if task.seed_overridden else task.seeds
        plan = SweepPlan(
            task.name,
            space=space,
            base=base,
            num_samples=num_samples,
            metric=metric,
            mode=mode,
            scheduler=scheduler,
            seeds=tuple(seeds),
        )
        runs = (apply(base, {}),)
    if any(run.log_models for run in runs):
        raise ConfigError(
            "log_models",
            True,
            "false in a sweep (its trials report numbers to the sweep, not models); `fedbench run` logs them",
        )
    if bare in M.TEST_TIME and all(run.scenario.test_clients.mode == "none" for run in runs):
        raise ConfigError(
            "--metric",
            metric,
            "a metric these runs report: their scenarios have no test-time clients (scenario.test_clients.mode: none)",
        )
    return plan


def plan_sweep(
    task: TaskSpec,
    search: str | Path | SearchSpace | None = None,
    num_samples: int | None = None,
    metric: str | None = None,
    mode: str = "max",
    scheduler: str | None = None,
) -> SweepPlan:
    """The sweep of `task`: its grid, or `num_samples` Optuna samples of `search` (a space or its YAML file);
    every problem is reported now (see `make_plan`)."""
    space = load_search_space(search) if isinstance(search, (str, os.PathLike)) else search
    return make_plan(task, space, num_samples, metric, mode, scheduler)


def check_skip_finished(skip_finished: bool, search: bool) -> None:
    """Refuse `--skip-finished` for a search: it draws its samples and answers repeats from the store already."""
    if skip_finished and search:
        raise ConfigError(
            "--skip-finished", True, "a grid sweep (a search draws its samples and answers repeats from the store)"
        )

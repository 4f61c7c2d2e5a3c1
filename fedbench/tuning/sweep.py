"""`fedbench sweep`: a task's RunSpecs as Ray Tune trials, many at once on one machine or a cluster.

The sweep is one MLflow parent run in the task's experiment; every trial is a nested child run written by
this process (the one writer). Tune's own results live under `results/ray_results/<sweep>`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

from fedbench.core.callbacks import RunResult
from fedbench.core.errors import ConfigError
from fedbench.core.runspec import RunSpec
from fedbench.tracking.paths import results_dir, tracking_uri


@dataclass
class SweepOutcome:
    """What a sweep did: its MLflow parent run, Tune's folder, and each trial's outcome."""

    name: str
    parent_run_id: str
    storage: str
    results: list[RunResult] = field(default_factory=list)


def sweep_name(task: str, specs: Sequence[RunSpec]) -> str:
    """Stable for the same task and configurations, so `--resume` finds the interrupted sweep."""
    digest = hashlib.sha1(",".join(sorted(s.run_hash for s in specs)).encode()).hexdigest()[:8]
    return f"{task}-{digest}"


def run_sweep(
    specs: Sequence[RunSpec],
    max_concurrent: int | None = None,
    address: str | None = None,
    driver_cpus: float | None = None,
) -> SweepOutcome:
    """Run every RunSpec as one Tune trial (grid search over the specs), logging to MLflow from here."""
    import ray
    from mlflow.tracking import MlflowClient
    from ray import tune

    from fedbench.runtime.ray_pool import ensure_ray
    from fedbench.tracking.mlflow_callback import experiment_id_for
    from fedbench.tuning.mlflow_bridge import MlflowBridge
    from fedbench.tuning.resources import DRIVER_CPUS, for_trial, placement
    from fedbench.tuning.trial import run_trial

    specs = [for_trial(s) for s in specs]
    task = specs[0].task
    name = sweep_name(task, specs)
    started_here = not ray.is_initialized()
    try:
        ensure_ray(address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError("--address", address, f"a reachable Ray cluster (auto or HOST:PORT): {exc}") from exc
    uri = tracking_uri()
    client = MlflowClient(uri)
    parent = client.create_run(experiment_id_for(client, task), run_name=f"sweep {name}",
                               tags={"fedbench.sweep": name, "fedbench.trials": str(len(specs))})
    bridge = MlflowBridge(uri, task, parent.info.run_id)
    storage = str(results_dir() / "ray_results")
    try:
        trainable = tune.with_resources(run_trial, lambda config: placement(RunSpec.from_dict(config["run"]), driver_cpus or DRIVER_CPUS))
        tuner = tune.Tuner(
            trainable,
            param_space={"run": tune.grid_search([s.to_dict() for s in specs])},
            tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent, trial_name_creator=_trial_name,
                                        trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(name=name, storage_path=storage, callbacks=[bridge], verbose=0),
        )
        tuner.fit()
        client.set_terminated(parent.info.run_id, "FINISHED")
    except BaseException:
        client.set_terminated(parent.info.run_id, "KILLED")
        raise
    finally:
        if started_here:
            ray.shutdown()
    return SweepOutcome(name, parent.info.run_id, storage, list(bridge.outcomes.values()))


def _trial_name(trial) -> str:
    return RunSpec.from_dict(trial.config["run"]).label

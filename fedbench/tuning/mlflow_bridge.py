"""The sweep's driver-side Tune callback: turns trial reports into MLflow child runs of the sweep's run.

All MLflow writes happen here, in the driver, through the same `MlflowCallback` a plain `fedbench run` uses.
A trial Tune restarts after its process died (`max_failures`) starts again from round 1 under a new child run;
the attempt it cut short ends FAILED, tagged retried, so the trial still has one result. Where the trials' client
workers train is gathered across trials, to warn once of workers sharing a GPU without MPS.
"""

from __future__ import annotations

import json
from typing import Any

from ray import tune
from ray.tune.result import AUTO_RESULT_KEYS

from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.core.runspec import RunSpec
from fedbench.runtime import per_client
from fedbench.runtime.gpu_sharing import SharedGpuCheck
from fedbench.runtime.placement import places_from_tags
from fedbench.runtime.records import summarize
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.tags import REFERENCE_TAG, RETRIED_TAG, STOPPED_EARLY_TAG, TRIAL_KEY_TAG
from fedbench.tuning.plan import TrialSpecs
from fedbench.tuning.trial import EVENT, PER_CLIENT, RUN_TAGS

TUNE_KEYS = {"status", "reason", "traceback", EVENT, RUN_TAGS, PER_CLIENT}


class MlflowBridge(tune.Callback):
    """One MLflow child run per trial, nested under `parent_run_id`, written as reports arrive."""

    def __init__(self, uri: str, experiment: str, parent_run_id: str, spec_of: TrialSpecs):
        self.uri, self.experiment, self.parent_run_id, self.spec_of = uri, experiment, parent_run_id, spec_of
        self.runs: dict[str, tuple[RunSpec, MlflowCallback, list[dict[str, float]]]] = {}
        self.outcomes: dict[str, RunResult] = {}
        self.gpu_check = SharedGpuCheck()

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.outcomes:  # restarted after its last report was recorded: nothing left to log
            return
        spec = self.spec_of(trial.config)
        callback = MlflowCallback(self.uri, self.experiment, self.parent_run_id)
        callback.on_run_start(spec)
        tags = _trial_tags(trial, trial.placement_group_factory)
        tags[TRIAL_KEY_TAG] = self.spec_of.trial_key(trial.config, trial.trial_id)
        tags.update({f"search.{k}": str(v) for k, v in self.spec_of.sampled(trial.config).items()})
        if self.spec_of.is_reference(trial.config):
            tags[REFERENCE_TAG] = "true"
        callback.set_tags(tags)
        self.runs[trial.trial_id] = (spec, callback, [])

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict[str, Any], **info: Any) -> None:
        if trial.trial_id not in self.runs:  # a restarted trial whose result is already recorded
            return
        spec, callback, history = self.runs[trial.trial_id]
        metrics = {k: float(v) for k, v in result.items() if k in _metric_keys(result)}
        if result.get(EVENT) == "round":
            history.append(metrics)
            callback.on_round_end(spec, metrics)
        elif result.get(EVENT) == "end":
            final = {k: v for k, v in metrics.items() if M.is_summary(k)}
            callback.set_tags({k: str(v) for k, v in result.items() if k.startswith("trial.")})
            run_tags = json.loads(result.get(RUN_TAGS, "{}"))
            self.gpu_check.add(places_from_tags(run_tags))
            outcome = RunResult(
                spec,
                result["status"],
                history,
                final,
                result.get("reason", ""),
                result.get("traceback", ""),
                run_tags,
                per_client.decode(result[PER_CLIENT]) if result.get(PER_CLIENT) else {},
            )
            self._finish(trial.trial_id, outcome)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial that ends without its final report was stopped early by the scheduler (ASHA)."""
        if trial.trial_id in self.runs:
            spec, callback, history = self.runs[trial.trial_id]
            callback.set_tags({STOPPED_EARLY_TAG: f"after round {len(history)}"})
            seconds = sum(record.get(M.TIME_ROUND_S, 0.0) for record in history)
            self._finish(trial.trial_id, RunResult(spec, "FINISHED", history, summarize(history, seconds)))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """The trial's process died and Tune starts it again: this attempt's run ends FAILED, marked retried, and
        stays out of the trial's outcome (the next attempt's run is the result)."""
        if trial.trial_id in self.runs:
            spec, callback, history = self.runs.pop(trial.trial_id)
            failures = trial.run_metadata.num_failures
            callback.set_tags({RETRIED_TAG: f"attempt {failures} of the trial"})
            reason = (
                f"retried: trial {trial.trial_id} crashed (attempt {failures}), Tune runs it again: "
                f"{trial.error_file or 'see the Tune logs'}"
            )
            callback.on_run_end(RunResult(spec, "FAILED", history, {}, reason))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if trial.trial_id in self.runs:
            spec, _, history = self.runs[trial.trial_id]
            reason = f"trial {trial.trial_id} crashed: {trial.error_file or 'see the Tune logs'}"
            self._finish(trial.trial_id, RunResult(spec, "FAILED", history, {}, reason))

    def _finish(self, trial_id: str, outcome: RunResult) -> None:
        spec, callback, _ = self.runs.pop(trial_id)
        callback.on_run_end(outcome)
        self.outcomes[trial_id] = outcome


def _metric_keys(result: dict[str, Any]) -> set[str]:
    """The fedbench metrics of a report: its numbers, less what Tune adds to every report."""
    return {
        k
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in AUTO_RESULT_KEYS and k not in TUNE_KEYS
    }


def _trial_tags(trial: Any, placement: Any) -> dict[str, str]:
    bundles = placement.bundles
    return {
        "trial.id": trial.trial_id,
        "trial.driver_cpus": str(bundles[0].get("CPU", 0)),
        "trial.client_workers": str(len(bundles) - 1),
        "trial.client_cpus": str(bundles[1].get("CPU", 0) if len(bundles) > 1 else 0),
        "trial.client_gpus": str(bundles[1].get("GPU", 0) if len(bundles) > 1 else 0),
    }

"""MLflow callback: one MLflow run per RunSpec, written by one writer (the driver) via MlflowClient.

Params are the flattened RunSpec, metrics are logged once per round with step=round (one `log_batch`
call), `final.*`/`total.*` summaries at the end, and the RunSpec YAML and every client's numbers per evaluated round
(`per_client.parquet`) as artifacts. A failed run is terminated
FAILED with its reason in the `failure_reason` tag and its traceback as an artifact.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode

from fedbench.core.callbacks import Callback, RoundRecord, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.tracking.paths import inside, tracking_uri
from fedbench.tracking.patient_store import PatientClient
from fedbench.tracking.per_client import log_per_client
from fedbench.tracking.run_models import log_models
from fedbench.tracking.store_template import prepare_store
from fedbench.tracking.tags import (
    FAILURE_REASON_TAG,
    FAILURE_TRACEBACK_ARTIFACT,
    MAX_PARAM_LENGTH,
    PARENT_RUN_TAG,
    STOPPED_TAG,
)

MAX_TAGS_PER_BATCH = 100
"""The most tags MLflow takes in one `log_batch` call."""


EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
"""MLflow 3's UI opens an experiment of this kind on its runs and their metric charts, not on GenAI traces."""


def experiment_id_for(client: PatientClient, name: str) -> str:
    """The id of experiment `name`, created if needed (artifacts beside the database of an sqlite store;
    a tracking server decides for itself).

    Several processes may create the same new experiment at once (sweeps or runs of one task started
    together): the ones that lose the race get the winner's experiment instead of an error.
    """
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    artifact_location = None
    if client.tracking_uri.startswith("sqlite:///"):
        database = Path(client.tracking_uri.removeprefix("sqlite:///")).resolve()
        artifact_location = inside(database.parent / "mlartifacts", name).as_uri()
    try:
        return client.create_experiment(name, artifact_location=artifact_location, tags=EXPERIMENT_TAGS)
    except MlflowException as exc:
        if exc.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
            raise
        return client.get_experiment_by_name(name).experiment_id


class MlflowCallback(Callback):
    """Logs runs into the experiment named after the task (or `experiment`)."""

    def __init__(self, uri: str | None = None, experiment: str | None = None, parent_run_id: str | None = None):
        uri = uri or tracking_uri()
        prepare_store(uri)
        self.client = PatientClient(uri)
        self.experiment = experiment
        self.parent_run_id = parent_run_id
        self.run_id: str | None = None

    def on_run_start(self, spec: RunSpec) -> None:
        experiment_id = experiment_id_for(self.client, self.experiment or spec.task)
        tags = {"fedbench.run_hash": spec.run_hash, "fedbench.algorithm": spec.algorithm.name}
        if self.parent_run_id:
            tags[PARENT_RUN_TAG] = self.parent_run_id
        run = self.client.create_run(experiment_id, run_name=spec.label, tags=tags)
        self.run_id = run.info.run_id
        params = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in spec.flat().items()]
        params.append(Param("run_hash", spec.run_hash))
        self.client.log_batch(self.run_id, params=params)
        self.client.log_text(self.run_id, spec.to_yaml(), "runspec.yaml")

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tag the run with what the caller knows about it (a sweep: where its trial ran, what it sampled), in
        batches MLflow accepts (a run on many workers has three tags per worker)."""
        items = [RunTag(k, v) for k, v in tags.items()]
        for start in range(0, len(items), MAX_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, tags=items[start : start + MAX_TAGS_PER_BATCH])

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> None:
        step = int(record["round"])
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in record.items() if k != "round"]
        self.client.log_batch(self.run_id, metrics=metrics)

    def on_run_end(self, result: RunResult) -> None:
        now = int(time.time() * 1000)
        step = len(result.history)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in result.final.items()])
        self.set_tags(result.tags)
        log_per_client(self.client, self.run_id, result.per_client)
        log_models(self.client, self.run_id, result.models)
        if result.status == "FAILED":
            self.client.log_batch(self.run_id, tags=[RunTag(FAILURE_REASON_TAG, result.reason[:5000])])
            if result.traceback:
                self.client.log_text(self.run_id, result.traceback, FAILURE_TRACEBACK_ARTIFACT)
        self.client.set_terminated(self.run_id, status=result.status)

    def on_run_stopped(self, spec: RunSpec, rounds_done: int, reason: str) -> None:
        """Mark the run KILLED with where it stopped, so that no listing shows it RUNNING forever; once a later
        attempt of the same run finishes, listings leave this one out (`leaderboard.failed_runs`)."""
        if self.run_id is None:
            return
        stopped = f"{reason} after round {rounds_done} of {spec.rounds}"
        self.client.log_batch(self.run_id, tags=[RunTag(STOPPED_TAG, stopped), RunTag(FAILURE_REASON_TAG, stopped)])
        self.client.set_terminated(self.run_id, status="KILLED")

"""The store interface (`fedbench.tracking.store.RunStore`) over MLflow: the one module that reads MLflow's runs
and turns its column names (`params.x`, `metrics.x`, `tags.x`) into fedbench's.

Every call waits out a store another process holds (`fedbench.tracking.patient_store`). MLflow is imported only
when a method runs, so importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.tracking.paths import store_missing
from fedbench.tracking.patient_store import patiently
from fedbench.tracking.search_filter import where
from fedbench.tracking.store import (
    END_TIME,
    PARAM_PREFIX,
    RUN_ID,
    RUN_LABEL,
    START_TIME,
    STATUS,
    MetricPoint,
    NameClashError,
    StoredRun,
    is_field,
    is_metric,
    tag,
)
from fedbench.tracking.tags import PARENT_RUN_TAG, SWEEP_TAG

if TYPE_CHECKING:
    from fedbench.tracking.patient_store import PatientClient

PARAMS, METRICS, TAGS = "params.", "metrics.", "tags."
"""MLflow's column prefixes in `mlflow.search_runs`' table: read here and nowhere else."""
RUN_NAME_TAG = "mlflow.runName"
"""MLflow's tag holding a run's name (`run_label`)."""
MAX_CHILDREN = 50000


def ui_column(name: str, metric: bool) -> str:
    """MLflow UI's key of a run table's column for a metric or a RunSpec field (`metrics.`final.acc``), as its
    shared views and sort keys name them."""
    return f"{METRICS if metric else PARAMS}`{name}`"


def fedbench_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`mlflow.search_runs`' table in fedbench's column names (`fedbench.tracking.store`).

    A summary an older store wrote as `metrics.final/x` becomes `final.x`, merged with the runs that already wrote
    it so, so that old and new runs rank together.

    Raises:
        NameClashError: a run's metric has the name of a RunSpec field or of a fixed column.
    """
    index = frame.index

    def column(name: str) -> pd.Series:
        return frame[name] if name in frame else pd.Series(None, index=index, dtype=object)

    fixed = {name: column(name) for name in (RUN_ID, STATUS, START_TIME, END_TIME)}
    fixed[RUN_LABEL] = column(TAGS + RUN_NAME_TAG)
    fields: dict[str, pd.Series] = {}
    metrics: dict[str, pd.Series] = {}
    tags: dict[str, pd.Series] = {}
    for name in map(str, frame.columns):
        if name.startswith(PARAMS):
            field = name.removeprefix(PARAMS)
            fields[field if is_field(field) else PARAM_PREFIX + field] = frame[name]
        elif name.startswith(METRICS):
            key = M.canonical(name.removeprefix(METRICS))
            metrics[key] = metrics[key].combine_first(frame[name]) if key in metrics else frame[name]
        elif name.startswith(TAGS):
            tags[tag(name.removeprefix(TAGS))] = frame[name]
    for key, values in metrics.items():
        if not is_metric(key):
            raise NameClashError(str(fixed[RUN_ID][values.notna()].iloc[0]) if values.notna().any() else "?", key)
    return pd.DataFrame({**fixed, **fields, **metrics, **tags}, index=index)


@contextlib.contextmanager
def searching(uri: str) -> Iterator[None]:
    """MLflow's module-level search functions read the process's tracking URI, and `mlflow.set_tracking_uri` also
    sets MLFLOW_TRACKING_URI, which `tracking_uri()` reads first: both are set for the search only and put back
    after it, so that a later run in the same process (a notebook) still records where FEDBENCH_RESULTS says."""
    import mlflow

    variable, previous = os.environ.get("MLFLOW_TRACKING_URI"), mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
        if variable is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = variable


def stored_run(run: Any) -> StoredRun:
    """An MLflow `Run` as the store interface gives it."""
    return StoredRun(run.info.run_id, run.info.status, int(run.info.start_time or 0), dict(run.data.tags))


class MlflowStore:
    """The runs of the MLflow tracking store at `uri` (`fedbench.tracking.store.RunStore`), and the artifacts
    readers attach to runs (`attach`)."""

    def __init__(self, uri: str, client: PatientClient | None = None):
        self.uri = uri
        self._client = client

    @property
    def client(self) -> PatientClient:
        """The store's client, opened on first use."""
        if self._client is None:
            from fedbench.tracking.patient_store import PatientClient

            self._client = PatientClient(self.uri)
        return self._client

    def runs(self, experiment: str) -> pd.DataFrame:
        import mlflow

        where_to = (
            f"the tracking store {self.uri} (results go to results/ under the folder fedbench runs in, or to "
            "FEDBENCH_RESULTS or MLFLOW_TRACKING_URI when set)"
        )
        if store_missing(self.uri):
            raise ConfigError("--experiment", experiment, f"an experiment in {where_to}; that store does not exist")
        with searching(self.uri):
            if patiently(lambda: mlflow.get_experiment_by_name(experiment), self.uri, "reading experiments") is None:
                raise ConfigError("--experiment", experiment, f"an experiment in {where_to}")
            found = patiently(lambda: mlflow.search_runs(experiment_names=[experiment]), self.uri, "reading runs")
        assert isinstance(found, pd.DataFrame)  # not a list of Runs: output_format is "pandas"
        return fedbench_columns(found)

    def metric_history(self, run_id: str, key: str) -> list[MetricPoint]:
        legacy = [old + key.removeprefix(new) for old, new in M.LEGACY_PREFIXES.items() if key.startswith(new)]
        for spelling in [key, *legacy]:  # an older store wrote `final/x`
            history = self.client.get_metric_history(run_id, spelling)
            if history:
                return [MetricPoint(int(m.step), float(m.value), int(m.timestamp)) for m in history]
        return []

    def has_artifact(self, run_id: str, path: str) -> bool:
        folder = path.rpartition("/")[0] or None
        return any(f.path == path for f in self.client.list_artifacts(run_id, folder))

    def artifact(self, run_id: str, path: str, into: Path) -> Path:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per run would flood the console
        return Path(self.client.download_artifacts(run_id, path, str(into)))

    def _experiment_id(self, experiment: str) -> str | None:
        if store_missing(self.uri):
            return None
        found = self.client.get_experiment_by_name(experiment)
        return None if found is None else str(found.experiment_id)

    def sweep_parent(self, experiment: str, sweep: str | None = None) -> StoredRun | None:
        experiment_id = self._experiment_id(experiment)
        if experiment_id is None:
            return None
        found = self.client.search_runs(
            [experiment_id], where({TAGS + SWEEP_TAG: sweep}), order_by=["start_time DESC"], max_results=1
        )
        return stored_run(found[0]) if found else None

    def sweep_children(self, experiment: str, parent_run_id: str) -> list[StoredRun]:
        experiment_id = self._experiment_id(experiment)
        if experiment_id is None:
            return []
        found = self.client.search_runs(
            [experiment_id], where({TAGS + PARENT_RUN_TAG: parent_run_id}), max_results=MAX_CHILDREN
        )
        return [stored_run(run) for run in found]

    def attach(self, run_id: str, files: Sequence[Path], folder: str) -> list[str]:
        """Log `files` as run `run_id`'s artifacts in `folder`; their artifact paths."""
        for path in files:
            self.client.log_artifact(run_id, str(path), folder)
        return [f"{folder}/{path.name}" for path in files]

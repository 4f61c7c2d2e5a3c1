"""Per-client results in the store: each run's table (`fedbench.runtime.per_client`) as its `per_client.parquet`
artifact, read back for `fedbench export --per-client` and the per-client figures.

Runs recorded before fedbench kept per-client results have no such artifact; readers skip them and say how many.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedbench.tracking.export import run_description
from fedbench.tracking.leaderboard import fedbench_runs, group_and_configuration, latest_finished, varying_params
from fedbench.tracking.store import RUN_ID, RunStore

ARTIFACT = "per_client.parquet"


def log_per_client(client: Any, run_id: str, table: Mapping[str, np.ndarray]) -> None:
    """Write `table` as the run's parquet artifact (nothing for a run that evaluated no round)."""
    if not len(table.get("round", ())):
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ARTIFACT
        pd.DataFrame(table).to_parquet(path, index=False)
        client.log_artifact(run_id, str(path))


def read_per_client(store: RunStore, run_id: str) -> pd.DataFrame | None:
    """The run's per-client table, None when the run has none."""
    if not store.has_artifact(run_id, ARTIFACT):
        return None
    with tempfile.TemporaryDirectory() as folder:
        return pd.read_parquet(store.artifact(run_id, ARTIFACT, Path(folder)))


@dataclass
class PerClientRuns:
    """Every finished run's per-client rows, with the run's hash, seed, group, configuration and varying fields."""

    table: pd.DataFrame
    without: int
    """Finished runs that have no per-client table (recorded before fedbench kept one)."""
    fields: list[str]
    """The fields that vary across the runs (a column each)."""


def per_client_runs(experiment: str, uri: str, group_by: Sequence[str] = ("dataset", "scenario")) -> PerClientRuns:
    """One row per (run, round, client) over the experiment's latest finished run of each hash."""
    from fedbench.tracking.mlflow_store import MlflowStore

    return store_per_client(MlflowStore(uri), experiment, group_by)


def store_per_client(
    store: RunStore, experiment: str, group_by: Sequence[str] = ("dataset", "scenario")
) -> PerClientRuns:
    """`per_client_runs` of `experiment` in `store`."""
    runs = latest_finished(fedbench_runs(store, experiment))
    group, configuration = group_and_configuration(runs, group_by)
    fields = varying_params(runs)
    parts: list[pd.DataFrame] = []
    measured: list[str] = []
    without = 0
    for (_, run), run_group, run_configuration in zip(runs.iterrows(), group, configuration, strict=True):
        rows = read_per_client(store, run[RUN_ID])
        if rows is None:
            without += 1
            continue
        parts.append(rows.assign(**run_description(run, run_group, run_configuration, fields)))
        measured += [str(c) for c in rows.columns if str(c) not in measured]  # older runs lack newer columns
    columns = ["run_hash", "seed", "group", "configuration", *fields, *(measured or ["round", "client"])]
    table = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    return PerClientRuns(table.sort_values(["run_hash", "round", "client"]).reset_index(drop=True), without, fields)

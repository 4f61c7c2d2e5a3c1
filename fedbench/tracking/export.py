"""Tidy exports: every per-round metric of an experiment's runs as one long table.

One row per (run, round, metric), with the run's hash, seed, status, group and configuration labels and
its varying RunSpec fields as columns, so a user filters and pivots it in pandas, R or SQL instead of
reading MLflow's per-run metric pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedbench.core import metrics as M
from fedbench.tracking.leaderboard import fedbench_runs, group_and_configuration, latest_finished, varying_params
from fedbench.tracking.store import RUN_HASH, RUN_ID, RunStore, metric_columns

FORMATS = ("csv", "parquet")


def long_metrics(experiment: str, uri: str, group_by: Sequence[str] = ("dataset", "scenario")) -> pd.DataFrame:
    """Every finished run's per-round metrics (`final.` and `total.` summaries left out: they are the leaderboard's),
    one row per (run, round, metric), each run hash once (its latest run)."""
    from fedbench.tracking.mlflow_store import MlflowStore

    return store_metrics(MlflowStore(uri), experiment, group_by)


def store_metrics(store: RunStore, experiment: str, group_by: Sequence[str] = ("dataset", "scenario")) -> pd.DataFrame:
    """`long_metrics` of `experiment` in `store`."""
    runs = latest_finished(fedbench_runs(store, experiment))
    group, configuration = group_and_configuration(runs, group_by)
    fields = varying_params(runs)
    rows: list[dict[str, Any]] = []
    for (_, run), run_group, run_configuration in zip(runs.iterrows(), group, configuration, strict=True):
        keys = [c for c in metric_columns(runs) if pd.notna(run[c])]
        described = run_description(run, run_group, run_configuration, fields)
        for key in keys:
            if M.is_summary(key):
                continue
            for point in store.metric_history(run[RUN_ID], key):
                rows.append({**described, "round": point.step, "metric": key, "value": point.value})
    columns = ["run_hash", "seed", "group", "configuration", *fields, "round", "metric", "value"]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values(["run_hash", "metric", "round"]).reset_index(drop=True)


def run_description(run: pd.Series, group: str, configuration: str, fields: Sequence[str]) -> dict[str, Any]:
    """The columns that say which run a row of an export belongs to: its hash, seed, group, configuration and
    varying fields."""
    return {
        "run_hash": run[RUN_HASH],
        "seed": run.get("seed"),
        "group": group,
        "configuration": configuration,
        **{f: run[f] for f in fields},
    }


def write_table(table: pd.DataFrame, path: Path, fmt: str = "csv") -> Path:
    """Save as CSV or parquet, column names with dots replaced by underscores: the format the path's suffix names
    where it is `.csv` or `.parquet`, else `fmt` (`--format parquet --out table` writes parquet, not CSV)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = table.rename(columns=lambda c: c.replace(".", "_"))
    if {".csv": "csv", ".parquet": "parquet"}.get(path.suffix, fmt) == "parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)
    return path

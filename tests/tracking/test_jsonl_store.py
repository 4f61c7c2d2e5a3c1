"""The write-only JSON-lines store: a real tiny run recorded by it and by MLflow at once, and its lines agree with what
the MLflow store reads back through the store interface (same fields, same metrics, same rounds)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from fedbench.core import metrics as M
from fedbench.runtime import run_spec
from fedbench.tracking.jsonl_store import JsonlStore
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.mlflow_store import MlflowStore
from fedbench.tracking.store import RUN_HASH, metric_columns
from tests.conftest import tiny_spec


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def same(ours: float | None, theirs: float) -> bool:
    """A JSON value against the store's float: null stands for NaN."""
    return math.isnan(theirs) if ours is None else ours == theirs


def test_the_jsonl_store_records_what_the_mlflow_store_reads_back(isolated_results, mlflow_store, tmp_path):
    path = tmp_path / "runs.jsonl"
    spec = tiny_spec(rounds=3)
    result = run_spec(spec, [MlflowCallback(), JsonlStore(path)])
    assert result.status == "FINISHED"

    records = lines(path)
    assert [r["event"] for r in records] == ["run_start", "round", "round", "round", "run_end"]
    assert len({r["run"] for r in records}) == 1
    start, rounds, end = records[0], records[1:-1], records[-1]

    store = MlflowStore(f"sqlite:///{mlflow_store}")
    (row,) = store.runs(spec.task).to_dict("records")
    assert start["run_hash"] == row[RUN_HASH] == spec.run_hash and start["task"] == spec.task
    assert {k: str(v) for k, v in start["fields"].items()} == {k: row[k] for k in start["fields"]}  # text in MLflow
    assert end["status"] == row["status"] == "FINISHED"

    # the summary: the same keys and values as the store's summary columns
    summaries = {k: row[k] for k in metric_columns(pd.DataFrame([row])) if M.is_summary(k) and not pd.isna(row[k])}
    assert set(end["summary"]) == set(summaries) and end["summary"]
    assert all(same(end["summary"][k], summaries[k]) for k in summaries)

    # every per-round metric: the same rounds and values as its history in the store
    assert [r["round"] for r in rounds] == [1, 2, 3]
    keys = set().union(*(r["metrics"] for r in rounds))
    assert M.ACC_LOCAL_MEAN in keys and keys == {k for k in metric_columns(pd.DataFrame([row])) if not M.is_summary(k)}
    run_id = row["run_id"]
    for key in keys:
        history = sorted(store.metric_history(run_id, key), key=lambda p: p.step)
        ours = [(r["round"], r["metrics"][key]) for r in rounds if key in r["metrics"]]
        assert [p.step for p in history] == [step for step, _ in ours], key
        assert all(same(value, p.value) for (_, value), p in zip(ours, history, strict=True)), key

    # a second run appends to the same file under its own id
    run_spec(tiny_spec(rounds=1, seed=1), [JsonlStore(path)])
    again = lines(path)
    assert len(again) == len(records) + 3 and again[len(records)]["run"] != start["run"]
    assert again[len(records)]["fields"]["seed"] == 1

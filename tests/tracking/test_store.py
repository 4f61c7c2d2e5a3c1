"""The store interface over a real sqlite MLflow store: fedbench's column names, a metric's history, an artifact
there and back, a sweep's parent and children, an older store's `final/x`; and the guard that keeps every other
module of fedbench off MLflow's read API."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.runtime import run_spec
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.mlflow_store import MlflowStore
from fedbench.tracking.store import (
    FIXED,
    RUN_HASH,
    RUN_ID,
    RUN_LABEL,
    NameClashError,
    RunStore,
    field_columns,
    is_field,
    is_metric,
    metric_columns,
    tag,
)
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tracking.tags import PARENT_RUN_TAG, SWEEP_TAG
from tests.conftest import tiny_spec

PACKAGE = Path(__file__).resolve().parents[2] / "fedbench"

MLFLOW_READERS = {"tracking/mlflow_store.py", "tracking/run_bundle.py"}
"""The modules of fedbench allowed to name MLflow's columns or call its reads: the store over MLflow, and the bundle,
which copies MLflow runs whole (every tag, param, metric history and artifact) from one MLflow store to another, so
that no other store could stand behind it. The writers (the run callback, a sweep's runs, the patient client, the
UI, the store template, the sweep report, the lease) write through `MlflowClient` and read back only through the
store interface."""

MLFLOW_PREFIXES = ("params.", "metrics.", "tags.")
MLFLOW_READS = {"search_runs", "get_metric_history", "download_artifacts", "list_artifacts"}


@pytest.fixture
def recorded(mlflow_store: Path) -> tuple[MlflowStore, RunResult]:
    result = run_spec(tiny_spec(rounds=3), [MlflowCallback()])
    assert result.status == "FINISHED"
    return MlflowStore(f"sqlite:///{mlflow_store}"), result


def test_runs_come_back_in_fedbench_names(recorded: tuple[MlflowStore, RunResult]) -> None:
    store, result = recorded
    runs = store.runs("tiny")
    assert len(runs) == 1 and all(c in runs for c in FIXED)
    assert not [c for c in runs.columns if str(c).startswith(MLFLOW_PREFIXES)]
    (row,) = runs.to_dict("records")
    spec = result.spec
    assert row["status"] == "FINISHED" and row[RUN_LABEL] == spec.label and row[RUN_HASH] == spec.run_hash
    assert row["algorithm.name"] == "fedavg" and row["seed"] == "0" and row["rounds"] == "3"  # fields are text
    assert row[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] == result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN]
    assert row[M.ACC_LOCAL_MEAN] == result.history[-1][M.ACC_LOCAL_MEAN]  # a per-round metric: its last value
    assert row[tag("fedbench.run_hash")] == spec.run_hash and tag("clients.device") in runs
    fields, metrics = field_columns(runs), metric_columns(runs)
    assert set(spec.flat()) | {RUN_HASH} == set(fields)
    assert set(metrics) == set(result.final) | {k for r in result.history for k in r if k != M.ROUND}
    tags = [c for c in runs.columns if str(c).startswith("tag:")]
    assert sorted([*FIXED, *fields, *metrics, *tags]) == sorted(map(str, runs.columns))  # each column one kind


def test_a_metrics_history_and_an_artifact_there_and_back(
    recorded: tuple[MlflowStore, RunResult], tmp_path: Path
) -> None:
    store, result = recorded
    run_id = str(store.runs("tiny")[RUN_ID].iloc[0])
    history = store.metric_history(run_id, M.ACC_LOCAL_MEAN)
    assert [p.step for p in history] == [1, 2, 3]
    assert [p.value for p in history] == [r[M.ACC_LOCAL_MEAN] for r in result.history]
    assert store.metric_history(run_id, "acc_nope") == []

    assert store.has_artifact(run_id, "runspec.yaml") and store.has_artifact(run_id, "per_client.parquet")
    assert not store.has_artifact(run_id, "nothing.txt")
    spec = yaml.safe_load(store.artifact(run_id, "runspec.yaml", tmp_path / "a").read_text())
    assert spec == result.spec.to_dict()

    figure = tmp_path / "figure.txt"
    figure.write_text("drawn")
    assert store.attach(run_id, [figure], "plots") == ["plots/figure.txt"]
    assert store.has_artifact(run_id, "plots/figure.txt") and not store.has_artifact(run_id, "plots/other.txt")
    assert store.artifact(run_id, "plots/figure.txt", tmp_path / "b").read_text() == "drawn"


def test_a_sweeps_parent_and_children(mlflow_store: Path) -> None:
    uri = f"sqlite:///{mlflow_store}"
    store = MlflowStore(uri)
    assert store.sweep_parent("sweeps") is None and store.sweep_children("sweeps", "x") == []  # no such experiment
    assert MlflowStore(f"sqlite:///{mlflow_store.parent / 'none.db'}").sweep_parent("sweeps") is None
    assert not (mlflow_store.parent / "none.db").exists()  # reading never creates a store

    sweeps = SweepRuns(uri, "sweeps")
    parent = sweeps.start_parent("tiny-sweep", 1)
    result = run_spec(tiny_spec(rounds=1), [MlflowCallback(experiment="sweeps", parent_run_id=parent.run_id)])
    run_spec(tiny_spec(rounds=1, seed=1), [MlflowCallback(experiment="sweeps")])  # not the sweep's

    found = store.sweep_parent("sweeps")
    assert found is not None and found.run_id == parent.run_id and found.tags[SWEEP_TAG] == "tiny-sweep"
    assert found.status == "RUNNING" and found.start_time > 0
    assert store.sweep_parent("sweeps", "tiny-sweep") == found and store.sweep_parent("sweeps", "other") is None
    (child,) = store.sweep_children("sweeps", parent.run_id)
    assert child.status == "FINISHED" and child.tags[PARENT_RUN_TAG] == parent.run_id
    assert child.tags["fedbench.run_hash"] == result.spec.run_hash
    runs = store.runs("sweeps")
    assert set(runs.loc[runs[RUN_ID] == child.run_id, RUN_HASH]) == {result.spec.run_hash}
    assert runs.loc[runs[RUN_ID] == parent.run_id, RUN_HASH].isna().all()  # a parent ran no RunSpec


def legacy_run(uri: str, metrics: dict[str, float], run_hash: str = "abc") -> str:
    """A run as a store from before the summaries' dot (or a careless algorithm) wrote it."""
    client = MlflowClient(uri)
    experiment = client.create_experiment("old")
    run_id = client.create_run(experiment).info.run_id
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, 0, 2) for k, v in metrics.items()],
        params=[Param("run_hash", run_hash), Param("algorithm.name", "fedavg")],
    )
    client.set_terminated(run_id)
    return run_id


def test_a_store_written_before_the_dot_reads_in_todays_names(mlflow_store: Path) -> None:
    uri = f"sqlite:///{mlflow_store}"
    run_id = legacy_run(uri, {"final/acc_local_mean": 0.5, "total/comm_up_bytes": 10.0, "acc_local_mean": 0.5})
    store = MlflowStore(uri)
    runs = store.runs("old")
    assert sorted(metric_columns(runs)) == ["acc_local_mean", "final.acc_local_mean", "total.comm_up_bytes"]
    assert runs["final.acc_local_mean"].tolist() == [0.5] and "final/acc_local_mean" not in runs
    assert [(p.step, p.value) for p in store.metric_history(run_id, "final.acc_local_mean")] == [(2, 0.5)]


def test_a_metric_named_like_a_field_is_refused_not_merged(mlflow_store: Path) -> None:
    uri = f"sqlite:///{mlflow_store}"
    run_id = legacy_run(uri, {"rounds": 3.0})
    with pytest.raises(NameClashError, match=f"run {run_id} recorded a metric named 'rounds'"):
        MlflowStore(uri).runs("old")


def test_fedbenchs_names_cannot_collide() -> None:
    """Tags hold a colon; every metric key fedbench defines, bare or summarised, is no field and no fixed column;
    every RunSpec field is a field; a fixed column is neither."""
    keys = [v for k, v in vars(M).items() if k.isupper() and isinstance(v, str) and not v.endswith((".", "/"))]
    assert M.ACC_LOCAL_MEAN in keys and M.TIME_RUN_S in keys
    for key in keys:
        for name in (key, M.FINAL_PREFIX + key, M.TOTAL_PREFIX + key):
            assert is_metric(name) and not is_field(name) and name not in FIXED, name
    flat = {**tiny_spec(algorithm={"name": "fedprox", "mu": 0.1}).flat(), RUN_HASH: "x"}
    assert all(is_field(f) and not is_metric(f) and f not in FIXED for f in flat)
    assert not any(is_field(c) or is_metric(c) for c in FIXED)
    assert not any(is_field(tag(n)) or is_metric(tag(n)) for n in ("seed", "final.acc_local_mean", "run_hash"))


def test_the_mlflow_store_implements_every_read_of_the_interface() -> None:
    for name, method in inspect.getmembers(RunStore, inspect.isfunction):
        if name.startswith("_"):
            continue
        ours = getattr(MlflowStore, name)
        assert inspect.signature(ours) == inspect.signature(method), name


def mlflow_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module names MLflow's columns (a string, or an f-string, starting `params.`, `metrics.`, `tags.`) or
    calls one of MLflow's reads."""
    found = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
        if text is not None and text.startswith(MLFLOW_PREFIXES):
            found.append((node.lineno, repr(text[:30])))
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in MLFLOW_READS:
                found.append((node.lineno, f"{name}()"))
    return found


def test_only_the_mlflow_store_reads_mlflow() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in MLFLOW_READERS:
            continue
        found = mlflow_reads(ast.parse(path.read_text(), str(path)))
        if found:
            offenders[relative] = found
    assert not offenders, f"read MLflow through fedbench.tracking.store instead: {offenders}"
    assert mlflow_reads(ast.parse((PACKAGE / "tracking" / "mlflow_store.py").read_text()))  # the scan sees them
    sample = 'runs[f"metrics.{key}"]\nclient.search_runs([e])\nx = "tags." + name\n'
    assert {line for line, _ in mlflow_reads(ast.parse(sample))} == {1, 2, 3}


def test_the_leaderboard_reads_through_any_store(recorded: tuple[MlflowStore, RunResult]) -> None:
    """A store is anything with the interface's reads: the leaderboard's numbers are the same through a wrapper."""
    from fedbench.tracking.leaderboard import build_leaderboard, fedbench_runs, read_runs

    store, _ = recorded

    class Wrapped:
        def runs(self, experiment: str) -> pd.DataFrame:
            return store.runs(experiment)

    ours = build_leaderboard(fedbench_runs(Wrapped(), "tiny"), group_by=())  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(ours.table, build_leaderboard(read_runs("tiny", store.uri), group_by=()).table)

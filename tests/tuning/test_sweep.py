"""Sweeps on Ray Tune: trials in their own placement groups, several at once, one MLflow child run each."""

import pandas as pd
import pytest
import yaml

from fedbench.config import load_task
from fedbench.tuning import run_sweep
from tests.conftest import TINY

pytestmark = pytest.mark.ray


def write_task(tmp_path, **changes):
    task = {**TINY, "name": "sweep_test", "resources": {"client_cpus": 0.5}, "rounds": 2,
            "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.3, 1.0, 3.0]}, "seeds": [0], **changes}
    task.pop("task")
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def test_a_grid_runs_as_concurrent_trials_each_inside_its_own_placement_group(tmp_path, mlflow_store, ray_session):
    import mlflow

    specs = load_task(write_task(tmp_path)).expand()
    assert len(specs) == 6
    outcome = run_sweep(specs, max_concurrent=2)
    assert sorted(r.status for r in outcome.results) == ["FINISHED"] * 6

    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == outcome.parent_run_id]
    assert len(children) == 6 and set(children["params.run_hash"]) == {s.run_hash for s in specs}
    assert (children["status"] == "FINISHED").all()
    groups = children["tags.trial.placement_group"]
    assert groups.nunique() == 6 and "None" not in set(groups)
    assert (children["tags.trial.worker_placement_groups"] == groups).all()  # every client actor inside its trial's group
    assert set(children["tags.trial.client_cpus"]) == {"0.5"}
    assert children["metrics.final/acc_local_mean"].notna().all()

    spans = sorted(zip(pd.to_datetime(children["start_time"]), pd.to_datetime(children["end_time"])))
    assert any(later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:]))  # trials overlapped

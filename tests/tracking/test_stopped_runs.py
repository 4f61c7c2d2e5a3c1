"""Stopped runs stay honest (issue 47, item 4): a run stopped by Ctrl-C (or SIGTERM, raised as it) is KILLED in
MLflow with the round it reached, not RUNNING forever; once its resume finishes, listings leave the attempt out;
and the resumed run's wall time counts every attempt, as its compute time does."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from fedbench.core import metrics as M
from fedbench.runtime import Federation
from fedbench.runtime.checkpoint import CheckpointFolder
from fedbench.tracking.leaderboard import failed_runs, fedbench_runs
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.mlflow_store import MlflowStore
from fedbench.tracking.paths import tracking_uri
from fedbench.tracking.tags import STOPPED_TAG
from tests.runtime.test_checkpoint import KillAfter, spec_for


class CtrlC(KillAfter):
    def on_round_end(self, spec, record):
        if record["round"] == self.round:
            raise KeyboardInterrupt


def test_a_run_stopped_by_ctrl_c_is_killed_with_its_round_and_hidden_once_resumed(tmp_path, mlflow_store):
    spec = spec_for("fedavg")
    folder = tmp_path / "checkpoints"
    with pytest.raises(KeyboardInterrupt):
        Federation(spec, [MlflowCallback(), CtrlC(5)], checkpoints=CheckpointFolder(folder, every=2)).run()
    client = MlflowClient(tracking_uri())
    [stopped] = client.search_runs([client.get_experiment_by_name(spec.task).experiment_id])
    assert stopped.info.status == "KILLED"
    assert stopped.data.tags[STOPPED_TAG] == f"interrupted after round 5 of {spec.rounds}"
    runs = fedbench_runs(MlflowStore(tracking_uri()), spec.task)
    assert list(failed_runs(runs)["status"]) == ["KILLED"]  # listed, with its reason, until it is resumed

    resumed = Federation(spec, [MlflowCallback()], checkpoints=CheckpointFolder(folder, every=2)).run()
    assert resumed.status == "FINISHED"
    runs = fedbench_runs(MlflowStore(tracking_uri()), spec.task)
    assert sorted(runs["status"]) == ["FINISHED", "KILLED"] and failed_runs(runs).empty


def test_a_resumed_runs_wall_time_counts_the_attempts_before_it(tmp_path):
    spec = spec_for("fedavg")
    folder = tmp_path / "checkpoints"
    with pytest.raises(KeyboardInterrupt):
        Federation(spec, [CtrlC(5)], checkpoints=CheckpointFolder(folder, every=2)).run()
    earlier = CheckpointFolder(folder).latest(spec.run_hash, spec.rounds).wall_s
    result = Federation(spec, checkpoints=CheckpointFolder(folder, every=2)).run()
    total = M.TOTAL_PREFIX
    assert earlier > 0
    assert result.final[total + M.TIME_RUN_S] >= result.final[total + M.TIME_CLIENT_COMPUTE_S]  # wall >= compute
    assert result.final[total + M.TIME_RUN_S] > earlier

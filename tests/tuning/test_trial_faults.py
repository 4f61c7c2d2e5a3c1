"""A trial whose process dies is restarted by Tune (`max_failures`) and still has one result in MLflow."""

import os
import threading
import time

import psutil
import pytest
from mlflow.tracking import MlflowClient

from fedbench.config import load_task
from fedbench.runtime import Federation
from fedbench.tracking.leaderboard import build_leaderboard, read_runs
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tracking.tags import RETRIED_TAG, TRIAL_KEY_TAG
from fedbench.tuning import make_plan, run_sweep
from tests.tuning.test_sweep import write_task

pytestmark = pytest.mark.ray

TRIAL_PROCESS = "ImplicitFunc"
"""What Ray titles the process of a Tune function trial (`ray::ImplicitFunc.train`)."""


def trial_processes() -> list[psutil.Process]:
    """Tune's trial processes of the Ray this test session started (descendants of this process only)."""
    found = []
    for process in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if TRIAL_PROCESS in process.name() or TRIAL_PROCESS in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def kill_a_trial_once_it_has_logged_a_round(client: MlflowClient, experiment: str, killed: list) -> None:
    """SIGKILL the trial process once a child run has a round's metrics: the trial dies with a partial run."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'") if exp else []
        if any(run.data.metrics and TRIAL_KEY_TAG in run.data.tags for run in runs) and (victims := trial_processes()):
            for victim in victims:  # one trial at a time runs (max_concurrent=1): one process
                victim.kill()
                killed.append(victim.pid)
            return
        time.sleep(0.1)


def test_a_killed_trial_is_retried_once_and_recorded_once(tmp_path, mlflow_store, ray_session):
    uri = f"sqlite:///{mlflow_store}"
    # rounds enough that a trial is still running when the killer (polling MLflow) sees its first round
    task = load_task(write_task(tmp_path, name="sweep_faults", rounds=12, grid={"scenario.alpha": [0.3, 3.0]}))
    plan = make_plan(task)
    killed: list[int] = []
    killer = threading.Thread(target=kill_a_trial_once_it_has_logged_a_round,
                              args=(MlflowClient(uri), "sweep_faults", killed))
    killer.start()
    outcome = run_sweep(plan, max_concurrent=1, max_failures=1)
    killer.join(timeout=60)
    assert len(killed) == 1, killed
    assert sorted(r.status for r in outcome.results) == ["FINISHED", "FINISHED"] and not outcome.interrupted

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sweep_faults").experiment_id
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{outcome.parent_run_id}'")
    finished = [c for c in children if c.info.status == "FINISHED"]
    retried = [c for c in children if RETRIED_TAG in c.data.tags]
    assert len(children) == 3 and len(retried) == 1, [(c.info.status, c.data.tags) for c in children]
    assert sorted(c.data.tags[TRIAL_KEY_TAG] for c in finished) == sorted(s.run_hash for s in plan.specs)  # one each
    attempt = retried[0]
    assert attempt.info.status == "FAILED" and attempt.data.tags["failure_reason"].startswith("retried: trial ")
    assert attempt.data.metrics  # the partial attempt keeps what it logged: nothing recorded is lost

    board = build_leaderboard(read_runs("sweep_faults", uri), group_by=("dataset",))
    assert board.table["n"].sum() == 2 and len(board.failed) == 0  # the retried attempt is neither ranked nor failed

    key = attempt.data.tags[TRIAL_KEY_TAG]
    result = next(c for c in finished if c.data.tags[TRIAL_KEY_TAG] == key)
    spec = next(s for s in plan.specs if s.run_hash == key)
    undisturbed = Federation(spec, backend="serial").run()  # the ray backend gives the serial numbers (test_ray_backend)
    expected = {k: v for k, v in undisturbed.final.items() if k.startswith("final/") and "time_" not in k}
    assert expected and {k: result.data.metrics[k] for k in expected} == expected

    # --resume trusts only results: without the retried trial's FINISHED run, the trial is not done
    client.delete_run(result.info.run_id)
    others = {s.run_hash for s in plan.specs} - {key}
    assert SweepRuns(uri, "sweep_faults").finished_trials(outcome.parent_run_id) == others

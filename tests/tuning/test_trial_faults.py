"""A trial whose process dies is restarted by Tune (`max_failures`) and still has one result in MLflow; a client
worker that dies inside a trial is replaced inside the trial's placement group."""

import os
import threading
import time

import psutil
import pytest
from mlflow.tracking import MlflowClient

from fedbench.config import load_task
from fedbench.core.callbacks import RESUMED_TAG
from fedbench.runtime import Federation
from fedbench.runtime.checkpoint import CHECKPOINT_EVERY
from fedbench.tracking.leaderboard import build_leaderboard, read_runs
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tracking.tags import RETRIED_TAG, TRIAL_KEY_TAG
from fedbench.tuning import make_plan, run_sweep
from tests.tuning.test_sweep import write_task

pytestmark = pytest.mark.ray

TRIAL_PROCESS, CLIENT_WORKER = "ImplicitFunc", "ClientWorker"
"""How Ray titles a Tune function trial's process (`ray::ImplicitFunc.train`) and a client worker actor's."""


def ray_processes(title: str) -> list[psutil.Process]:
    """The processes Ray titled `title` among the descendants of this process (the Ray this session started)."""
    found = []
    for process in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if title in process.name() or title in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def running_trial(client: MlflowClient, experiment: str, not_key: str | None = None, past_round: int = 0) -> str | None:
    """The trial key of a RUNNING child run that has logged a round past `past_round` (other than trial `not_key`)."""
    exp = client.get_experiment_by_name(experiment)
    for run in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'") if exp else []:
        key = run.data.tags.get(TRIAL_KEY_TAG)
        if (
            run.data.metrics
            and key is not None
            and key != not_key
            and (not past_round or len(client.get_metric_history(run.info.run_id, "train_loss_mean")) > past_round)
        ):
            return key
    return None


def kill_a_trial_then_a_client_worker(client: MlflowClient, experiment: str, killed: dict) -> None:
    """One trial at a time runs (max_concurrent=1). Once the first is past its round-5 checkpoint, SIGKILL its
    process (the trial dies with a partial run); once the other has logged a round, SIGKILL one of its two client
    workers."""
    deadline = time.monotonic() + 300
    for title, past_round in ((TRIAL_PROCESS, CHECKPOINT_EVERY), (CLIENT_WORKER, 0)):
        while time.monotonic() < deadline:
            key = running_trial(
                client, experiment, not_key=killed.get(TRIAL_PROCESS, (None,))[0], past_round=past_round
            )
            if key is not None and (victims := ray_processes(title)):
                victims[0].kill()
                killed[title] = (key, victims[0].pid)
                break
            time.sleep(0.1)


def test_a_killed_trial_is_retried_once_and_recorded_once_and_a_killed_worker_replaced_in_its_trial(
    tmp_path, mlflow_store, ray_session
):
    uri = f"sqlite:///{mlflow_store}"
    # rounds enough that a trial is still running when the killer (polling MLflow) sees its first round
    task = load_task(
        write_task(
            tmp_path,
            name="sweep_faults",
            rounds=20,
            grid={"scenario.alpha": [0.3, 3.0]},
            resources={"client_cpus": 0.5, "num_workers": 2},
        )
    )
    plan = make_plan(task)
    killed: dict[str, tuple[str, int]] = {}
    killer = threading.Thread(
        target=kill_a_trial_then_a_client_worker, args=(MlflowClient(uri), "sweep_faults", killed)
    )
    killer.start()
    outcome = run_sweep(plan, max_concurrent=1, max_failures=1)
    killer.join(timeout=60)
    assert set(killed) == {TRIAL_PROCESS, CLIENT_WORKER}, killed
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

    assert attempt.data.tags[TRIAL_KEY_TAG] == killed[TRIAL_PROCESS][0]
    restarted = next(c for c in finished if c.data.tags[TRIAL_KEY_TAG] == killed[TRIAL_PROCESS][0])
    # Tune handed the restarted trial its last checkpoint (issue 31, item 2): it went on from there, not round 1
    assert int(restarted.data.tags[RESUMED_TAG]) >= CHECKPOINT_EVERY
    assert len(client.get_metric_history(restarted.info.run_id, "acc_local_mean")) == 20  # every round recorded
    for run in finished:  # the restarted trial, and the one whose client worker was replaced, as if undisturbed
        spec = next(s for s in plan.specs if s.run_hash == run.data.tags[TRIAL_KEY_TAG])
        undisturbed = Federation(spec, backend="serial").run()  # the ray backend's numbers too (test_ray_backend)
        expected = {k: v for k, v in undisturbed.final.items() if k.startswith("final.") and "time_" not in k}
        assert expected and {k: run.data.metrics[k] for k in expected} == expected, spec.label
    # the replacement client worker landed in its trial's placement group, like the worker it replaced
    replaced = next(c for c in finished if c.data.tags[TRIAL_KEY_TAG] == killed[CLIENT_WORKER][0])
    assert set(replaced.data.tags["trial.worker_placement_groups"].split(",")) == {
        replaced.data.tags["trial.placement_group"]
    }

    # --resume trusts only results: without the restarted trial's FINISHED run, the trial is not done
    key = killed[TRIAL_PROCESS][0]
    client.delete_run(next(c for c in finished if c.data.tags[TRIAL_KEY_TAG] == key).info.run_id)
    others = {s.run_hash for s in plan.specs} - {key}
    assert SweepRuns(uri, "sweep_faults").finished_trials(outcome.parent_run_id) == others

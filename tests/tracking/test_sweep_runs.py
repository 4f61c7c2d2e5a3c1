"""A sweep's parent and child runs: found again by the sweep's name (quotes and all), ended children kept,
unended ones dropped."""

from mlflow.tracking import MlflowClient

from fedbench.tracking.sweep_runs import SweepRuns, latest_sweep_run
from fedbench.tracking.tags import ATTEMPTS_TAG, PARENT_RUN_TAG, SWEEP_TAG, TRIAL_KEY_TAG

SWEEP = "O'Brien's task-1a2b3c4d"


def child(runs: SweepRuns, parent: str, key: str, status: str | None) -> str:
    run_id = runs.client.create_run(runs.experiment_id, tags={PARENT_RUN_TAG: parent, TRIAL_KEY_TAG: key}).info.run_id
    if status is not None:
        runs.client.set_terminated(run_id, status)
    return run_id


def test_an_interrupted_sweep_is_reopened_by_its_quoted_name_with_only_its_ended_trials(mlflow_store):
    uri = f"sqlite:///{mlflow_store}"
    runs = SweepRuns(uri, "sweeps")
    other = runs.start_parent("another-sweep", 1)
    parent = runs.start_parent(SWEEP, 3)
    assert parent.attempt == 1
    kept = {child(runs, parent.run_id, "a", "FINISHED"), child(runs, parent.run_id, "b", "FAILED")}
    child(runs, parent.run_id, "c", None)  # left RUNNING by the interrupt
    child(runs, other.run_id, "z", "FINISHED")
    runs.end_parent(parent.run_id, interrupted=True)
    client = MlflowClient(uri)
    assert client.get_run(parent.run_id).info.status == "KILLED"

    again = SweepRuns(uri, "sweeps").reopen_parent(SWEEP)
    assert again.run_id == parent.run_id and again.attempt == 2
    run = client.get_run(parent.run_id)
    assert run.info.status == "RUNNING" and run.data.tags[ATTEMPTS_TAG] == "2" and run.data.tags[SWEEP_TAG] == SWEEP
    assert runs.finished_trials(parent.run_id) == {"a", "b"}
    assert runs.drop_unfinished_children(parent.run_id) == 1
    assert {r.info.run_id for r in runs.children(parent.run_id)} == kept
    runs.end_parent(parent.run_id, interrupted=False)
    assert client.get_run(parent.run_id).info.status == "FINISHED"


def test_reopening_a_sweep_never_started_finds_none_and_the_latest_parent_wins(mlflow_store):
    runs = SweepRuns(f"sqlite:///{mlflow_store}", "sweeps")
    assert runs.reopen_parent(SWEEP) is None
    runs.start_parent(SWEEP, 1)
    newer = runs.start_parent('the "other" sweep', 1)
    assert latest_sweep_run(runs.client, runs.experiment_id).info.run_id == newer.run_id

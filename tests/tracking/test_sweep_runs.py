"""A sweep's parent and child runs: found again by the sweep's name (quotes and all), ended children kept,
unended ones dropped."""

import pytest
from mlflow.tracking import MlflowClient

from fedbench.tracking.mlflow_store import MlflowStore
from fedbench.tracking.sweep_lease import Lease
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tracking.tags import ATTEMPTS_TAG, LEASE_TAG, PARENT_RUN_TAG, SWEEP_TAG, TRIAL_KEY_TAG

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
    assert {r.run_id for r in runs.children(parent.run_id)} == kept
    runs.end_parent(parent.run_id, interrupted=False)
    assert client.get_run(parent.run_id).info.status == "FINISHED"


def test_reopening_a_sweep_never_started_finds_none_and_the_latest_parent_wins(mlflow_store):
    runs = SweepRuns(f"sqlite:///{mlflow_store}", "sweeps")
    assert runs.reopen_parent(SWEEP) is None
    runs.start_parent(SWEEP, 1)
    newer = runs.start_parent('the "other" sweep', 1)
    assert MlflowStore(runs.store.uri).sweep_parent("sweeps").run_id == newer.run_id  # of any sweep


def resume_elsewhere(uri: str, sweep: str) -> str:
    """`reopen_parent` in another process, as a second `fedbench sweep --resume` would: what it said."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom fedbench.core.errors import ConfigError\nfrom fedbench.tracking.sweep_runs import SweepRuns\n"
        f"try:\n    print('attempt', SweepRuns({uri!r}, 'sweeps').reopen_parent({sweep!r}).attempt)\n"
        "except ConfigError as exc:\n    print(exc)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_a_sweep_another_live_process_runs_is_not_resumed_under_it(mlflow_store):
    """A second `--resume` deleted the first's live child runs, taking them for an interrupted attempt's (issue 32,
    item 7): the parent carries a lease that a resume respects while its holder lives."""
    import os
    import subprocess
    import sys

    uri = f"sqlite:///{mlflow_store}"
    runs = SweepRuns(uri, "sweeps")
    parent = runs.start_parent(SWEEP, 2)  # this process runs it
    live = child(runs, parent.run_id, "a", None)
    said = resume_elsewhere(uri, SWEEP)
    assert f"a sweep no other process is running: process {os.getpid()} on" in said
    assert MlflowClient(uri).get_run(live).info.status == "RUNNING"  # the live trial's run is untouched

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = Lease(Lease.mine().host, int(gone.stdout), Lease.mine().heartbeat)  # a SIGKILLed sweep's lease
    runs.client.set_tag(parent.run_id, LEASE_TAG, dead.text())
    assert resume_elsewhere(uri, SWEEP) == "attempt 2"
    assert resume_elsewhere(uri, SWEEP) == "attempt 3"  # attempt 2's process ended without ending the parent run


def test_a_sweep_another_live_process_runs_is_not_started_again_beside_it(mlflow_store):
    """A plain `sweep` of a running sweep trained its trials again under a second parent (issue 47, item 6); once
    the first has ended, a new sweep starts."""
    import os

    from fedbench.core.errors import ConfigError

    runs = SweepRuns(f"sqlite:///{mlflow_store}", "sweeps")
    parent = runs.start_parent(SWEEP, 2)
    holder = Lease(Lease.mine().host, os.getppid(), Lease.mine().heartbeat)  # a live process other than this one
    runs.client.set_tag(parent.run_id, LEASE_TAG, holder.text())
    with pytest.raises(ConfigError, match=f"task.*a sweep no other process is running: process {os.getppid()} on"):
        runs.start_parent(SWEEP, 2)
    runs.end_parent(parent.run_id, interrupted=True)
    assert runs.start_parent(SWEEP, 2).run_id != parent.run_id


def test_two_resumes_at_the_same_moment_make_one_attempt(mlflow_store):
    import pytest

    from fedbench.core.errors import ConfigError

    runs = SweepRuns(f"sqlite:///{mlflow_store}", "sweeps")
    parent = runs.start_parent(SWEEP, 2)
    runs._claim(parent.run_id, 2, SWEEP)
    with pytest.raises(ConfigError, match="one --resume of a sweep at a time"):
        runs._claim(parent.run_id, 2, SWEEP)
    runs._claim(parent.run_id, 3, SWEEP)  # the next attempt is free


def test_a_lease_from_another_host_lives_as_long_as_its_heartbeat():
    from fedbench.tracking.sweep_lease import STALE_S, Lease

    now = 1_000_000.0
    assert Lease("elsewhere", 1, now - STALE_S / 2).alive(now)
    assert not Lease("elsewhere", 1, now - STALE_S - 1).alive(now)
    assert Lease.parse(Lease("h", 7, now).text()) == Lease("h", 7, now) and Lease.parse("garbage") is None

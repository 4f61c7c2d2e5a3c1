"""Two processes on one task: a run is trained by the process that holds its lock, and only once (issue 47, item 6)."""

import io
import os
import time

import pytest
from rich.console import Console

import fedbench
from fedbench.api import plan_run
from fedbench.core.errors import FedbenchError
from fedbench.runtime.run_lock import claimed
from fedbench.tracking.leaderboard import read_runs
from fedbench.tracking.paths import results_path
from tests.conftest import TINY

TASK = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "locked", "seeds": [0, 1]}


def lock_of(spec):
    return results_path("locks", spec.task, spec.run_hash)


def test_a_run_another_process_trains_is_skipped_and_trained_once_it_is_free(mlflow_store):
    """Two `fedbench run` of one task both trained every run (two FINISHED runs of one hash). While another holds
    seed 0's lock (a second open file description conflicts as a second process's would), this one trains seed 1
    only and says why; once the lock is free, running the task again trains seed 0 alone."""
    first, second = plan_run(TASK).expand()
    out = io.StringIO()
    with claimed(lock_of(first), since=0) as held:
        assert held.mine
        results = fedbench.run(TASK, console=Console(file=out, width=200))
    assert [r.spec.run_hash for r in results] == [second.run_hash]
    assert f"skipped {first.label}: process {os.getpid()} is training it now" in out.getvalue()

    results = fedbench.run(TASK, console=Console(file=io.StringIO()))
    assert [r.spec.run_hash for r in results] == [first.run_hash]
    runs = read_runs("locked", f"sqlite:///{mlflow_store}")  # not mlflow.set_tracking_uri: it outlives the test
    assert sorted(runs["run_hash"]) == sorted([first.run_hash, second.run_hash])  # one run a hash
    assert (runs["status"] == "FINISHED").all()


def test_a_run_another_process_ended_after_this_one_read_the_store_is_not_trained_again(tmp_path):
    """The other process finished the run between this one's reading of the store and reaching the run."""
    path = tmp_path / "locks" / "run"
    started = time.time()
    with claimed(path, since=0) as other:  # another process trains it and ends
        assert other.mine
    with claimed(path, since=started) as late:
        assert not late.mine and late.ended_at >= started and "another process ended it at" in late.why_not()
    with claimed(path, since=time.time() + 1) as later_command:  # a command started after that end trains it
        assert later_command.mine


def test_a_single_runspec_another_process_trains_is_refused_by_name(mlflow_store):
    spec = plan_run(TASK).expand()[0]
    with claimed(lock_of(spec), since=0), pytest.raises(FedbenchError, match=f"run {spec.label}: process"):
        fedbench.run(spec, console=Console(file=io.StringIO()))

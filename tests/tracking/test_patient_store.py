"""Several processes on one sqlite store: a lock another process holds is waited out, for a bounded time."""

import subprocess
import sys
import threading
import time

import pytest
import yaml

from fedbench.core.errors import ConfigError
from fedbench.tracking.leaderboard import read_runs
from fedbench.tracking.patient_store import PatientClient, StoreLockedError, is_locked, store_wait_s
from tests.conftest import TINY


def hold_exclusive_lock(store, seconds: float) -> subprocess.Popen:
    """Another process holding the store in a write transaction for `seconds`; returns once it holds it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import sqlite3, sys, time
db = sqlite3.connect({str(store)!r}, isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep({seconds})
db.execute("COMMIT")
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.slow
def test_a_store_another_process_holds_is_waited_out(mlflow_store):
    """MLflow gives up on a locked sqlite store after about 8 s (opening it) or 20 s (in a session), which ended
    `fedbench run` with `database is locked` (issue 32, item 1); fedbench waits until the lock is released."""
    uri = f"sqlite:///{mlflow_store}"
    holder = hold_exclusive_lock(mlflow_store, 12)
    start = time.monotonic()
    try:
        experiment = PatientClient(uri).create_experiment("written_after_the_lock")
    finally:
        holder.wait(timeout=60)
    assert time.monotonic() - start >= 10  # it did wait for the other process
    assert PatientClient(uri).get_experiment(experiment).name == "written_after_the_lock"


@pytest.mark.slow
def test_a_lock_held_past_the_wait_fails_naming_the_store_and_the_setting(mlflow_store, monkeypatch):
    uri = f"sqlite:///{mlflow_store}"
    monkeypatch.setenv("FEDBENCH_STORE_WAIT_S", "1")
    holder = hold_exclusive_lock(mlflow_store, 30)
    try:
        with pytest.raises(
            StoreLockedError, match=f"the tracking store {uri} stayed locked by another process .*FEDBENCH_STORE_WAIT_S"
        ):
            read_runs("anything", uri)
    finally:
        holder.kill()
        holder.wait()


def test_the_wait_setting_and_what_counts_as_a_lock(monkeypatch):
    import sqlite3

    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("FEDBENCH_STORE_WAIT_S", "soon")
    with pytest.raises(ConfigError, match="FEDBENCH_STORE_WAIT_S: got 'soon'"):
        store_wait_s()
    monkeypatch.setenv("FEDBENCH_STORE_WAIT_S", "2.5")
    assert store_wait_s() == 2.5
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as cause:
            raise MlflowException("SQLAlchemy database error") from cause
    except MlflowException as wrapped:
        assert is_locked(wrapped)  # MLflow wraps sqlite's error: the cause is what says it
    assert not is_locked(MlflowException("RESOURCE_DOES_NOT_EXIST"))


@pytest.mark.ray
def test_a_sweep_a_run_and_a_leaderboard_share_one_store(tmp_path, mlflow_store, ray_session, monkeypatch):
    """Two writers (a sweep in this process, `fedbench run` in another) and a reader on one store, at once."""
    from fedbench.config import load_task
    from fedbench.tuning import make_plan, run_sweep

    body = {k: v for k, v in TINY.items() if k != "task"}
    (tmp_path / "other.yaml").write_text(yaml.safe_dump({**body, "name": "beside", "rounds": 6, "seeds": [0, 1, 2]}))
    (tmp_path / "swept.yaml").write_text(
        yaml.safe_dump(
            {
                **body,
                "name": "swept",
                "rounds": 3,
                "seeds": [0, 1],
                "resources": {"client_cpus": 0.5},
                "grid": {"algorithm": ["fedavg", "local"]},
            }
        )
    )
    other = subprocess.Popen(
        [sys.executable, "-m", "fedbench", "run", str(tmp_path / "other.yaml")],
        env={**__import__("os").environ, "FEDBENCH_RESULTS": str(mlflow_store.parent)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    uri, reads, failures, done = f"sqlite:///{mlflow_store}", [], [], threading.Event()

    def read_leaderboards():
        while not done.is_set():
            for experiment in ("beside", "swept"):
                try:
                    reads.append(len(read_runs(experiment, uri)))
                except ConfigError:  # the experiment is not created yet
                    pass
                except Exception as exc:  # a lock or anything else: what this test is about
                    failures.append(repr(exc))
            time.sleep(0.2)

    reader = threading.Thread(target=read_leaderboards)
    reader.start()
    try:
        outcome = run_sweep(make_plan(load_task(tmp_path / "swept.yaml")), max_concurrent=2)
        assert other.wait(timeout=300) == 0, other.stderr.read()[-3000:]
    finally:
        done.set()
        reader.join()
        if other.poll() is None:
            other.kill()
    assert sorted(r.status for r in outcome.results) == ["FINISHED"] * 4
    assert not failures and len(reads) > 5
    assert len(read_runs("beside", uri)) == 3 and len(read_runs("swept", uri)) == 4

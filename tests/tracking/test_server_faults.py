"""A tracking server that dies mid-run: the run waits and goes on when it comes back, or the command stops naming
the server when it does not; never a hang or a traceback (issue 32, item 7)."""

import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from fedbench.tracking.ui import serve_store
from tests.conftest import TINY

pytestmark = pytest.mark.mlflow_server


def start_run(tmp_path, url: str, seed: int, retries: int, rounds: int) -> subprocess.Popen:
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "served", "rounds": rounds, "seeds": [seed]}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(body))
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": url,
        "FEDBENCH_RESULTS": str(tmp_path / "results"),
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(retries),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "fedbench", "run", str(tmp_path / "task.yaml")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_rounds(store, rounds: int, run: subprocess.Popen) -> None:
    """Until the server's store holds `rounds` rounds of the run's metrics: the run is under way."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        with sqlite3.connect(store) as db:
            if db.execute("SELECT COUNT(*) FROM metrics WHERE key = 'time_round_s'").fetchone()[0] >= rounds:
                return
        time.sleep(0.5)
    raise AssertionError(f"the run did not get under way: {run.poll()}")


def statuses(store) -> list[str]:
    with sqlite3.connect(store) as db:
        return [row[0] for row in db.execute("SELECT status FROM runs")]


@pytest.mark.parametrize("comes_back", [True, False])
def test_a_tracking_server_that_dies_mid_run(tmp_path, migrated_store, comes_back):
    store = tmp_path / "server.db"
    shutil.copy(migrated_store, store)
    server = serve_store(f"sqlite:///{store}", tmp_path / "artifacts", timeout_s=240)
    # MLflow's retries wait 1, 2, 4, ... s: 7 of them (two minutes) outlast a server restart on a busy machine.
    # 300 rounds of the tiny run outlast the 20 waited for and the server's stop (a round logs every few ms; the
    # run then blocks on the server), so little is left to run once it is back.
    run = start_run(tmp_path, server.url, seed=0, retries=7 if comes_back else 2, rounds=300)
    try:
        wait_for_rounds(store, 20, run)
        server.stop()
        assert run.poll() is None, "the run ended before its server stopped: the test would show nothing"
        if comes_back:
            time.sleep(3)
            server = serve_store(
                f"sqlite:///{store}", tmp_path / "artifacts", port=int(server.url.rsplit(":", 1)[1]), timeout_s=240
            )
        output = run.communicate(timeout=600)[0]
    finally:
        if run.poll() is None:
            run.kill()
        server.stop()
    if comes_back:  # the run waited for the server and went on
        assert run.returncode == 0, output[-3000:]
        assert statuses(store) == ["FINISHED"]
    else:
        said = " ".join(output.split())
        assert run.returncode == 2 and "Traceback" not in said, output[-3000:]
        assert f"the tracking server {server.url} stopped answering" in said

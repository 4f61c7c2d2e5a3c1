"""A results folder on a read-only or full file system: refused before work, or the command stops with the store
named and nothing lost or duplicated (issue 32, item 7). Each test mounts a small tmpfs of its own (root only)."""

import contextlib
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import TINY


@contextlib.contextmanager
def tmpfs(path, size_kib: int, options: str = ""):
    """A tmpfs of `size_kib` mounted at `path` for the block, unmounted (by its path) after it."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k{options}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): this test needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def run_task(tmp_path, results, **changes):
    body = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "faults", **changes}
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(body))
    env = {**os.environ, "FEDBENCH_RESULTS": str(results)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "fedbench", "run", str(task)], capture_output=True, text=True, env=env, timeout=600
    )


def test_a_read_only_results_folder_is_refused_before_any_run(tmp_path):
    with tmpfs(tmp_path / "mount", 1024, ",ro"):
        done = run_task(tmp_path, tmp_path / "mount" / "results")
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in said
    assert "FEDBENCH_RESULTS" in said and "Read-only file system" in said
    assert "runs, backend" not in said  # refused before the task started


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_stops_the_command_naming_the_store_and_a_second_try_duplicates_nothing(
    tmp_path, migrated_store
):
    from fedbench.tracking.leaderboard import read_runs

    room = migrated_store.stat().st_size // 1024 + 1024 + 256  # the store, the 1 MiB free-space probe, a little
    with tmpfs(tmp_path / "mount", room) as mount:
        results = mount / "results"
        results.mkdir()
        (results / "mlflow.db").write_bytes(migrated_store.read_bytes())
        full = run_task(tmp_path, results, rounds=600, seeds=[0, 1])  # 15 metrics a round: about 1 MiB
        said = " ".join((full.stdout + full.stderr).split())  # the console wraps long lines
        assert full.returncode == 2 and "Traceback" not in said, said[-3000:]
        assert f"the tracking store sqlite:///{results}/mlflow.db cannot be written (the disk is full)" in said
        assert "[2/2]" not in said  # it stopped instead of failing the next run the same way
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        again = run_task(tmp_path, results, rounds=600, seeds=[0, 1])
        assert again.returncode == 0, again.stderr[-3000:]
        (tmp_path / "after.db").write_bytes((results / "mlflow.db").read_bytes())  # read outside: the mount must go
    runs = read_runs("faults", f"sqlite:///{tmp_path / 'after.db'}")
    finished = runs[runs["status"] == "FINISHED"]
    assert len(finished) == 2 and finished["run_hash"].is_unique

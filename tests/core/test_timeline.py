"""The start-up timeline bench/cli_overhead.py reads: marks in the order a run reaches them, none when unset."""

import json
import os

import yaml

from tests.conftest import TINY

RUN_PHASES = [
    "cli_entered",
    "task_loaded",
    "tracking_ready",
    "run_started",
    "dataset_loaded",
    "scenario_built",
    "worker_loading",
    "worker_warm",  # the worker's own marks: its load began, its warm-up ended
    "workers_loaded",
    "job_start",
    "first_step",
    "round_end",
    "round_end",
    "run_end",
]


def run_tiny_task(tmp_path) -> int:
    from fedbench.cli import main

    path = tmp_path / "task.yaml"
    path.write_text(
        yaml.safe_dump({**{k: v for k, v in TINY.items() if k != "task"}, "name": "timeline", "seeds": [0]})
    )
    return main(["run", str(path), "--backend", "serial"])


def test_a_serial_run_marks_its_phases_in_order_with_one_job_start(tmp_path, mlflow_store, monkeypatch):
    timeline = tmp_path / "timeline.jsonl"
    monkeypatch.setenv("FEDBENCH_TIMELINE", str(timeline))
    monkeypatch.setattr("fedbench.core.timeline._marked_once", set())  # a fresh process's first job
    assert run_tiny_task(tmp_path) == 0
    marks = [json.loads(line) for line in timeline.read_text().splitlines()]
    jobs = [m for m in marks if m["phase"] == "job"]
    assert [m["phase"] for m in marks if m["phase"] != "job"] == RUN_PHASES  # one job_start, one first_step
    times = [m["t"] for m in marks]
    assert times == sorted(times)
    assert {m["pid"] for m in marks} == {os.getpid()}  # serial: every job runs in this process
    # every job marks its end with its kind and seconds: 4 clients x 2 rounds of fit and of evaluate jobs, then
    # the test-time clients after the last round
    assert sorted({m["kind"] for m in jobs}) == ["evaluate", "fit", "test"]
    assert [sum(m["kind"] == kind for m in jobs) for kind in ("fit", "evaluate")] == [8, 8]
    assert all(
        0 < m["cpu_s"] and 0 < m["seconds"] and isinstance(m["page_faults"], int) and m["page_faults"] >= 0
        for m in jobs
    )


def test_no_timeline_file_is_written_when_unset(tmp_path, mlflow_store, monkeypatch):
    monkeypatch.delenv("FEDBENCH_TIMELINE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run_tiny_task(tmp_path) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "task.yaml"]

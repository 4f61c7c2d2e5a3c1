"""A paper suite's smoke profile end to end, as a user runs it: `fedbench sweep --profile smoke`, then
`fedbench report` beside the published numbers (003's shift-mitigation suite: 6 tiny digits runs)."""

import os
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.ray


def fedbench(*args, results):
    env = {**os.environ, "FEDBENCH_RESULTS": str(results), "FEDBENCH_CACHE": str(results / "cache")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "fedbench.cli", *args], capture_output=True, text=True, env=env, timeout=900
    )


def test_the_smoke_profile_of_a_suite_sweeps_and_its_report_renders(isolated_results, mlflow_store):
    sweep = fedbench("sweep", "tasks/shift_mitigation.yaml", "--profile", "smoke", results=isolated_results)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert "task shift_mitigation-smoke: sweeping 6 trials" in sweep.stdout

    report = fedbench("report", "tasks/shift_mitigation.yaml", "--profile", "smoke", results=isolated_results)
    assert report.returncode == 0, report.stdout + report.stderr[-3000:]
    folder = isolated_results / "reports" / "shift_mitigation-smoke"
    text = (folder / "report.md").read_text()
    # the published tables are named as left out (their cells name the paper's datasets: not in this smoke task),
    # and the smoke runs themselves are there, each configuration with its one seed
    assert "Tables it runs no cell of, left out: " in text and "Ours only" in text
    assert text.count("(n=1)") == 6
    pngs = list(folder.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5_000 for p in pngs)

    client = MlflowClient(f"sqlite:///{mlflow_store}")
    experiment = client.get_experiment_by_name("shift_mitigation-smoke")
    children = client.search_runs([experiment.experiment_id], "tags.mlflow.parentRunId != ''")
    assert len(children) == 6 and {r.info.status for r in children} == {"FINISHED"}
    parent = children[0].data.tags["mlflow.parentRunId"]
    assert "report/report.md" in {a.path for a in client.list_artifacts(parent, "report")}

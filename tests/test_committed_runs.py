"""The bundles of finished runs committed under bench/results/runs/ (`fedbench bundle`): each is one a store takes,
and each of its runs is a RunSpec its task's profile still expands to, so that a change to a RunSpec's fields (its
run hash) cannot leave a committed sweep's runs orphaned, to be trained again by `sweep --skip-finished` or
missing from the report they were run for."""

from pathlib import Path

import pytest

from fedbench.api import as_task, keyword_overrides
from fedbench.tracking.run_bundle import read_bundle
from fedbench.tracking.store import RUN_HASH
from fedbench.tracking.tags import SWEEP_TAG

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = sorted((ROOT / "bench" / "results" / "runs").glob("*.tar.xz"))


def test_there_are_committed_bundles_to_check():
    assert BUNDLES, "bench/results/runs/ holds no bundle: this file checks nothing"


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_a_committed_bundle_reads_and_its_runs_are_its_profiles(path, tmp_path):
    runs = read_bundle(path, tmp_path)
    experiment = path.name.removesuffix(".tar.xz")
    name, _, profile = experiment.rpartition("-")
    task = as_task(ROOT / "tasks" / f"{name}.yaml", keyword_overrides({"profile": profile}))
    assert task.name == experiment and {run["experiment"] for run in runs} == {experiment}
    planned = {spec.run_hash for spec in task.expand()}
    trials = [run for run in runs if SWEEP_TAG not in run["tags"]]
    assert trials and all(run["status"] == "FINISHED" for run in trials)
    orphaned = sorted(run["run_name"] for run in trials if run["params"][RUN_HASH] not in planned)
    assert not orphaned, f"{path.name}: runs no longer in {name}'s {profile} profile: {orphaned}"
    assert len({run["params"][RUN_HASH] for run in trials}) == len(trials)  # each configuration once

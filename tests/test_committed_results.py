"""Every committed result still describes what today's code computes: the run hashes, scenario keys and scenario
fingerprints its provenance file records are recomputed from the recorded RunSpecs, without training
(bench/provenance.py). A failure names the result and the command to re-run."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import tiny_spec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_provenance", ROOT / "bench" / "provenance.py")
provenance = sys.modules["bench_provenance"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(provenance)
FILES = sorted(provenance.PROVENANCE.glob("*.json"))


def needs_real_data(path: Path) -> bool:
    datasets = {run["spec"]["dataset"]["name"] for run in json.loads(path.read_text())["runs"]}
    return bool(datasets & {"mnist", "fmnist"}) and not os.environ.get("FEDBENCH_DATA")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_committed_result_still_matches_the_code(path):
    if needs_real_data(path):
        pytest.skip("its runs read MNIST: point FEDBENCH_DATA at the datasets (CI does)")
    saved = json.loads(path.read_text())
    problems = provenance.check(path)
    assert not problems, (
        f"bench/results/{saved['result']} (made at {saved['commit']}) no longer matches the code; "
        f"re-run `{saved['command']}`:\n" + "\n".join(problems)
    )


def test_the_check_names_a_run_whose_data_or_configuration_changed(tmp_path):
    spec = tiny_spec(rounds=2)
    path = provenance.record("tiny.md", "python bench/tiny.py", [spec], commit="abc1234", folder=tmp_path)
    assert provenance.check(path) == []
    saved = json.loads(path.read_text())
    assert "data_root" not in saved["runs"][0]["spec"]["dataset"]  # no machine path in a committed file
    stale = tmp_path / "stale.json"
    then = saved["runs"][0]
    drew_other_data = {**then, "fingerprint": "0" * 16}  # as if the generator had drawn other samples
    read_otherwise = {**then, "run_hash": "0" * 10}  # as if a field now meant something else
    stale.write_text(json.dumps({**saved, "runs": [drew_other_data, read_otherwise]}))
    problems = provenance.check(stale)
    assert len(problems) == 2 and "scenario 0000000000000000 then" in problems[0]
    assert "run hash 0000000000 then" in problems[1]

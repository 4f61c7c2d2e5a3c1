"""Every committed result still describes what today's code computes: the run hashes, scenario keys, scenario
fingerprints and behaviour fingerprints (a few rounds of each configuration on a tiny stand-in) its provenance file
records are recomputed from the recorded RunSpecs (bench/provenance.py). A failure names the result and the command
to re-run; a result marked stale (being re-run) must be stale and say so on its first line."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from fedbench.config.task import resolve_run
from tests.conftest import TINY, tiny_spec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_provenance", ROOT / "bench" / "provenance.py")
provenance = sys.modules["bench_provenance"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(provenance)
FILES = sorted(provenance.PROVENANCE.glob("*.json"))


def needs_real_data(path: Path) -> bool:
    datasets = {run["spec"]["dataset"]["name"] for run in json.loads(path.read_text())["runs"]}
    return bool(datasets & {"mnist", "fmnist"}) and not os.environ.get("FEDBENCH_DATA")


@pytest.mark.slow  # a few rounds of each method configuration behind a result: a minute or so in all
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_committed_result_still_matches_the_code(path):
    if needs_real_data(path):
        pytest.skip("its runs read MNIST: point FEDBENCH_DATA at the datasets (CI does)")
    saved = json.loads(path.read_text())
    problems = provenance.check(path, every_probe=False)  # `python bench/provenance.py --check FILE` probes all
    if provenance.stale_mark(path):
        assert problems, f"{path.name} is marked stale but matches today's code: drop its `stale` mark and banner"
        banner = (provenance.RESULTS / saved["result"]).read_text().splitlines()[0]
        assert banner.startswith(provenance.STALE_BANNER), f"bench/results/{saved['result']} does not say it is stale"
        return
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
    computed_otherwise = {**then, "behaviour_numbers": scaled(then["behaviour_numbers"], 1.01)}  # a method changed
    digest_only = {k: v for k, v in then.items() if k != "behaviour_numbers"}  # a record from before numbers
    digest_only["behaviour"] = "0" * 16
    runs = [drew_other_data, read_otherwise, computed_otherwise, digest_only]
    stale.write_text(json.dumps({**saved, "runs": runs}))
    problems = provenance.check(stale)
    assert len(problems) == 4 and "scenario 0000000000000000 then" in problems[0]
    assert "run hash 0000000000 then" in problems[1]
    assert "behaviour numbers moved beyond 0.001" in problems[2]
    assert "behaviour 0000000000000000 then" in problems[3]


def scaled(numbers, factor: float):
    """`numbers` (a behaviour's) with every float multiplied by `factor`."""
    if isinstance(numbers, float):
        return numbers * factor
    if isinstance(numbers, list):
        return [scaled(n, factor) for n in numbers]
    if isinstance(numbers, dict):
        return {k: scaled(v, factor) for k, v in numbers.items()}
    return numbers


def test_a_behaviour_is_the_same_codes_within_the_spread_of_another_cpu(tmp_path):
    """The same code's float32 numbers differ in their last bits from one CPU to another (AVX-512 against AVX2:
    training losses 1e-8 apart), which changes a digest: the numbers are compared within BEHAVIOUR_RTOL instead,
    and a move of a percent, a test sample's worth of accuracy, is still caught."""
    path = provenance.record("tiny.md", "python bench/tiny.py", [tiny_spec(rounds=2)], folder=tmp_path)
    saved = json.loads(path.read_text())
    then = saved["runs"][0]
    assert then["behaviour_numbers"][0] == "FINISHED" and len(then["behaviour_numbers"][2]) == 2  # two rounds
    other_cpu = {**then, "behaviour": "f" * 16, "behaviour_numbers": scaled(then["behaviour_numbers"], 1 + 2e-8)}
    path.write_text(json.dumps({**saved, "runs": [other_cpu]}))
    assert provenance.check(path) == []
    changed = {**other_cpu, "behaviour_numbers": scaled(then["behaviour_numbers"], 1 + 1e-2)}
    path.write_text(json.dumps({**saved, "runs": [changed]}))
    assert "behaviour numbers moved" in provenance.check(path)[0]


def test_the_behaviour_fingerprint_sees_a_change_to_a_method_that_leaves_its_runspec_alone(monkeypatch):
    """Issue 42, item 6: the Oracle's one-round-late cluster models (its RunSpec unchanged) are flagged."""
    from fedbench.algorithms.oracle import Oracle

    spec = resolve_run(
        {
            **TINY,
            "algorithm": "oracle",
            "scenario": {"preset": "feroma/label_skew/medium", "num_clients": 4, "drift_every": 1},
            "dataset": {"name": "synthetic_images", "train_samples": 1200, "test_samples": 200},
            "model": "lenet5",
            "test_time": "known",
        }
    )
    today, metrics, _ = provenance.behaviour(spec)
    assert today == provenance.behaviour(spec)[0] and not today.startswith("unprobeable")
    monkeypatch.setattr(Oracle, "round_describe_payloads", lambda self, round, state, sampled: {})  # told late
    assert provenance.behaviour(spec, metrics)[0] != today


def test_a_metric_added_later_leaves_the_behaviour_and_a_changed_one_does_not(tmp_path, monkeypatch):
    """A result records the metrics its behaviour digests: a new round metric (issue 43's acc_drifted, say) does not
    make every committed result stale, while changing one it digested still does."""
    from fedbench.runtime import federation

    path = provenance.record("tiny.md", "python bench/tiny.py", [tiny_spec(rounds=2)], folder=tmp_path)
    digested = json.loads(path.read_text())["runs"][0]["behaviour_metrics"]
    assert "acc_local_mean" in digested and all(m.startswith(provenance.BEHAVIOUR_KEYS) for m in digested)
    drift_metrics = federation.round_drift_metrics
    monkeypatch.setattr(
        federation, "round_drift_metrics", lambda table, round: {**drift_metrics(table, round), "acc_added": 0.5}
    )
    assert provenance.check(path) == []
    monkeypatch.setattr(
        federation, "round_drift_metrics", lambda table, round: {**drift_metrics(table, round), "acc_local_mean": 0.5}
    )
    assert "the code computes other numbers" in provenance.check(path)[0]

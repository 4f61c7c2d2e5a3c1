"""The search's searcher on its own (Tune and Ray aside): references first, every sample on every seed scored by the
mean, and no configuration trained twice (issue 33, items 1, 2 and 6)."""

import optuna
import pytest
import yaml
from ray.tune.search import Searcher

from fedbench.config import load_task
from fedbench.tuning import load_search_space, make_plan
from fedbench.tuning.seed_averaged_search import SeedAveragedSearch
from tests.conftest import TINY

METRIC = "final.acc_local_mean"


def plan_of(tmp_path, mus, num_samples, seeds=(0, 1)):
    task = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "searched", "seeds": list(seeds)}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    space = {"name": "mu", "space": {"algorithm": {"fedprox": {"mu": {"categorical": list(mus)}}, "fedavg": {}}}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    return make_plan(load_task(tmp_path / "task.yaml"), load_search_space(tmp_path / "space.yaml"), num_samples, METRIC)


def searcher(plan, recorded=None):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    return SeedAveragedSearch(plan, study, recorded or {}, say=lambda text: None)


def drain(search, score=lambda config: 0.5) -> list[dict]:
    """Run the searcher as Tune would, one trial at a time, each scored by `score`; the configs it handed out."""
    handed = []
    while (config := search.suggest(f"t{len(handed)}")) not in (None, Searcher.FINISHED):
        handed.append(config)
        search.on_trial_complete(f"t{len(handed) - 1}", {METRIC: score(config)})
    return handed


def test_references_run_once_per_seed_and_each_sample_on_every_seed_scored_by_the_mean(tmp_path):
    plan = plan_of(tmp_path, [0.01, 0.1, 1.0], num_samples=2)
    search = searcher(plan)
    handed = drain(search, score=lambda config: 0.6 + 0.2 * config["seed"])  # seed 0: 0.6, seed 1: 0.8
    assert handed[:2] == [{"algorithm.name": "fedavg", "seed": 0}, {"algorithm.name": "fedavg", "seed": 1}]
    samples = handed[2:]
    assert all(c["algorithm.name"] == "fedprox" for c in samples)  # the reference is never sampled
    assert sorted(c["seed"] for c in samples) == [0, 0, 1, 1]  # two samples, each on both seeds
    assert [t.value for t in search.study.trials] == [pytest.approx(0.7)] * 2  # the mean over the seeds
    assert search.study.user_attrs["reference:fedavg"] == pytest.approx(0.7)  # the plots' reference line
    assert search.finished


def test_a_configuration_sampled_again_is_not_trained_again(tmp_path):
    """With one value to sample, TPE proposes it three times: one configuration, trained once on each seed."""
    plan = plan_of(tmp_path, [0.01], num_samples=3)
    search = searcher(plan)
    for reference in ("a", "b"):  # fedavg's seeds first
        assert search.suggest(reference)["algorithm.name"] == "fedavg"
        search.on_trial_complete(reference, {METRIC: 0.5})
    first, second = search.suggest("c"), search.suggest("d")  # the one configuration's two seeds
    assert {first["seed"], second["seed"]} == {0, 1} and first["algorithm.mu"] == second["algorithm.mu"] == 0.01
    assert search.suggest("e") is None  # proposals 2 and 3 joined the first: nothing new to run, not finished
    assert search.proposed == 3
    search.on_trial_complete("c", {METRIC: 0.4})
    search.on_trial_complete("d", {METRIC: 0.6})
    assert [t.value for t in search.study.trials] == [pytest.approx(0.5)] * 3 and search.sent == 4
    assert search.suggest("f") == Searcher.FINISHED and search.finished


def test_runs_finished_in_the_store_answer_the_sampler_without_a_trial(tmp_path):
    plan = plan_of(tmp_path, [0.01], num_samples=2)
    spec_of = plan.spec_of
    recorded = {
        spec_of({"algorithm.name": "fedprox", "algorithm.mu": 0.01, "seed": s}).run_hash: 0.3 + s for s in (0, 1)
    }
    recorded[spec_of({"algorithm.name": "fedavg", "seed": 0}).run_hash] = 0.2  # the reference's first seed ran too
    search = searcher(plan, recorded)
    handed = drain(search)
    assert handed == [{"algorithm.name": "fedavg", "seed": 1}]  # only what the store lacks
    assert search.reused == 2  # both proposals, answered from the store
    assert [t.value for t in search.study.trials] == [pytest.approx(0.8)] * 2 and search.finished


def test_a_seed_that_fails_fails_the_configuration(tmp_path):
    plan = plan_of(tmp_path, [0.01, 1.0], num_samples=1)
    search = searcher(plan)
    drain(search, score=lambda config: float("nan") if config.get("seed") == 1 else 0.9)
    [trial] = search.study.trials
    assert trial.state == optuna.trial.TrialState.FAIL


def test_a_resumed_search_finishes_the_proposals_an_interrupted_attempt_left_open(tmp_path):
    plan = plan_of(tmp_path, [0.01], num_samples=1)
    first = searcher(plan)
    drain(first)  # references
    study = first.study
    open_trial = study.ask()
    sample = plan.space.sample(open_trial)  # asked, then the sweep was interrupted before any of its seeds ran
    spec_of = plan.spec_of
    recorded = {spec_of({**sample, "seed": 0}).run_hash: 0.4}  # seed 0 had finished
    recorded.update({spec_of({"algorithm.name": "fedavg", "seed": s}).run_hash: 0.1 for s in (0, 1)})  # references
    again = SeedAveragedSearch(plan, study, recorded, say=lambda text: None)
    handed = drain(again, score=lambda config: 0.6)
    assert handed == [{**sample, "seed": 1}]  # only the missing seed
    assert study.trials[-1].value == pytest.approx(0.5) and again.finished

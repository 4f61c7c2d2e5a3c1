"""A run's per-client rows say which distribution each client held and the drift stage, from the scenario."""

import numpy as np

from fedbench.data import load_dataset
from fedbench.runtime import run_spec
from fedbench.runtime.per_client import PerClientRecorder
from fedbench.scenarios import build_scenario
from tests.conftest import tiny_spec

DRIFT = {"partition": "dirichlet", "alpha": 0.5, "num_clients": 4, "drift_every": 1}


def test_every_row_carries_the_distribution_and_stage_the_scenario_gave_the_client_that_round():
    spec = tiny_spec(rounds=3, scenario=DRIFT)
    table = run_spec(spec).per_client
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    truth = scenario.distribution_ids(spec.rounds)  # [round - 1, client]
    assert len(table["round"]) == 3 * 4
    assert list(table["distribution"]) == [
        truth[r - 1, c] for r, c in zip(table["round"], table["client"], strict=True)
    ]
    assert list(table["stage"]) == [scenario.stage_of(r) for r in table["round"]]
    assert len(set(table["stage"])) == 3  # drift every round: a stage per round


def test_a_checkpoint_from_before_the_columns_resumes_with_them_unknown():
    old = {
        "round": np.array([1, 1], dtype=np.int32),
        "client": np.array([0, 1], dtype=np.int32),
        "acc_local": np.array([0.5, 0.6]),
        "test_samples": np.array([10, 10]),
        "train_samples": np.array([40, 40]),
        "train_loss": np.array([1.0, 1.1]),
    }
    table = PerClientRecorder.from_table(old, reported=("drift_score",)).table()
    assert list(table["distribution"]) == [-1, -1] and list(table["stage"]) == [-1, -1]
    assert np.isnan(table["drift_score"]).all() and list(table["acc_local"]) == [0.5, 0.6]

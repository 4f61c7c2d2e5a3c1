"""Ground truth fenced off: only a method that declares `ReadsGroundTruth` is told a client's distribution id.

Permuting the scenario's distribution ids (the same data, other names) leaves every other method's whole history
bit-identical, so neither `RoundContext.distribution_id` nor any other channel tells a method the truth. A drift
detector written here reads the id as a careless one would (to seed its shuffling): behind the fence it sees -1
and the test passes; without the fence its history changes with the names and the test fails.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from fedbench.algorithms.capabilities import ReadsGroundTruth
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.registry import ALGORITHMS
from fedbench.runtime import federation, run_spec
from fedbench.scenarios import Scenario
from tests.algorithms.test_contract import CHANGES
from tests.conftest import tiny_spec

DRIFTING = {  # label banks that change every round: the ids name real drifts
    "dataset": {"name": "synthetic_images", "size": 12, "train_samples": 600, "test_samples": 100},
    "scenario": {"partition": "class_bank", "banks": 4, "num_clients": 4, "drift_every": 1},
}
LEAKY = f"{__name__}:CarelessDetector"


class CarelessDetector(FedAvg):
    """FedAvg whose client seeds its shuffling with the distribution id it is told: a detector that reads the
    ground truth by accident."""

    def client_update(self, payload, state, data, ctx):
        told = dataclasses.replace(ctx, seed=ctx.seed + 1000 * max(ctx.distribution_id, 0))
        return super().client_update(payload, state, data, told)


def drift_spec(name: str):
    """3 rounds, label banks drifting every round, 3 of 4 clients sampled (all 4 for CFL, which compares all of a
    cluster's clients, and FeSEM, whose first round seeds a center per distribution)."""
    change = CHANGES.get(name, {})
    every = name in ("cfl", "fesem")
    algorithm = {**change.get("algorithm", {"name": name}), "client_fraction": 1.0 if every else 0.75}
    return tiny_spec(**{**DRIFTING, **change, "rounds": 3, "eval_clients": "sampled", "algorithm": algorithm})


def renamed(scenario: Scenario) -> Scenario:
    """The same scenario with every distribution id moved one along (the last to 0), test clients' too."""
    count = max(len(scenario.distributions), int(scenario.distribution_ids(len(scenario.round_stage) or 1).max()) + 1)
    count = max(count, *(t.view.distribution_id + 1 for t in scenario.test_clients))

    def moved(view):
        return dataclasses.replace(view, distribution_id=(view.distribution_id + 1) % count)

    stages = tuple(tuple(moved(v) for v in stage) for stage in scenario.stages)
    tests = tuple(dataclasses.replace(t, view=moved(t.view)) for t in scenario.test_clients)
    names = tuple(np.roll(np.array(scenario.distributions, dtype=object), 1)) if scenario.distributions else ()
    return dataclasses.replace(scenario, stages=stages, test_clients=tests, distributions=names)


def digest(result) -> str:
    """The run's status and whole per-round history but its timings, as bench/metrics_hash.py hashes a run."""
    history = [{k: v for k, v in sorted(record.items()) if not k.startswith("time_")} for record in result.history]
    return hashlib.sha256(json.dumps([result.status, result.reason, history], sort_keys=True).encode()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("name", [*(n for n in ALGORITHMS.names() if n != "oracle"), LEAKY])
def test_renaming_the_distributions_changes_nothing_for_a_method_that_does_not_read_them(name, monkeypatch):
    assert not issubclass(ALGORITHMS.get(name), ReadsGroundTruth)
    spec = drift_spec(name)
    plain = run_spec(spec)
    assert plain.status == "FINISHED", plain.reason
    built = federation.build_scenario

    def build_renamed(*args, **kwargs):
        scenario = built(*args, **kwargs)
        assert (renamed(scenario).distribution_ids(3) != scenario.distribution_ids(3)).any()
        return renamed(scenario)

    monkeypatch.setattr(federation, "build_scenario", build_renamed)
    assert digest(run_spec(spec)) == digest(plain)


def test_only_the_oracle_declares_that_it_reads_the_ground_truth():
    readers = [n for n in ALGORITHMS.names() if issubclass(ALGORITHMS.get(n), ReadsGroundTruth)]
    assert readers == ["oracle"]

"""FedBABU: during federated training the head stays bit-identical to its initialisation and never travels;
fine-tuning (the last `ft_rounds`) then changes it, on the clients' own copies, FedAvgFT-style."""

from __future__ import annotations

import numpy as np
import pytest

import fedbench.algorithms.fedbabu as fedbabu
from fedbench.algorithms.base import SAMPLES, make_algorithm
from fedbench.algorithms.fedrep import HEAD
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, RoundContext
from fedbench.models.base import select_parts, without_parts
from fedbench.runtime import run_spec
from fedbench.training import average_weights, get_weights
from tests.algorithms.conftest import BODY_BYTES, COUNT_BYTES, HEAD_BYTES
from tests.conftest import tiny_spec


@pytest.fixture
def trained(monkeypatch):
    """The weights each call of the loop left (in call order), through the module's `train_local`."""
    after = []
    real = fedbabu.train_local

    def spy(model, data, ctx, hooks):
        metrics = real(model, data, ctx, hooks)
        after.append(get_weights(model))
        return metrics

    monkeypatch.setattr(fedbabu, "train_local", spy)
    return after


def algorithm(rounds: int | None, **config):
    # a spec long enough for any ft_rounds here (check_run refuses ft_rounds >= rounds); the schedule's R is below
    spec = tiny_spec(
        algorithm={"name": "fedbabu", **config}, scenario={"partition": "iid", "num_clients": 3}, rounds=1000
    )
    alg = make_algorithm(spec, (1, 8, 8), 10)
    alg.rounds = rounds  # what make_algorithm sets from RunSpec.rounds
    return alg


def context(cid: int, round: int) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )


def play(alg, clients, round, state, client_states):
    """One round: configure, every client trains, aggregate; returns (downlinks, results, new state)."""
    downlinks = alg.configure(round, state, [0, 1, 2])
    results = []
    for cid, data in enumerate(clients):
        uplink, client_states[cid], metrics = alg.client_update(
            downlinks[cid], client_states[cid], data, context(cid, round)
        )
        results.append(ClientResult(cid, uplink, metrics))
    return downlinks, results, alg.aggregate(round, state, results)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def heads(weights: dict) -> dict:
    return select_parts(weights, HEAD)


def bodies(weights: dict) -> dict:
    return without_parts(weights, HEAD)


@pytest.mark.parametrize("ft_part", ["head", "full"])
def test_the_head_is_its_initialisation_until_fine_tuning_and_changes_after(clients, trained, ft_part):
    alg = algorithm(rounds=4, ft_rounds=2, ft_part=ft_part)
    initial = get_weights(alg.builder.initial(alg.seed))
    state, client_states = alg.init_state(), [alg.ClientState() for _ in range(3)]
    for round in (1, 2):  # federated training: bodies train and travel, the head never moves
        downlinks, results, new_state = play(alg, clients, round, state, client_states)
        assert all(d is state.global_model and not heads(d.weights) for d in downlinks.values())
        for cid, result in enumerate(results):
            assert set(result.uplink.sections) == {"weights", SAMPLES} and not heads(result.uplink.weights)
            assert result.uplink.nbytes == BODY_BYTES + COUNT_BYTES
            assert same(result.uplink.weights, bodies(trained[cid - 3]))
            assert same(heads(trained[cid - 3]), heads(initial))
            assert not same(bodies(trained[cid - 3]), bodies(get_weights(alg.model_with(state.global_model.weights))))
        counts = [d.num_train for d in clients]
        assert same(new_state.global_model.weights, average_weights([r.uplink.weights for r in results], counts))
        state = new_state
    assert same(heads(get_weights(alg.model_with(state.global_model.weights))), heads(initial))
    body = state.global_model

    downlinks, results, state = play(alg, clients, 3, state, client_states)  # first fine-tuning round
    assert all(d is body for d in downlinks.values()) and state.global_model is body  # no more averaging
    for cid, result in enumerate(results):
        personal = result.uplink.weights
        assert result.uplink.nbytes == BODY_BYTES + HEAD_BYTES and same(state.personal[cid].weights, personal)
        assert not same(heads(personal), heads(initial))
        assert same(bodies(personal), body.weights) == (ft_part == "head")
    fine_tuned = [state.personal[cid].weights for cid in range(3)]
    downlinks, results, state = play(alg, clients, 4, state, client_states)
    assert all(not d.sections for d in downlinks.values())  # clients continue from their own models
    assert all(not same(heads(r.uplink.weights), heads(fine_tuned[r.client_id])) for r in results)
    payloads = alg.evaluation_payloads(state, [0, 1, 2])
    assert all(payloads[cid] is state.personal[cid] for cid in range(3))


def test_weights_without_a_head_are_completed_with_the_initial_head_and_a_head_is_kept(clients):
    alg = algorithm(rounds=None)
    initial = get_weights(alg.builder.initial(alg.seed))
    other = {k: v + 1.0 for k, v in initial.items()}
    assert same(get_weights(alg.model_with(bodies(other))), {**heads(initial), **bodies(other)})
    assert same(get_weights(alg.model_with(other)), other)


def test_whole_run_meters_bodies_then_fine_tuned_models_and_votes():
    result = run_spec(tiny_spec(algorithm={"name": "fedbabu", "ft_rounds": 1}, rounds=3))
    assert result.status == "FINISHED", result.reason
    up = [record[M.COMM_UP_BYTES] for record in result.history]  # 4 clients, all sampled
    down = [record[M.COMM_DOWN_BYTES] for record in result.history]
    assert up == [4 * (BODY_BYTES + COUNT_BYTES)] * 2 + [4 * (BODY_BYTES + HEAD_BYTES)]
    assert down == [4 * BODY_BYTES] * 3
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0


def test_configs():
    config = algorithm(rounds=None).config
    assert (config.ft_rounds, config.ft_part) == (200, "head")
    for field, value in (("ft_part", "body"), ("ft_rounds", -1)):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "fedbabu", field: value})
        assert err.value.field == f"algorithm.{field}"


def test_a_fine_tuning_phase_covering_the_whole_run_is_refused_at_load():
    """The default 200 rounds of fine-tuning are 004's, out of 800: a shorter run must set ft_rounds."""
    with pytest.raises(ConfigError) as err:
        tiny_spec(algorithm="fedbabu", rounds=200)
    assert err.value.field == "algorithm.ft_rounds" and "fewer than the run's rounds (200)" in str(err.value)
    assert tiny_spec(algorithm="fedbabu", rounds=201).algorithm.kwargs["ft_rounds"] == 200

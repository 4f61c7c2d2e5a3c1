"""FedAvgFT and FedProxFT: aggregation stops for the last `ft_rounds` rounds; then clients fine-tune their own
copies, upload them, and the server stores them per client (for local evaluation and the majority vote)."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.algorithms.base import SAMPLES, make_algorithm
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, Payload, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import average_weights
from tests.conftest import tiny_spec


def algorithm(name: str, rounds: int | None, **config):
    # a spec long enough for any ft_rounds here (check_run refuses ft_rounds >= rounds); the schedule's R is below
    spec = tiny_spec(algorithm={"name": name, **config}, scenario={"partition": "iid", "num_clients": 3}, rounds=1000)
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
        job = context(cid, round)
        uplink, client_states[cid], metrics = alg.client_update(downlinks[cid], client_states[cid], data, job)
        results.append(ClientResult(cid, uplink, metrics))
    return downlinks, results, alg.aggregate(round, state, results)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_schedule_counts_back_from_the_last_round():
    alg = algorithm("fedavg_ft", rounds=5, ft_rounds=2)
    assert [alg.fine_tuning(r) for r in range(1, 6)] == [False, False, False, True, True]
    assert not any(algorithm("fedavg_ft", rounds=None, ft_rounds=2).fine_tuning(r) for r in range(1, 6))
    assert not any(algorithm("fedavg_ft", rounds=5, ft_rounds=0).fine_tuning(r) for r in range(1, 6))


def test_after_the_stop_round_models_diverge_and_the_server_no_longer_averages(clients):
    alg = algorithm("fedavg_ft", rounds=4, ft_rounds=2)
    state, client_states = alg.init_state(), [alg.ClientState() for _ in range(3)]
    _, results, state = play(alg, clients, 1, state, client_states)
    counts = [int(r.uplink[SAMPLES]["n"][0]) for r in results]
    expected = average_weights([r.uplink.weights for r in results], counts)
    assert same(state.global_model.weights, expected) and state.personal == {}
    frozen = state.global_model

    downlinks, results, state = play(alg, clients, 3, state, client_states)  # first fine-tuning round
    assert all(d is frozen for d in downlinks.values())
    assert state.global_model is frozen  # no averaging
    models = [state.personal[cid] for cid in range(3)]
    assert all(same(models[cid].weights, results[cid].uplink.weights) for cid in range(3))
    assert not same(models[0].weights, models[1].weights) and not same(models[1].weights, models[2].weights)
    assert SAMPLES not in models[0]

    downlinks, results, state = play(alg, clients, 4, state, client_states)
    assert all(not d.sections for d in downlinks.values())  # clients continue from their own models
    assert state.global_model is frozen
    assert all(not same(state.personal[cid].weights, models[cid].weights) for cid in range(3))
    payloads = alg.evaluation_payloads(state, [0, 1, 2])
    assert all(payloads[cid] is state.personal[cid] for cid in range(3))


def test_fine_tuning_continues_from_the_client_state(clients):
    alg = algorithm("fedavg_ft", rounds=2, ft_rounds=2)
    state = alg.init_state()
    uplink, client_state, _ = alg.client_update(state.global_model, alg.ClientState(), clients[0], context(0, 1))
    assert same(client_state.model, uplink.weights)
    from_state, _, _ = alg.client_update(Payload(), client_state, clients[0], context(0, 2))
    from_global, _, _ = alg.client_update(state.global_model, alg.ClientState(), clients[0], context(0, 2))
    assert not same(from_state.weights, from_global.weights)


def test_fedprox_ft_is_fedprox_before_the_stop_and_plain_fine_tuning_after(clients):
    def first_uplink(name, round, **config):
        alg = algorithm(name, rounds=2, ft_rounds=1, **config)
        return alg.client_update(alg.init_state().global_model, alg.ClientState(), clients[1], context(1, round))[
            0
        ].weights

    assert same(first_uplink("fedprox_ft", 1, mu=0.0), first_uplink("fedavg_ft", 1))
    assert not same(first_uplink("fedprox_ft", 1, mu=1.0), first_uplink("fedavg_ft", 1))
    assert same(first_uplink("fedprox_ft", 2, mu=1.0), first_uplink("fedavg_ft", 2))


def test_configs():
    config = algorithm("fedprox_ft", rounds=None, mu=0.5, ft_rounds=7).config
    assert (config.mu, config.ft_rounds) == (0.5, 7)
    assert tiny_spec(algorithm={"name": "fedprox_ft", "ft_rounds": 1}).algorithm.kwargs["mu"] == 0.01
    bad = (("fedavg_ft", "ft_rounds", -1), ("fedprox_ft", "ft_rounds", -1), ("fedprox_ft", "mu", -1.0))
    for name, field, value in bad:
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": name, field: value})
        assert err.value.field == f"algorithm.{field}"


@pytest.mark.parametrize("name", ["fedavg_ft", "fedprox_ft", "fedbabu"])
def test_a_run_that_would_fine_tune_in_every_round_is_refused_at_load(name):
    for ft_rounds in (3, 4):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": name, "ft_rounds": ft_rounds}, rounds=3)
        assert err.value.field == "algorithm.ft_rounds" and err.value.value == ft_rounds
        assert "fewer than the run's rounds (3)" in str(err.value)
    assert tiny_spec(algorithm={"name": name, "ft_rounds": 2}, rounds=3).algorithm.kwargs["ft_rounds"] == 2
    with pytest.raises(ConfigError, match="algorithm.ft_rounds"):  # the defaults (004's, of 800) on a short run
        tiny_spec(algorithm=name, rounds=40)


@pytest.mark.parametrize("name", ["fedavg_ft", "fedprox_ft"])
def test_whole_run_fine_tunes_the_last_round_and_votes(name):
    result = run_spec(tiny_spec(algorithm={"name": name, "ft_rounds": 1}, rounds=3))
    assert result.status == "FINISHED", result.reason
    up = [rec[M.COMM_UP_BYTES] for rec in result.history]
    assert up[2] < up[1]  # the fine-tuning round's uplink has no sample counts, only the models
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_SYSTEM] <= 1.0

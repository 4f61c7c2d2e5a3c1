"""FedRep: only the representation travels, each round trains the head then the representation (each with the
other frozen), and a client's head lives in its state from round to round."""

from __future__ import annotations

import numpy as np
import pytest

import fedbench.algorithms.fedrep as fedrep
from fedbench.algorithms.base import SAMPLES, make_algorithm
from fedbench.algorithms.capabilities import TestTimeAssignment
from fedbench.algorithms.fedrep import HEAD, FedRepClientState
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, RoundContext
from fedbench.models.base import select_parts, without_parts
from fedbench.runtime import run_spec
from fedbench.training import average_weights, evaluate, get_weights
from tests.algorithms.conftest import BODY_BYTES, COUNT_BYTES, HEAD_BYTES
from tests.conftest import tiny_spec


def algorithm(**config):
    spec = tiny_spec(algorithm={"name": "fedrep", **config}, scenario={"partition": "iid", "num_clients": 3})
    return make_algorithm(spec, (1, 8, 8), 10)


def context(cid: int, round: int = 1, local_steps: int | None = None) -> RoundContext:
    return RoundContext(
        round=round,
        client_id=cid,
        seed=0,
        local_epochs=1,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
        local_steps=local_steps,
    )


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def heads(weights: dict) -> dict:
    return select_parts(weights, HEAD)


def bodies(weights: dict) -> dict:
    return without_parts(weights, HEAD)


@pytest.fixture
def phases(monkeypatch):
    """Every call of the loop FedRep makes: (its job, the model's weights before, after)."""
    calls = []
    real = fedrep.train_local

    def spy(model, data, ctx, hooks):
        before = get_weights(model)
        metrics = real(model, data, ctx, hooks)
        calls.append((ctx, before, get_weights(model)))
        return metrics

    monkeypatch.setattr(fedrep, "train_local", spy)
    return calls


def test_only_the_representation_and_the_sample_count_travel(clients):
    alg = algorithm(head_epochs=1)
    state = alg.init_state()
    down = alg.configure(1, state, [0, 1, 2])
    assert all(d is state.global_model for d in down.values())  # one payload, shipped once per client
    assert state.global_model.nbytes == BODY_BYTES and not heads(state.global_model.weights)
    uplink, _, _ = alg.client_update(down[0], FedRepClientState(), clients[0], context(0))
    assert set(uplink.sections) == {"weights", SAMPLES}
    assert not heads(uplink.weights) and uplink.weights.keys() == state.global_model.weights.keys()
    assert uplink.nbytes == BODY_BYTES + COUNT_BYTES
    assert all(not heads(p.weights) for p in alg.evaluation_payloads(state, [0, 1, 2]).values())


def test_whole_run_meters_bodies_only_votes_with_each_clients_head_and_has_no_test_time_answer():
    result = run_spec(tiny_spec(algorithm={"name": "fedrep", "head_epochs": 2}, rounds=2))
    assert result.status == "FINISHED", result.reason
    for record in result.history:  # 4 clients, all sampled
        assert record[M.COMM_UP_BYTES] == 4 * (BODY_BYTES + COUNT_BYTES)
        assert record[M.COMM_DOWN_BYTES] == 4 * BODY_BYTES
    # the vote: after the last round each client uploads its whole model once, as evaluation traffic
    assert M.ACC_SYSTEM in result.history[-1]
    assert [r[M.COMM_EVAL_UP_BYTES] for r in result.history] == [0.0, 4 * HEAD_BYTES]  # the heads: bodies are known
    assert 0.3 < result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0
    assert not isinstance(algorithm(), TestTimeAssignment)  # a test-time client has no head: not evaluated


def test_the_head_trains_first_with_the_body_frozen_then_the_body_with_the_head_frozen(clients, phases):
    alg = algorithm(head_epochs=3, body_epochs=2)
    state = alg.init_state()
    _, _, metrics = alg.client_update(state.global_model, FedRepClientState(), clients[1], context(1))
    (head_job, start, after_head), (body_job, before_body, end) = phases
    assert (head_job.local_epochs, body_job.local_epochs) == (3, 2)
    assert same(bodies(start), state.global_model.weights)
    assert same(bodies(after_head), bodies(start)) and not same(heads(after_head), heads(start))
    assert same(before_body, after_head)
    assert same(heads(end), heads(after_head)) and not same(bodies(end), bodies(after_head))
    batches = -(-clients[1].num_train // 32)
    assert metrics[M.TRAIN_STEPS] == (3 + 2) * batches


def test_a_run_counting_steps_gives_half_of_them_rounded_down_to_the_head(clients, phases):
    alg = algorithm()
    start = alg.init_state().global_model
    _, _, metrics = alg.client_update(start, FedRepClientState(), clients[0], context(0, local_steps=7))
    assert [job.local_steps for job, _, _ in phases] == [3, 4]
    assert metrics[M.TRAIN_STEPS] == 7
    assert [job.local_steps for job in alg.phases(context(0, local_steps=2))] == [1, 1]
    assert [job.local_steps for job in alg.phases(context(0, local_steps=1))] == [0, 1]  # no step for the head:
    with pytest.warns(UserWarning, match="local_steps: 1 with FedRep"):  # the task loader says so
        tiny_spec(algorithm="fedrep", local_steps=1)


def test_a_clients_head_persists_in_its_state_and_starts_from_the_initial_head(clients, phases):
    alg = algorithm(head_epochs=1)
    state, client_states = alg.init_state(), [FedRepClientState() for _ in range(3)]
    initial_head = heads(get_weights(alg.builder.initial(alg.seed)))
    for round in (1, 2):
        down = alg.configure(round, state, [0, 1, 2])
        results = []
        for cid, data in enumerate(clients):
            uplink, client_states[cid], _ = alg.client_update(down[cid], client_states[cid], data, context(cid, round))
            results.append(ClientResult(cid, uplink))
        if round == 1:
            first_heads = [client_states[cid].head for cid in range(3)]
            assert all(same(heads(phases[2 * cid][1]), initial_head) for cid in range(3))
            assert all(same(first_heads[cid], heads(phases[2 * cid + 1][2])) for cid in range(3))
            assert not same(first_heads[0], first_heads[1])
        state = alg.aggregate(round, state, results)
        counts = [d.num_train for d in clients]
        assert same(state.global_model.weights, average_weights([r.uplink.weights for r in results], counts))
    round_two = phases[6:]
    for cid in range(3):  # round 2 starts from the client's own head and the averaged representation
        _, start, _ = round_two[2 * cid]
        assert same(heads(start), first_heads[cid])
        assert not same(heads(start), initial_head)


def test_evaluation_puts_the_clients_own_head_on_the_received_representation(clients):
    alg = algorithm(head_epochs=1)
    body = alg.init_state().global_model
    _, trained, _ = alg.client_update(body, FedRepClientState(), clients[2], context(2))
    own = evaluate(alg.model_with({**body.weights, **trained.head}), clients[2])
    assert alg.client_evaluate(body, trained, clients[2], context(2)) == own
    never_sampled = evaluate(alg.model_with(get_weights(alg.builder.initial(alg.seed))), clients[2])
    assert alg.client_evaluate(body, FedRepClientState(), clients[2], context(2)) == never_sampled
    assert own != never_sampled


def test_configs():
    assert (algorithm().config.head_epochs, algorithm().config.body_epochs) == (10, 1)
    for field in ("head_epochs", "body_epochs"):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "fedrep", field: 0})
        assert err.value.field == f"algorithm.{field}"

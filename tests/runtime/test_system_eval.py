"""System accuracy: bundling personal models, majority vote, routing, and the whole-run numbers."""

import numpy as np
import pytest

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult, Payload
from fedbench.runtime import run_spec
from fedbench.runtime.system_eval import bundle, system_counts, system_metrics, unbundle
from tests.conftest import tiny_spec


def test_a_bundle_ships_each_distinct_model_once_and_unbundles_to_the_same_arrays():
    shared = Payload({"w": np.arange(3.0)}, {"extra": {"e": np.ones(2)}})
    own = Payload({"w": np.full(3, 7.0)})
    flat = bundle({0: shared, 1: own, 2: shared})
    models, owners = unbundle(flat)
    assert owners.tolist() == [0, 1, 0]
    assert len(models) == 2
    np.testing.assert_array_equal(models[0].weights["w"], shared.weights["w"])
    np.testing.assert_array_equal(models[0]["extra"]["e"], shared["extra"]["e"])
    np.testing.assert_array_equal(models[1].weights["w"], own.weights["w"])
    assert set(models[1].sections) == set(own.sections)


def test_an_array_shared_by_several_models_travels_once():
    backbone = np.arange(1000.0)  # FedDRM: one shared part, a target layer of its own per client
    payloads = {j: Payload({"backbone": backbone, "head": np.full(2, float(j))}) for j in range(3)}
    flat = bundle(payloads)
    assert flat.nbytes < backbone.nbytes + 200
    models, _ = unbundle(flat)
    for j, model in enumerate(models):
        np.testing.assert_array_equal(model.weights["backbone"], backbone)
        np.testing.assert_array_equal(model.weights["head"], np.full(2, float(j)))
    # only the same object is shared
    equal_but_distinct = bundle({0: Payload({"w": np.zeros(3)}), 1: Payload({"w": np.zeros(3)})})
    assert equal_but_distinct.nbytes == 2 * np.zeros(3).nbytes + 2 * 8  # both arrays travel, and 2 owner ids


def test_indexed_models_travel_in_a_bundle_and_an_array_they_share_travels_once():
    """FedRC's system payloads carry K models each; every client's holds the same K server models."""
    cluster = [Payload({"w": np.arange(100.0) + k}) for k in range(2)]
    payloads = {
        j: Payload(extras={"omega": {"o": np.full(2, float(j))}}, models=dict(enumerate(cluster))) for j in range(3)
    }
    flat = bundle(payloads)
    assert flat.nbytes == 2 * cluster[0].nbytes + 3 * 16 + 2 * 2 * 8 + 3 * 8  # models once, references, owners
    models, owners = unbundle(flat)
    assert owners.tolist() == [0, 1, 2]
    for j, model in enumerate(models):
        assert all(model.models[k].weights["w"] is models[0].models[k].weights["w"] for k in range(2))
        np.testing.assert_array_equal(model.models[1].weights["w"], cluster[1].weights["w"])
        np.testing.assert_array_equal(model["omega"]["o"], np.full(2, float(j)))


def test_majority_vote_counts_every_owner_and_breaks_ties_to_the_smallest_class():
    labels = np.array([2, 1, 0])
    # three clients, two distinct models: client 0 and 2 own model 0, client 1 owns model 1
    outputs = [{"pred": np.array([2, 3, 1])}, {"pred": np.array([0, 1, 0])}]
    counts = system_counts(outputs, np.array([0, 1, 0]), labels, client_id=0, num_classes=4)
    # sample 0: votes 2,0,2 -> 2 (right); sample 1: 3,1,3 -> 3 (wrong); sample 2: 1,0,1 -> 1 (wrong)
    assert counts == {"system_samples": 3.0, "system_correct": 1.0}
    tie = system_counts([{"pred": np.array([3])}, {"pred": np.array([1])}], np.array([0, 1]), np.array([1]), 0, 4)
    assert tie["system_correct"] == 1.0  # one vote each for 3 and 1: the smaller class wins


def test_a_router_sends_each_sample_to_its_best_scoring_client_whose_model_answers():
    labels = np.array([0, 1, 1])
    route = np.array([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])  # samples 0 and 2 go to client 0, sample 1 to client 1
    outputs = [{"pred": np.array([0, 0, 0]), "route": route}, {"pred": np.array([1, 1, 1]), "route": route}]
    counts = system_counts(outputs, np.array([0, 1]), labels, client_id=0, num_classes=2)
    assert counts == {"system_samples": 3.0, "routed_home": 2.0, "system_correct": 2.0}
    record = system_metrics(
        [ClientResult(0, Payload(), counts), ClientResult(1, Payload(), {**counts, "routed_home": 0.0})]
    )
    assert record == {M.ACC_SYSTEM: 4 / 6, M.ACC_ROUTING: 2 / 6}


def test_fedavg_system_accuracy_is_its_global_models_pooled_accuracy():
    result = run_spec(tiny_spec(rounds=2))
    final = result.history[-1]
    # one shared model: the vote is that model's answer, so pooled accuracy = test-size-weighted local accuracy
    assert abs(final[M.ACC_SYSTEM] - final[M.ACC_LOCAL_WEIGHTED]) < 1e-9
    assert M.ACC_SYSTEM not in result.history[0]  # computed after the last round only


def test_methods_whose_models_never_reach_the_server_have_no_system_accuracy():
    result = run_spec(tiny_spec(algorithm="local", rounds=1))
    assert result.status == "FINISHED", result.reason
    assert M.ACC_SYSTEM not in result.history[-1]


def test_ensemble_metrics_average_probabilities_by_owner_weight():
    from fedbench.runtime.system_eval import ensemble_bundle, ensemble_metrics, unbundle

    a, b = Payload({"w": np.zeros(1)}), Payload({"w": np.ones(1)})
    flat = ensemble_bundle({0: a, 1: b}, {0: 1.0, 1: 3.0})
    models, _ = unbundle(flat)
    assert len(models) == 2
    p_a = np.array([[0.9, 0.1], [0.9, 0.1]])  # model a says class 0
    p_b = np.array([[0.3, 0.7], [0.4, 0.6]])  # model b, three times as heavy, says class 1
    # mixture: row 0 = 0.25 * (0.9, 0.1) + 0.75 * (0.3, 0.7) = (0.45, 0.55); row 1 = (0.525, 0.475)
    out = ensemble_metrics([p_a, p_b], flat, np.array([1, 1]))
    assert out[M.ACCURACY] == 0.5
    assert out[M.LOSS] == pytest.approx(-(np.log(0.55) + np.log(0.475)) / 2)


def test_merged_adds_a_clients_arrays_to_the_servers_part():
    body = Payload({"body.w": np.zeros(2)}, {"mixture": {"pi": np.ones(2)}})
    whole = body.merged(Payload({"head.w": np.ones(1)}))
    assert sorted(whole.weights) == ["body.w", "head.w"] and whole["mixture"]["pi"] is body["mixture"]["pi"]
    assert body.merged(Payload({"body.w": np.ones(2)})).weights["body.w"].sum() == 2  # the client's array wins


def test_one_shared_model_takes_system_accuracy_from_the_last_evaluation_the_same_number_as_the_pass(monkeypatch):
    """FedAvg: every client answers with the global model it was evaluated with, so the vote is its prediction and
    the pooled accuracy is the last evaluation's; forcing the predict pass gives the same number, bit for bit."""
    from fedbench.runtime import evaluation

    spec = tiny_spec(
        rounds=2, scenario={"partition": "dirichlet", "alpha": 0.5, "num_clients": 5, "test_clients": {"mode": "none"}}
    )
    derived = run_spec(spec)
    monkeypatch.setattr(evaluation, "answered_by_evaluation", lambda *args: False)
    passed = run_spec(spec)
    assert derived.status == passed.status == "FINISHED", (derived.reason, passed.reason)
    assert derived.history[-1][M.ACC_SYSTEM] == passed.history[-1][M.ACC_SYSTEM]
    last = derived.history[-1]
    assert last[M.ACC_SYSTEM] == pytest.approx(last[M.ACC_LOCAL_WEIGHTED], abs=1e-12)  # pooled = test-size weighted
    # the pass downloads a bundle to each of the 5 clients: the one distinct model and 5 int64 owner ids; taken
    # from the evaluation, nothing travels for it
    model = derived.history[0][M.COMM_EVAL_DOWN_BYTES] / 5
    assert last[M.COMM_EVAL_DOWN_BYTES] == 5 * model
    assert passed.history[-1][M.COMM_EVAL_DOWN_BYTES] == 5 * model + 5 * (model + 5 * 8)


def test_differing_personal_models_still_vote_in_a_pass(monkeypatch):
    """IFCA's cluster models differ between clients: the vote is not one model's answer, so its pass runs."""
    from fedbench.runtime import evaluation

    calls = []
    real = evaluation.answered_by_evaluation
    monkeypatch.setattr(evaluation, "answered_by_evaluation", lambda *args: calls.append(real(*args)) or calls[-1])
    result = run_spec(
        tiny_spec(
            algorithm={"name": "ifca", "clusters": 2},
            scenario={"partition": "dirichlet", "alpha": 0.5, "num_clients": 4, "test_clients": {"mode": "none"}},
        )
    )
    assert result.status == "FINISHED", result.reason
    assert calls == [False] and M.ACC_SYSTEM in result.history[-1]


def test_system_accuracy_off_skips_the_pass_and_the_metric_and_keeps_the_run_hash_of_the_default():
    base = tiny_spec(algorithm={"name": "ifca", "clusters": 2})
    off = tiny_spec(algorithm={"name": "ifca", "clusters": 2}, system_accuracy=False)
    assert tiny_spec().run_hash == "6a04d8d664"  # the hash this spec had before the field existed
    assert tiny_spec(system_accuracy=True).run_hash == tiny_spec().run_hash != tiny_spec(system_accuracy=False).run_hash
    on, skipped = run_spec(base), run_spec(off)
    assert M.ACC_SYSTEM in on.history[-1] and M.ACC_SYSTEM not in skipped.history[-1]
    assert skipped.history[-1][M.COMM_EVAL_DOWN_BYTES] < on.history[-1][M.COMM_EVAL_DOWN_BYTES]
    assert [r[M.ACC_LOCAL_MEAN] for r in skipped.history] == [r[M.ACC_LOCAL_MEAN] for r in on.history]


def test_system_accuracy_must_be_a_boolean():
    from fedbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="system_accuracy"):
        tiny_spec(system_accuracy="yes")

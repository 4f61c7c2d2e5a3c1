"""Test-time clients: describe -> assign -> evaluate after the last round, and association accuracy."""

import numpy as np
import pytest

from fedbench.algorithms import Assignment
from fedbench.algorithms.capabilities import TrainedOn
from fedbench.algorithms.fedavg import FedAvg
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.registry import ALGORITHMS
from fedbench.core.types import Payload
from fedbench.runtime import run_spec
from tests.conftest import TINY, tiny_spec


class Matchmaker(FedAvg):
    """Matches test client t to training client t: the right answer under test-client mode "own"."""

    def describe_payloads(self, state, test_clients):
        return {tid: Payload(extras={"ask": {"x": np.zeros(1)}}) for tid in test_clients}

    def client_describe(self, payload, data, ctx):
        # its training rows are only its labelled samples (2 per class here): a failed check fails the run
        assert 0 < data.num_train <= 2 * ctx.num_classes < data.num_test
        return Payload(extras={"id": {"id": np.array([ctx.client_id])}})

    def assign(self, state, descriptions):
        matched = {tid: TrainedOn(int(d["id"]["id"][0])) for tid, d in descriptions.items()}  # "own": the right one
        return Assignment({tid: state.global_model for tid in descriptions}, matched)


def own_spec():
    scenario = {**TINY["scenario"], "test_clients": {"mode": "own", "labelled_per_class": 2}}
    return tiny_spec(algorithm="matchmaker", rounds=1, scenario=scenario)


def test_test_clients_describe_themselves_and_are_scored_against_the_ground_truth(monkeypatch):
    monkeypatch.setitem(ALGORITHMS._entries, "matchmaker", Matchmaker)
    result = run_spec(own_spec())
    assert result.status == "FINISHED", result.reason
    final = result.history[-1]
    # under mode "own" test client t holds training client t's distribution: matching t -> t is always right
    assert final[M.ACC_ASSOCIATION] == 1.0 and final[M.ACC_ASSOCIATION_KNOWN] == 1.0
    assert 0.0 <= final[M.ACC_TEST_TIME] <= 1.0
    assert result.final[M.FINAL_PREFIX + M.ACC_TEST_TIME] == final[M.ACC_TEST_TIME]


def test_wrong_matches_lower_association_accuracy(monkeypatch):
    class Shifted(Matchmaker):
        def assign(self, state, descriptions):
            out = super().assign(state, descriptions)
            return Assignment(out.payloads, {tid: TrainedOn((on.client + 1) % 4) for tid, on in out.matched.items()})

    monkeypatch.setitem(ALGORITHMS._entries, "matchmaker", Shifted)
    final = run_spec(own_spec()).history[-1]
    assert final[M.ACC_ASSOCIATION] < 1.0  # Dirichlet clients hold distinct distributions


def test_association_compares_the_distribution_a_model_was_trained_on_not_its_clients_current_one(monkeypatch):
    """Each test client holds its training client's last distribution ("own") but is given that client's model
    from round 1, two drift stages earlier: the match is right only where round 1's distribution was the same."""
    from fedbench.config.task import resolve_run
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario

    class Stale(Matchmaker):
        trained_round = 1

        def client_describe(self, payload, data, ctx):  # a test client of 2 classes holds few samples here
            return Payload(extras={"id": {"id": np.array([ctx.client_id])}})

        def assign(self, state, descriptions):
            out = super().assign(state, descriptions)
            return Assignment(
                out.payloads, {tid: TrainedOn(on.client, self.trained_round) for tid, on in out.matched.items()}
            )

    monkeypatch.setitem(ALGORITHMS._entries, "matchmaker", Stale)
    spec = resolve_run(
        {
            **TINY,
            "algorithm": "matchmaker",
            "rounds": 3,
            "dataset": {"name": "synthetic_images", "train_samples": 1200, "test_samples": 400},
            "model": "lenet5",
            "scenario": {
                "preset": "feroma/label_skew/high",
                "num_clients": 4,
                "drift_every": 1,
                "test_clients": {"mode": "own", "labelled_per_class": 2},
            },
        }
    )
    dataset = load_dataset(spec.dataset.name, None, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    same = [scenario.view(1, t).distribution_id == scenario.test_clients[t].view.distribution_id for t in range(4)]
    assert not all(same)  # some clients drifted away from their round-1 distribution: the case that tells
    result = run_spec(spec)
    assert result.status == "FINISHED", result.reason
    assert result.history[-1][M.ACC_ASSOCIATION] == np.mean(same)
    Stale.trained_round = None  # the same clients' final models: every match right
    assert run_spec(spec).history[-1][M.ACC_ASSOCIATION] == 1.0


def test_without_test_clients_there_is_no_test_time_accuracy():
    scenario = {**TINY["scenario"], "test_clients": {"mode": "none"}}
    final = run_spec(tiny_spec(rounds=1, scenario=scenario)).history[-1]
    assert M.ACC_TEST_TIME not in final
    assert M.ACC_TEST_TIME in run_spec(tiny_spec(rounds=1)).history[-1]  # the default: FEROMA's test clients


class Ensembler(FedAvg):
    """Test clients get a size-weighted ensemble of `models` (built per test from the global model)."""

    models = staticmethod(lambda state: {0: state.global_model})
    sizes = {0: 1.0}

    def assign(self, state, descriptions):
        return Assignment.size_weighted(self.models(state), self.sizes, list(descriptions))


def test_an_ensemble_of_one_model_scores_as_that_model(monkeypatch):
    monkeypatch.setitem(ALGORITHMS._entries, "ensembler", Ensembler)
    single = run_spec(tiny_spec(rounds=1)).history[-1]
    ensemble = run_spec(tiny_spec(algorithm="ensembler", rounds=1)).history[-1]
    assert ensemble[M.ACC_TEST_TIME] == single[M.ACC_TEST_TIME]
    extra = ensemble[M.COMM_EVAL_DOWN_BYTES] - single[M.COMM_EVAL_DOWN_BYTES]
    assert extra > 0 and extra % 16 == 0  # each test client also gets the owner index and the weight (8 bytes each)


def always(label: int):
    """A model (as `Ensembler.models`) that predicts class `label` for every input: zero weights, and a head bias
    that puts all of the softmax's mass (1 in float64) on `label`."""

    def payload(weights):
        zero = {k: np.zeros_like(v) for k, v in weights.items()}
        zero["head.bias"][label] = 100.0
        return Payload(zero)

    return payload


def test_an_ensemble_weighs_its_models_by_size(monkeypatch):
    """Two models, one always answering 0 and one always 1: weighted 3 to 1 the ensemble answers as the heavier
    one alone, so swapping the weights swaps the result."""

    def run(sizes):
        models = staticmethod(lambda state: {k: always(k)(state.global_model.weights) for k in sizes})
        monkeypatch.setitem(
            ALGORITHMS._entries, "ensembler", type("Fixed", (Ensembler,), {"models": models, "sizes": sizes})
        )
        return run_spec(tiny_spec(algorithm="ensembler", rounds=1)).history[-1][M.ACC_TEST_TIME]

    zeros, ones = run({0: 1.0}), run({1: 1.0})  # the shares of 0s and of 1s among the test clients' samples
    assert zeros != ones  # else the test below could not tell the weights apart
    assert run({0: 3.0, 1: 1.0}) == zeros
    assert run({0: 1.0, 1: 3.0}) == ones


class Marked(FedAvg):
    """FedAvg whose personal models are marked with their owner: a model answers every sample with its owner's id
    (mod the number of classes), so a test client's accuracy says whose model it was given."""

    def system_payloads(self, state, clients):
        return {cid: Payload(state.global_model.weights, {"owner": {"id": np.array([cid])}}) for cid in clients}

    def client_predict(self, payload, state, data, ctx):
        return {M.PRED: np.full(data.num_test, int(payload["owner"]["id"][0]) % ctx.num_classes)}


def marked_run(monkeypatch, test_time: str):
    """A one-round run of `Marked` under `test_time`: its last round's record, its scenario and the dataset's labels."""
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario

    monkeypatch.setitem(ALGORITHMS._entries, "marked", Marked)
    spec = tiny_spec(algorithm="marked", rounds=1, test_time=test_time)
    dataset = load_dataset(spec.dataset.name, None, **spec.dataset.kwargs)
    labels = dataset.y.numpy() if hasattr(dataset.y, "numpy") else np.asarray(dataset.y)
    return run_spec(spec).history[-1], build_scenario(dataset, spec.scenario, spec.seed, spec.rounds), labels


def test_known_association_gives_each_test_client_the_model_of_the_client_whose_distribution_it_holds(monkeypatch):
    """002 App. E: baselines are scored under the (optimal) known association. Test client t holds the last
    distribution of training client origin(t) (a random one, the preset's FEROMA mode): under `test_time: known` it
    is given origin(t)'s personal model, which here answers origin(t) mod 10 for every sample."""
    final, scenario, labels = marked_run(monkeypatch, "known")
    expected = [np.mean(labels[c.view.test] == c.origin % 10) for c in scenario.test_clients]
    assert {c.origin for c in scenario.test_clients} != set(range(4))  # some hold another client's distribution
    assert final[M.ACC_TEST_TIME] == pytest.approx(np.mean(expected))
    assert final[M.ACC_ASSOCIATION] == 1.0  # known, by construction
    own = run_spec(tiny_spec(algorithm="marked", rounds=1)).history[-1]
    assert M.ACC_ASSOCIATION not in own  # its own rule (the global model) names no training client


def test_the_index_association_gives_test_client_i_training_client_is_model_whatever_it_holds(monkeypatch):
    """002's baseline code scores client i's test set with client i's own final model: under `test_time: index`
    test client t gets training client t's personal model (answering t mod 10), not origin(t)'s, and the
    association accuracy counts how often that client's last distribution is the one t holds."""
    final, scenario, labels = marked_run(monkeypatch, "index")
    expected = [np.mean(labels[c.view.test] == t % 10) for t, c in enumerate(scenario.test_clients)]
    same = [scenario.view(1, t).distribution_id == c.view.distribution_id for t, c in enumerate(scenario.test_clients)]
    assert not all(same)  # some test clients hold another distribution than their index's client
    assert final[M.ACC_TEST_TIME] == pytest.approx(np.mean(expected))
    assert final[M.ACC_ASSOCIATION] == pytest.approx(np.mean(same))
    assert (
        final[M.ACC_TEST_TIME]
        != run_spec(tiny_spec(algorithm="marked", rounds=1, test_time="known")).final[M.FINAL_PREFIX + M.ACC_TEST_TIME]
    )
    assert final[M.ACC_TEST_TIME_INDEX] == final[M.ACC_TEST_TIME]


def test_a_known_association_run_also_reads_the_same_index_association_without_metering_it(monkeypatch):
    """One run answers both protocols of 002 (issue 42): under `test_time: known`, `acc_test_time_index` is what the
    same run scored under `index` gives, while the known reading, the traffic and the compute stay the run's own."""
    known, _, _ = marked_run(monkeypatch, "known")
    index, _, _ = marked_run(monkeypatch, "index")
    assert known[M.ACC_TEST_TIME_INDEX] == pytest.approx(index[M.ACC_TEST_TIME])
    assert known[M.ACC_TEST_TIME_INDEX] != pytest.approx(known[M.ACC_TEST_TIME])
    assert known[M.COMM_EVAL_DOWN_BYTES] == index[M.COMM_EVAL_DOWN_BYTES]  # one model per test client, once


def unseen_run(test_time: str, unseen_rate: float) -> dict:
    """IFCA's last record, one round on label skew whose test clients hold unseen distributions at `unseen_rate`."""
    spec = resolve_run(
        {
            "task": "unseen",
            "dataset": {"name": "synthetic_images", "train_samples": 1200, "test_samples": 300},
            "model": "mlp",
            "algorithm": "ifca",
            "rounds": 1,
            "local_steps": 1,
            "test_time": test_time,
            "scenario": {
                "preset": "feroma/label_skew/medium",
                "num_clients": 6,
                "test_clients": {"unseen_rate": unseen_rate},
            },
        }
    )
    return run_spec(spec).history[-1]


@pytest.mark.parametrize("unseen_rate", [0.5, 1.0])
def test_the_same_index_reading_covers_test_clients_the_known_association_cannot_place(unseen_rate):
    """A test client holding a distribution no training client had gets the method's own rule under `known`; the
    same-index reading gives it its index's model as an `index` run does, also where no test client is placed."""
    known, index = unseen_run("known", unseen_rate), unseen_run("index", unseen_rate)
    assert known[M.ACC_TEST_TIME_INDEX] == index[M.ACC_TEST_TIME]


def test_the_same_index_reading_is_not_counted_as_the_runs_compute(monkeypatch):
    """Its jobs' seconds stay out of the run's client compute: with every known_test job reporting 1000 s, a known run
    counts them once per test client, as an index run does, though it ran the job twice for some."""
    from fedbench.core.types import ClientResult
    from fedbench.runtime.evaluation import KnownTest

    scored = KnownTest.run

    def slow(self, worker, round, client_id, payload, state):
        result = scored(self, worker, round, client_id, payload, state)
        return ClientResult(result.client_id, result.uplink, result.metrics, 1000.0)

    monkeypatch.setattr(KnownTest, "run", slow)
    known, index = unseen_run("known", 0.0), unseen_run("index", 0.0)
    assert known[M.ACC_TEST_TIME_INDEX] != known[M.ACC_TEST_TIME]  # some test clients were scored again
    assert abs(known[M.TIME_CLIENT_COMPUTE_S] - index[M.TIME_CLIENT_COMPUTE_S]) < 500


def test_apfl_equals_fedavg_at_test_time_under_its_own_rule_and_not_under_the_known_association():
    """APFL's shared model trains exactly as FedAvg's, and its own rule gives test clients that model; under the
    known association they get the personalised mixture of the client whose distribution they hold."""
    runs = {
        (name, protocol): run_spec(tiny_spec(algorithm=name, rounds=2, test_time=protocol)).final
        for name in ("fedavg", "apfl")
        for protocol in ("own", "known")
    }
    key = M.FINAL_PREFIX + M.ACC_TEST_TIME
    assert runs["apfl", "own"][key] == runs["fedavg", "own"][key] == runs["fedavg", "known"][key]
    assert runs["apfl", "known"][key] != runs["apfl", "own"][key]


def test_a_method_with_its_own_rule_keeps_it_under_the_known_association():
    key = M.FINAL_PREFIX + M.ACC_TEST_TIME
    assert (
        run_spec(tiny_spec(algorithm="oracle", rounds=2, test_time="known")).final[key]
        == run_spec(tiny_spec(algorithm="oracle", rounds=2)).final[key]
    )


def test_an_unknown_test_time_protocol_is_refused():
    from fedbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="^test_time: "):
        tiny_spec(test_time="ensemble")

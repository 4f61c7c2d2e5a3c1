"""FedAvg's aggregation as a fold over results streamed in client-id order: the numbers of the list average,
bit for bit, without the round holding every client's model."""

from dataclasses import dataclass

import numpy as np
import pytest

from fedbench.algorithms import make_algorithm
from fedbench.algorithms.base import GlobalState, UplinkAverage, average_uplinks, counted
from fedbench.algorithms.capabilities import StreamedAggregation
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.types import ClientResult, Payload
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.runtime.backends import make_backend
from fedbench.runtime.jobs import FIT
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import build_scenario
from fedbench.training import RunningAverage, average_weights
from tests.conftest import tiny_spec


def uplinks(counts, seed=0):
    """Results with float32 weights of very different magnitudes (where summation order shows) and an int buffer."""
    rng = np.random.default_rng(seed)
    return [
        ClientResult(
            cid,
            counted(
                {
                    "w": (rng.standard_normal((7, 5)) * 10.0 ** rng.integers(-6, 6, (7, 5))).astype(np.float32),
                    "b": rng.standard_normal(3).astype(np.float32),
                    "steps": np.array([cid], dtype=np.int64),
                },
                n,
            ),
        )
        for cid, n in enumerate(counts)
    ]


def test_the_running_average_is_the_list_average_bit_for_bit():
    results = uplinks([3, 1000, 17, 1, 250])
    listed = average_weights([r.uplink.weights for r in results], [3, 1000, 17, 1, 250])
    running = RunningAverage([3, 1000, 17, 1, 250])
    for r in results:
        running.add(r.uplink.weights)
    folded = running.result()
    assert list(folded) == list(listed)
    for name in listed:
        assert folded[name].dtype == listed[name].dtype
        np.testing.assert_array_equal(folded[name], listed[name])
    assert folded["steps"][0] == 0  # integer buffers: the first model's


@dataclass(frozen=True)
class WithRound(GlobalState):
    round: int = 0


def test_fedavgs_fold_is_its_aggregate_and_checks_each_clients_count():
    results = uplinks([40, 8, 23])
    fold = UplinkAverage(WithRound(Payload(), round=1), {0: 40, 1: 8, 2: 23})
    for r in results:
        fold.add(r)
    state = fold.finish()
    assert state.round == 1  # the rest of the state is kept
    for name, array in average_uplinks(results).items():
        np.testing.assert_array_equal(state.global_model.weights[name], array)
    with pytest.raises(RuntimeError, match="expected client 0 with 41 training samples, got client 0 with 40"):
        UplinkAverage(GlobalState(Payload()), {0: 41, 1: 8, 2: 23}).add(results[0])
    with pytest.raises(RuntimeError, match="expected client 0"):
        UplinkAverage(GlobalState(Payload()), {0: 40, 1: 8, 2: 23}).add(results[1])


@pytest.mark.parametrize(
    "algorithm,streams",
    [
        ("fedavg", True),
        ("fedprox", True),
        ("moon", True),  # FedAvg's aggregate: streamed
        ({"name": "fedavg_ft", "ft_rounds": 1}, False),
        ("fedadam", False),
        ("ifca", False),
        ("fedrc", False),  # their own: the list
    ],
)
def test_only_methods_that_aggregate_as_fedavg_stream(algorithm, streams):
    spec = tiny_spec(algorithm=algorithm)
    digits = load_dataset("digits")
    method = make_algorithm(spec, digits.input_shape, digits.num_classes, 2)
    assert (isinstance(method, StreamedAggregation) and method.streams()) == streams


def test_a_streamed_run_has_the_numbers_of_the_listed_run(monkeypatch):
    spec = tiny_spec(rounds=3, seed=3, algorithm={"name": "fedavg", "client_fraction": 0.75})
    streamed = Federation(spec, backend="serial").run()
    monkeypatch.setattr(
        FedAvg, "streams", classmethod(lambda cls: False)
    )  # the list path: `aggregate` gets every result
    listed = Federation(spec, backend="serial").run()
    assert streamed.status == listed.status == "FINISHED", (streamed.reason, listed.reason)

    def drop_times(history):
        return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in history]

    assert drop_times(streamed.history) == drop_times(listed.history)


@pytest.mark.parametrize("backend", ["serial", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_stream_hands_out_results_in_client_order_before_the_round_is_done(request, backend):
    """The first result comes while jobs are still to run, so a fold can drop each result before the next."""
    if backend == "ray":
        request.getfixturevalue("ray_session")
    spec = tiny_spec(scenario={"partition": "iid", "num_clients": 12}, resources={"backend": backend, "num_workers": 2})
    digits = load_dataset("digits")
    scenario = build_scenario(digits, spec.scenario, spec.seed, spec.rounds)
    method = make_algorithm(spec, scenario.input_shape, digits.num_classes)
    runner = make_backend(backend, digits, scenario, spec)
    try:
        store = StateStore()
        stream = runner.stream(FIT, 1, method.configure(1, method.init_state(), list(range(12))), store)
        first = next(stream)
        assert len(store) < 12  # not every job was even dispatched yet
        ids = [first.client_id, *(r.client_id for r in stream)]
        assert ids == list(range(12)) and len(store) == 12
    finally:
        runner.close()

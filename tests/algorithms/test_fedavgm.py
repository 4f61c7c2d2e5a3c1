"""FedAvgM: momentum 0 with server lr 1 is FedAvg bit for bit; momentum accumulates over rounds by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.algorithms.base import counted, make_algorithm
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.types import ClientResult, OptimizerSpec, RoundContext
from fedbench.runtime import run_spec
from fedbench.training import materialize
from tests.conftest import tiny_spec
from tests.scenarios.helpers import make


def algorithm(name: str, **config):
    return make_algorithm(tiny_spec(algorithm={"name": name, **config}), (1, 8, 8), 10)


def test_momentum_accumulates_over_identical_pseudo_gradients():
    """v1 = Delta, v2 = beta Delta + Delta: with the same Delta twice, w2 - w1 = (1 + beta) eta Delta."""
    alg = algorithm("fedavgm", momentum=0.5, server_lr=0.5)
    state = alg.initial_state({"w": np.array([1.0, 2.0])}, ["w"])
    path = []
    for round in (1, 2):
        w = state.global_model.weights["w"]
        state = alg.aggregate(round, state, [ClientResult(0, counted({"w": w + np.array([0.25, -0.5])}, 3))])
        path.append(state.global_model.weights["w"])
    # w1 = w0 + 0.5 * Delta = [1.125, 1.75];  w2 = w1 + (1 + 0.5) * 0.5 * Delta = [1.3125, 1.375]
    assert path[0].tolist() == [1.125, 1.75] and path[1].tolist() == [1.3125, 1.375]


def test_no_momentum_and_unit_rate_is_fedavg_even_where_w_plus_delta_rounds():
    """A weight that lands near 0 from far away: in float64, w + (average - w) is not the average, but FedAvgM's
    model still is."""
    alg = algorithm("fedavgm", momentum=0.0, server_lr=1.0)
    state = alg.initial_state({"w": np.array([1.0, 3.0, -0.5], np.float32)}, ["w"])
    average = np.array([1e-12, 3.0000002, 7e-13], np.float32)
    assert not np.array_equal((1.0 + (average[0] - np.float64(1.0))).astype(np.float32), average[0])
    new = alg.aggregate(1, state, [ClientResult(0, counted({"w": average}, 2))]).global_model.weights["w"]
    assert new.dtype == np.float32 and np.array_equal(new, average)


def test_no_momentum_and_unit_rate_aggregate_trained_models_exactly_as_fedavg():
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": 3}, dataset="digits")
    avg, avgm = algorithm("fedavg"), algorithm("fedavgm", momentum=0.0, server_lr=1.0)
    state, mstate = avg.init_state(), avgm.init_state()
    for round in (1, 2):
        results = []
        for cid in range(3):
            client = materialize(data, scenario.view(round, cid), scenario.input_shape)
            ctx = RoundContext(
                round=round,
                client_id=cid,
                seed=0,
                local_epochs=1,
                batch_size=32,
                optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
                num_classes=10,
            )
            results.append(ClientResult(cid, avg.client_update(state.global_model, avg.ClientState(), client, ctx)[0]))
        state, mstate = avg.aggregate(round, state, results), avgm.aggregate(round, mstate, results)
        expected, got = state.global_model.weights, mstate.global_model.weights
        assert expected.keys() == got.keys()
        assert all(got[k].dtype == expected[k].dtype and np.array_equal(got[k], expected[k]) for k in expected)


def test_no_momentum_and_unit_rate_is_fedavg_over_a_whole_run():
    """Every number a 2-round run reports (accuracies, losses, bytes), except timings, is FedAvg's."""
    runs = [run_spec(tiny_spec(algorithm=a, rounds=2)) for a in ("fedavg", {"name": "fedavgm", "momentum": 0.0})]
    assert all(r.status == "FINISHED" for r in runs), [r.reason for r in runs]

    def numbers(result):
        return [{k: v for k, v in h.items() if not k.startswith("time_")} for h in result.history]

    assert numbers(runs[0]) == numbers(runs[1])
    assert runs[0].final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] == runs[1].final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN]


def test_defaults_and_bad_configs():
    kwargs = tiny_spec(algorithm="fedavgm").algorithm.kwargs
    assert (kwargs["momentum"], kwargs["server_lr"]) == (0.9, 1.0)
    for field, value in (("momentum", 1.0), ("momentum", -0.5), ("server_lr", 0.0), ("server_lr", float("inf"))):
        with pytest.raises(ConfigError) as err:
            tiny_spec(algorithm={"name": "fedavgm", field: value})
        assert err.value.field == f"algorithm.{field}"

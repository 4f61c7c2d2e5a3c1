"""What the algorithm tests share: one torch thread, as a client job gets (with more on 2 busy cores these tests
take several times longer), three small digits clients, and the byte sizes of TINY's MLP on 8x8 digits."""

import pytest

from fedbench.runtime.worker import torch_job_scope
from fedbench.training import materialize
from tests.scenarios.helpers import make

BODY_BYTES = (64 * 32 + 32) * 4
"""The tiny MLP's representation (body) on 8x8 digits: Linear(64, 32), float32."""
HEAD_BYTES = (32 * 10 + 10) * 4
"""Its head: Linear(32, 10), float32."""
MODEL_BYTES = BODY_BYTES + HEAD_BYTES
COUNT_BYTES = 8
"""The sample count, one int64."""


@pytest.fixture(autouse=True)
def one_thread():
    with torch_job_scope(0, 1):
        yield


@pytest.fixture(scope="module")
def clients():
    """Three Dirichlet(0.5) clients of digits, as materialised on a worker in round 1."""
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": 3}, dataset="digits")
    return [materialize(data, scenario.view(1, c), scenario.input_shape) for c in range(3)]


def assert_rounds_equal_fedavgs(algorithm: dict, also: tuple[str, ...] = ()):
    """Run `algorithm` and FedAvg on TINY and assert that every round's accuracies, training loss and the metrics
    in `also` are equal exactly (a method in the limit where it is FedAvg); returns both results."""
    from fedbench.core import metrics as M
    from fedbench.runtime import run_spec
    from tests.conftest import tiny_spec

    ours, fedavg = run_spec(tiny_spec(algorithm=algorithm)), run_spec(tiny_spec(algorithm="fedavg"))
    assert ours.status == "FINISHED", ours.reason
    for a, b in zip(ours.history, fedavg.history, strict=True):
        same = [k for k in b if k.startswith("acc_") or k in (M.TRAIN_LOSS_MEAN, *also)]
        assert {k: a[k] for k in same} == {k: b[k] for k in same}
    return ours, fedavg


def client_setup(algorithm: dict, local_epochs: int):
    """(the algorithm on TINY, client 2 of four Dirichlet(0.5) digits clients, its round-1 context at lr 0.05,
    momentum 0.9): one client job's inputs, for tests that call a client half directly."""
    from fedbench.algorithms import make_algorithm
    from fedbench.core.runspec import OptimizerSpec
    from fedbench.core.types import RoundContext
    from tests.conftest import tiny_spec

    spec = tiny_spec(algorithm=algorithm)
    data, scenario = make({"partition": "dirichlet", "alpha": 0.5, "num_clients": 4}, dataset="digits")
    client = materialize(data, scenario.view(1, 2), scenario.input_shape)
    alg = make_algorithm(spec, scenario.input_shape, 10)
    ctx = RoundContext(
        round=1,
        client_id=2,
        seed=0,
        local_epochs=local_epochs,
        batch_size=32,
        optimizer=OptimizerSpec(lr=0.05, momentum=0.9),
        num_classes=10,
    )
    return alg, client, ctx

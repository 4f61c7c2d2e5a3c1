"""The batched backend's numeric contract: a vectorised pass trains every client of a FunctionalFit method as the
per-client path does, up to summation order (`WEIGHT_TOLERANCE`), on clients of unequal sizes, with transforms that
draw random numbers, under SGD with momentum and Adam with weight decay."""

import numpy as np
import pytest

from fedbench.algorithms.functional_fit import FunctionalFit
from fedbench.core.callbacks import NUMERICS_TAG
from fedbench.core.registry import ALGORITHMS
from fedbench.core.types import Payload
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.runtime.jobs import FIT
from fedbench.runtime.worker import ClientWorker
from fedbench.scenarios import build_scenario
from fedbench.training.functional import WEIGHT_TOLERANCE, functional_model_problem, weight_difference
from tests.conftest import tiny_spec

CAPABLE = [
    name
    for name in ALGORITHMS.names()
    if issubclass(ALGORITHMS.get(name), FunctionalFit) and ALGORITHMS.get(name).fits_functionally()
]

IMAGES = {  # LeNet-5 on images that drift, rotate, turn RGB and get per-batch noise drawn on the worker
    "dataset": {"name": "synthetic_images", "size": 28, "train_samples": 400, "test_samples": 100},
    "model": "lenet5",
    "scenario": {
        "partition": "class_bank",
        "banks": 3,
        "num_clients": 3,
        "drift_every": 1,
        "shifts": [{"name": "feature_bank", "rotations": 2, "colours": True}, {"name": "noise", "sigma": 0.3}],
    },
}
OPTIMIZERS = {
    "sgd momentum": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "adam, weight decay": {"name": "adam", "lr": 0.005, "weight_decay": 0.001},
}


def test_the_capable_methods_are_the_fedavg_family_local_and_the_oracle():
    assert set(CAPABLE) == {
        "fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "fedprox", "cfl", "fesem", "local", "oracle"
    }  # fmt: skip


def fits_both_ways(spec, round=2):
    """Every client's FIT of `round` from the run's initial weights, per client and in one vectorised pass."""
    dataset = load_dataset(spec.dataset.name, **spec.dataset.kwargs)
    worker = ClientWorker()
    worker.load(dataset, build_scenario(dataset, spec.scenario, spec.seed, spec.rounds), spec)
    assert worker.vectorises_fits()
    ids = list(range(spec.scenario.num_clients))
    args = (FIT, round, ids, [0] * len(ids), Payload(worker.algorithm.initial_weights()), *[None] * len(ids))
    return worker.jobs(*args), worker.fit_together(*args)


def trained_weights(results_and_states, client):
    """The weights a client's FIT trained: its uplink's, or (Local) its new state's."""
    result = results_and_states[0][client]
    return result.uplink.weights or results_and_states[1 + client].model


@pytest.mark.parametrize(
    "name, optimizer",
    [(name, OPTIMIZERS["sgd momentum"]) for name in CAPABLE]
    + [(name, OPTIMIZERS["adam, weight decay"]) for name in ("fedavg", "fedprox", "local")],
)
def test_a_vectorised_pass_trains_every_client_as_the_per_client_path(name, optimizer):
    spec = tiny_spec(algorithm={"name": "fedprox", "mu": 0.5} if name == "fedprox" else name, optimizer=optimizer)
    per_client, together = fits_both_ways(spec)
    steps = [r.metrics["train_steps"] for r in per_client[0]]
    assert len(set(steps)) > 1  # clients of unequal sizes: some run out of batches before the others
    for c, (one, many) in enumerate(zip(per_client[0], together[0], strict=True)):
        a, b = trained_weights(per_client, c), trained_weights(together, c)
        assert list(a) == list(b)
        assert weight_difference(a, b) <= WEIGHT_TOLERANCE
        assert many.metrics["train_steps"] == one.metrics["train_steps"]
        assert many.metrics["train_loss"] == pytest.approx(one.metrics["train_loss"], rel=1e-5)
        assert many.uplink.sections.keys() == one.uplink.sections.keys()


@pytest.mark.slow
def test_a_convolutional_model_on_transformed_noisy_images_trains_the_same_in_a_pass():
    per_client, together = fits_both_ways(tiny_spec(**IMAGES, optimizer=OPTIMIZERS["sgd momentum"]))
    for c in range(len(per_client[0])):
        a, b = trained_weights(per_client, c), trained_weights(together, c)
        assert weight_difference(a, b) <= WEIGHT_TOLERANCE


def test_models_whose_step_is_not_a_pure_function_of_the_weights_are_refused():
    from torch import nn

    assert functional_model_problem(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) is None
    assert "BatchNorm1d" in functional_model_problem(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    assert "Dropout" in functional_model_problem(nn.Sequential(nn.Dropout(0.1), nn.Linear(2, 2)))


@pytest.mark.ray
@pytest.mark.slow
def test_a_batched_run_has_the_same_numbers_on_any_number_of_workers(ray_session):
    def history(workers, per_pass=None):
        spec = tiny_spec(rounds=2, seed=3, resources={"backend": "batched", "num_workers": workers,
                                                      "clients_per_pass": per_pass})  # fmt: skip
        result = Federation(spec).run()
        assert result.status == "FINISHED", result.reason
        assert "clients per vectorised pass" in result.tags[NUMERICS_TAG]
        return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in result.history]

    assert history(1, 2) == history(2, 2)
    assert history(1) != [] and history(2) == history(1)


def test_auto_trains_clients_together_only_where_they_train_on_gpus(monkeypatch):
    from fedbench.runtime.backends import backend_kind
    from fedbench.runtime.backends.batched_actors import BatchedActors
    from fedbench.runtime.backends.ray_actors import RayActors

    monkeypatch.setattr(BatchedActors, "__call__", lambda self, *args: "batched")
    monkeypatch.setattr(RayActors, "__call__", lambda self, *args: "ray")
    auto = backend_kind("auto")
    assert auto.uses_ray and not auto.exact
    assert auto(None, None, tiny_spec(resources={"backend": "auto", "client_gpus": 0.5})) == "batched"
    assert auto(None, None, tiny_spec(resources={"backend": "auto"})) == "ray"


def test_parameters_the_forward_pass_never_reaches_stay_as_torch_optim_leaves_them():
    """FedDRM's network under FedAvg: its client head gets no gradient, so weight decay must not shrink it."""
    model = {"name": "feddrm_net", "backbone": "cnn", "hidden": 32, "num_clients": 4}
    optimizer = {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}
    per_client, together = fits_both_ways(tiny_spec(model=model, optimizer=optimizer))
    start = per_client[0][0].uplink.weights  # only to list the head's tensors
    head = [k for k in start if k.startswith("client_head")]
    assert head
    for c in range(len(per_client[0])):
        a, b = trained_weights(per_client, c), trained_weights(together, c)
        assert weight_difference(a, b) <= WEIGHT_TOLERANCE
        assert all(np.array_equal(a[k], b[k]) for k in head)

"""Contract: every registered algorithm runs 2 rounds on a tiny scenario on the serial backend, and every other
registered backend gives it the same history: bit for bit where the backend is `exact` (ray), within the numeric
contract otherwise (batched: `training.functional.RUN_TOLERANCE`; bytes exactly)."""

import functools

import pytest

from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.core.registry import ALGORITHMS, BACKENDS
from fedbench.core.runspec import RunSpec
from fedbench.runtime import run_spec
from fedbench.runtime.backends import backend_kind
from fedbench.runtime.session import run_specs
from fedbench.training.functional import RUN_TOLERANCE
from tests.conftest import tiny_spec

CHANGES = {
    "feddrm": {"model": {"name": "feddrm_net", "backbone": "cnn", "hidden": 32}},
    "scaffold": {"optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.0}},
    **{name: {"algorithm": {"name": name, "ft_rounds": 1}} for name in ("fedavg_ft", "fedprox_ft", "fedbabu")},
}
"""Algorithms that refuse TINY's setting: FedDRM needs a model with a client path, SCAFFOLD plain SGD, and the
fine-tuning methods fewer fine-tuning rounds than the run's (their defaults are 004's, out of 800 rounds)."""


def contract_spec(name: str, backend: str = "serial") -> RunSpec:
    return tiny_spec(**{"algorithm": name, "rounds": 2, **CHANGES.get(name, {}), "resources": {"backend": backend}})


@functools.cache
def serial_run(name: str) -> RunResult:
    """The algorithm's contract run on the serial backend, once per test process."""
    return run_spec(contract_spec(name))


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_runs_two_rounds(name):
    result = serial_run(name)
    assert result.status == "FINISHED", result.reason
    assert len(result.history) == 2
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0


def deterministic(history: list[dict]) -> list[dict]:
    """A history less its timings, which are the only numbers a backend may change."""
    return [{k: v for k, v in record.items() if not k.startswith("time_")} for record in history]


@functools.cache
def backend_runs(backend: str) -> dict[str, RunResult]:
    """Every algorithm's contract run on `backend`, as one task's runs (a backend of Ray actors starts its pool
    once)."""
    names = ALGORITHMS.names()
    return dict(zip(names, run_specs([contract_spec(n, backend) for n in names], lambda i, spec: []), strict=True))


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:resources.backend is batched")  # said of each method that trains one at a time
@pytest.mark.parametrize(
    "backend", [b for b in BACKENDS.names() if b not in ("serial", "auto")]
)  # auto: ray or batched
@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_backend_gives_every_algorithm_the_serial_history(ray_session, backend, name):
    result = backend_runs(backend)[name]
    assert result.status == "FINISHED", result.reason
    expected = deterministic(serial_run(name).history)
    if not backend_kind(backend).exact:
        expected = [{k: within_contract(k, v) for k, v in record.items()} for record in expected]
    assert deterministic(result.history) == expected


def within_contract(key: str, value: object) -> object:
    """What an inexact backend must give for the serial value of metric `key`: bytes exactly, accuracies within
    RUN_TOLERANCE, every other number (losses, a method's own: CFL's update norms) relatively so."""
    if key.startswith("comm_") or not isinstance(value, float):
        return value
    if key.startswith("acc_"):
        return pytest.approx(value, abs=RUN_TOLERANCE, nan_ok=True)
    return pytest.approx(value, rel=RUN_TOLERANCE, nan_ok=True)

"""Contract: every registered algorithm runs 2 rounds on a tiny scenario on the serial backend."""

import pytest

from fedbench.core import metrics as M
from fedbench.core.registry import ALGORITHMS
from fedbench.runtime import run_spec
from tests.conftest import tiny_spec

CHANGES = {
    "feddrm": {"model": {"name": "feddrm_net", "backbone": "cnn", "hidden": 32}},
    "scaffold": {"optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.0}},
    **{name: {"algorithm": {"name": name, "ft_rounds": 1}} for name in ("fedavg_ft", "fedprox_ft", "fedbabu")},
}
"""Algorithms that refuse TINY's setting: FedDRM needs a model with a client path, SCAFFOLD plain SGD, and the
fine-tuning methods fewer fine-tuning rounds than the run's (their defaults are 004's, out of 800 rounds)."""


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_runs_two_rounds(name):
    result = run_spec(tiny_spec(**{"algorithm": name, "rounds": 2, **CHANGES.get(name, {})}))
    assert result.status == "FINISHED", result.reason
    assert len(result.history) == 2
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0

"""Contract: every registered algorithm runs 2 rounds on a tiny scenario on the serial backend."""

import pytest

from fedbench.core import metrics as M
from fedbench.core.registry import ALGORITHMS
from fedbench.runtime import run_spec
from tests.conftest import tiny_spec


MODELS = {"feddrm": {"name": "feddrm_net", "backbone": "cnn", "hidden": 32}}
"""Algorithms that need a model with more than a classifier (FedDRM's client path); the rest use TINY's."""


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_runs_two_rounds(name):
    changes = {"model": MODELS[name]} if name in MODELS else {}
    result = run_spec(tiny_spec(algorithm=name, rounds=2, **changes))
    assert result.status == "FINISHED", result.reason
    assert len(result.history) == 2
    assert 0.0 <= result.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] <= 1.0

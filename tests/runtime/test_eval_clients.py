"""`eval_clients: sampled`: a round evaluates only its sampled clients (a large federation at partial participation
then costs what its sampled clients cost); the last round still evaluates every client."""

import pytest

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.runtime import run_spec
from tests.conftest import TINY, tiny_spec
from tests.runtime.test_federation import model_bytes

HALF = {"name": "fedavg", "client_fraction": 0.5}
NO_TEST_CLIENTS = {**TINY["scenario"], "test_clients": {"mode": "none"}}


def test_sampled_evaluation_evaluates_the_rounds_clients_then_every_client_at_the_end():
    every = run_spec(tiny_spec(rounds=3, algorithm=HALF, scenario=NO_TEST_CLIENTS))
    sampled = run_spec(tiny_spec(rounds=3, algorithm=HALF, scenario=NO_TEST_CLIENTS, eval_clients="sampled"))
    assert every.status == sampled.status == "FINISHED", (every.reason, sampled.reason)
    model = model_bytes(tiny_spec())
    assert [r[M.COMM_EVAL_DOWN_BYTES] for r in every.history[:-1]] == [4 * model] * 2
    assert [r[M.COMM_EVAL_DOWN_BYTES] for r in sampled.history[:-1]] == [2 * model] * 2  # 2 of the 4 clients
    # the same training, and the last round's evaluation (and so the final numbers) over every client
    assert [r[M.TRAIN_LOSS_MEAN] for r in sampled.history] == [r[M.TRAIN_LOSS_MEAN] for r in every.history]
    assert sampled.history[-1][M.COMM_EVAL_DOWN_BYTES] == every.history[-1][M.COMM_EVAL_DOWN_BYTES]
    assert sampled.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN] == every.final[M.FINAL_PREFIX + M.ACC_LOCAL_MEAN]


def test_eval_clients_changes_the_run_hash_only_when_set_away_from_all():
    assert tiny_spec().run_hash == "6a04d8d664"  # the hash this spec had before the field existed
    assert tiny_spec(eval_clients="all").run_hash == tiny_spec().run_hash
    assert tiny_spec(eval_clients="sampled").run_hash != tiny_spec().run_hash


def test_an_unknown_eval_clients_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="eval_clients: got 'some'; allowed: one of 'all', 'sampled'"):
        tiny_spec(eval_clients="some")

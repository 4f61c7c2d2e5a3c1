"""The round a run is scored at (issue 42, item 3): `scored_round: lowest_validation_loss` scores the test-time
clients with the model of the round whose validation loss (every client's local test split, size-weighted) was
lowest, as 002's released FedAvg reports it; the platform's default stays the last round."""

from __future__ import annotations

import pytest

from fedbench.config import parse_run
from fedbench.config.task import resolve_run
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.runtime import Federation, run_spec
from fedbench.runtime.checkpoint import CheckpointFolder
from tests.conftest import TINY
from tests.runtime.test_checkpoint import KillAfter, Killed, numbers

OSCILLATING = {"rounds": 8, "optimizer": {"name": "sgd", "lr": 0.6, "momentum": 0.9}}
"""TINY at a high learning rate: the validation loss falls to round 6, then rises (0.558, 0.574, 0.651)."""


def resolved(**changes):
    """TINY with the oscillating case (its preset expanded, as a task's runs are) and `changes`."""
    return resolve_run({**TINY, **OSCILLATING, **changes})


def test_the_lowest_validation_loss_round_gives_the_final_scores_of_a_run_that_stopped_there():
    ours = run_spec(resolved(scored_round="lowest_validation_loss"))
    losses = [record[M.LOSS_LOCAL_WEIGHTED] for record in ours.history]
    best = 1 + losses.index(min(losses))
    assert best < len(losses), "the case should have its lowest loss before the last round"
    assert ours.final[M.FINAL_PREFIX + M.SCORED_ROUND] == best
    stopped = run_spec(resolved(rounds=best))  # no drift: the same data whatever the number of rounds
    last = run_spec(resolved())
    key = M.FINAL_PREFIX + M.ACC_SYSTEM  # the pooled test splits, answered by the scored round's model
    assert ours.final[key] == stopped.final[key] != last.final[key]
    assert M.FINAL_PREFIX + M.SCORED_ROUND not in last.final  # the default records nothing new
    # the per-round curves are the last-round run's: only the final scores move
    assert numbers(ours.history[:-1]) == numbers(last.history[:-1])


def test_a_resumed_run_scores_the_round_its_checkpoint_kept(tmp_path):
    spec = resolved(scored_round="lowest_validation_loss")
    whole = run_spec(spec)
    with pytest.raises(Killed):  # killed after round 7; the round-6 checkpoint holds the lowest round so far
        Federation(spec, [KillAfter(7)], checkpoints=CheckpointFolder(tmp_path, every=2)).run()
    resumed = Federation(spec, checkpoints=CheckpointFolder(tmp_path, every=2))
    result = resumed.run()
    assert resumed.resumed_from == 6
    assert result.final[M.FINAL_PREFIX + M.SCORED_ROUND] == whole.final[M.FINAL_PREFIX + M.SCORED_ROUND] == 6
    assert numbers(result.history) == numbers(whole.history)


def test_a_method_whose_clients_keep_state_is_refused_when_the_task_loads():
    with pytest.raises(ConfigError, match=r"scored_round: got 'lowest_validation_loss'.*last for ditto"):
        parse_run({**TINY, "algorithm": "ditto", "scored_round": "lowest_validation_loss"})
    with pytest.raises(ConfigError, match="scored_round: got 'best'"):
        parse_run({**TINY, "scored_round": "best"})

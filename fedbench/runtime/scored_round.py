"""Which round's model a run's final scores come from (`RunSpec.scored_round`).

`last` scores the last round's model. `lowest_validation_loss` keeps, as the run goes, the server state of the
round whose evaluation of every client had the lowest validation loss (`loss_local_weighted`), as 002's released
FedAvg does (FEROMA `fedavg/server.py` loads the checkpoint of `best_loss_round` and scores the test clients with
it); the state is kept in the run's checkpoints too, so a resumed run scores the same round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

LAST, LOWEST_VALIDATION_LOSS = "last", "lowest_validation_loss"


@dataclass(frozen=True)
class ScoredRound:
    """A candidate round: its number, its validation loss and the server state after it."""

    round: int
    loss: float
    server: Any


def keep_lowest(best: ScoredRound | None, round: int, loss: float, server: Any) -> ScoredRound | None:
    """`best`, or this round where its loss is lower (the earlier round wins a tie; a NaN loss never wins)."""
    if math.isnan(loss) or (best is not None and loss >= best.loss):
        return best
    return ScoredRound(round, loss, server)

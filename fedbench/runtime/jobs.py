"""Client jobs as types: what a worker runs for one client, and what the backends need to know to dispatch it.

A job is a small picklable object the backends hand to a worker with (round, client id, payload, client state);
`run` calls the algorithm's client half on the client's data (`ClientWorker.on_data`). Training is `FIT`, a round's
description of the data before it `DESCRIBE_DATA` (`DescribedRound`); the evaluation protocols' jobs live with their
protocols in `fedbench.runtime.evaluation`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from fedbench.core import timeline
from fedbench.core.types import ClientResult, Payload


class Job(ABC):
    """One kind of client job. Subclasses are stateless; one instance of each serves every round."""

    name: ClassVar[str]
    """For messages and timings: `fit`, `evaluate`, ..."""
    keeps_state: ClassVar[bool] = False
    """True where the job returns the client's new state beside its result (training): the backends store it."""
    on_test_clients: ClassVar[bool] = False
    """True where client ids index `Scenario.test_clients` (unseen clients with no training state)."""

    @abstractmethod
    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> Any:
        """The job on `worker` (a `ClientWorker`): a ClientResult, or (ClientResult, new state) where `keeps_state`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Fit(Job):
    """A training client's round: `client_update` on its training split."""

    name = "fit"
    keeps_state = True

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> tuple[ClientResult, Any]:
        timeline.mark_once("job_start")
        (uplink, new_state, metrics), seconds = worker.on_data(
            self, round, client_id, lambda data, ctx: worker.algorithm.client_update(payload, state, data, ctx)
        )
        return ClientResult(client_id, uplink, metrics, seconds), new_state


class DescribeData(Job):
    """A training client's description of this round's data, before the server configures the round
    (`DescribedRound.client_describe_round`)."""

    name = "describe_data"
    keeps_state = True

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> tuple[ClientResult, Any]:
        (uplink, new_state), seconds = worker.on_data(
            self, round, client_id, lambda data, ctx: worker.algorithm.client_describe_round(payload, state, data, ctx)
        )
        return ClientResult(client_id, uplink, {}, seconds), new_state


FIT, DESCRIBE_DATA = Fit(), DescribeData()

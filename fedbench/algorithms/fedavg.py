"""FedAvg (McMahan et al. 2017): local SGD from the global model, sample-weighted averaging."""

from __future__ import annotations

from typing import Mapping, Sequence

from fedbench.algorithms.base import Aggregator, Algorithm, ServerState, UplinkAverage, average_uplinks, counted
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, ClientState, Metrics, Payload, RoundContext
from fedbench.training import ClientData, get_weights, train_local


@register_algorithm("fedavg")
class FedAvg(Algorithm):
    """Every sampled client trains the global model locally; the server averages by sample count."""

    def client_update(
        self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState, Metrics]:
        model = self.model_with(payload.weights)
        metrics = train_local(model, data, ctx)
        return counted(get_weights(model), data.num_train), state, metrics

    def aggregate(self, round: int, state: ServerState, results: Sequence[ClientResult]) -> ServerState:
        return {**state, "global": Payload(average_uplinks(results))}

    def aggregator(self, round: int, state: ServerState, train_sizes: Mapping[int, int]) -> Aggregator | None:
        """The streamed form of `aggregate`; a subclass that aggregates otherwise gets the whole list."""
        if type(self).aggregate is not FedAvg.aggregate:
            return None
        return UplinkAverage(state, train_sizes)

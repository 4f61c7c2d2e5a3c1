"""FedAvg (McMahan et al. 2017): local SGD from the global model, sample-weighted averaging."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fedbench.algorithms.base import (
    Algorithm,
    GlobalModelAtTestTime,
    GlobalState,
    NoClientState,
    UplinkAverage,
    average_uplinks,
    counted,
)
from fedbench.algorithms.capabilities import StreamedAggregation, SystemVote
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, get_weights, train_local


class FedAvgTraining(Algorithm, StreamedAggregation, SystemVote):
    """FedAvg's rounds: every sampled client trains the global model locally; the server averages by sample count.
    FedAvg adds its test-time rule; a method without one (FedRep, whose heads stay on the clients) builds on this."""

    def client_update(
        self, payload: Payload, state: NoClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, NoClientState, Metrics]:
        model = self.model_with(payload.weights)
        metrics = train_local(model, data, ctx)
        return counted(get_weights(model), data.num_train), state, metrics

    def aggregate(self, round: int, state: GlobalState, results: Sequence[ClientResult]) -> GlobalState:
        return dataclasses.replace(state, global_model=Payload(average_uplinks(results)))

    @classmethod
    def streams(cls) -> bool:
        """A subclass that aggregates otherwise gets the whole list."""
        return cls.aggregate is FedAvgTraining.aggregate

    def aggregator(self, round: int, state: GlobalState, train_sizes: Mapping[int, int]) -> UplinkAverage:
        return UplinkAverage(state, train_sizes)


@register_algorithm("fedavg")
class FedAvg(FedAvgTraining, GlobalModelAtTestTime):
    """FedAvg (McMahan et al. 2017); every test-time client gets the global model."""

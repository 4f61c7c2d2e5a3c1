"""FedAvg (McMahan et al. 2017): local SGD from the global model, sample-weighted averaging."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic

from fedbench.algorithms.base import (
    Algorithm,
    ConfigT,
    GlobalModelAtTestTime,
    UplinkAverage,
    average_uplinks,
    with_global_model,
)
from fedbench.algorithms.capabilities import ClientStateT, StateT, StreamedAggregation, SystemVote
from fedbench.algorithms.functional_fit import FunctionalFit
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, Payload


class FedAvgTraining(
    FunctionalFit[ClientStateT],
    Algorithm[ConfigT, StateT, ClientStateT],
    StreamedAggregation[StateT],
    SystemVote[StateT, ClientStateT],
    Generic[
        ConfigT, StateT, ClientStateT
    ],  # in the order of Algorithm's, which FunctionalFit's first place would change
):
    """FedAvg's rounds: every sampled client trains the global model locally (`FunctionalFit`'s defaults, so the
    batched backend trains many clients at once); the server averages by sample count.
    FedAvg adds its test-time rule; a method without one (FedRep, whose heads stay on the clients) builds on this.

    Generic in all three types, as the methods built on it keep its hooks with states of their own: its server half
    reads and replaces the state's `global_model` (a `GlobalState` or a subclass; a method whose state holds no global
    model, CFL or FeSEM, overrides every hook that would), its client half passes the client state through."""

    def aggregate(self, round: int, state: StateT, results: Sequence[ClientResult]) -> StateT:
        return with_global_model(state, Payload(average_uplinks(results)))

    @classmethod
    def streams(cls) -> bool:
        """A subclass that aggregates otherwise gets the whole list."""
        return cls.aggregate is FedAvgTraining.aggregate

    def aggregator(self, round: int, state: StateT, train_sizes: Mapping[int, int]) -> UplinkAverage[StateT]:
        return UplinkAverage(state, train_sizes)


@register_algorithm("fedavg")
class FedAvg(FedAvgTraining[ConfigT, StateT, ClientStateT], GlobalModelAtTestTime[StateT]):
    """FedAvg (McMahan et al. 2017); every test-time client gets the global model.

    Registered as it is (`AlgorithmConfig`, `GlobalState`, `NoClientState`, the core's defaults); the methods built
    on it name their own three types (`FedAvg["MOON.Config", GlobalState, MOONClientState]`)."""

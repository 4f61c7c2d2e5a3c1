"""FedAvg (McMahan et al. 2017): local SGD from the global model, sample-weighted averaging."""

from __future__ import annotations

from typing import Sequence

from fedbench.algorithms.base import Algorithm, ServerState, sample_count
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, ClientState, Metrics, Payload, RoundContext
from fedbench.training import ClientData, average_weights, get_weights, train_local


@register_algorithm("fedavg")
class FedAvg(Algorithm):
    """Every sampled client trains the global model locally; the server averages by sample count."""

    def client_update(
        self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState, Metrics]:
        model = self.model_with(payload)
        metrics = train_local(model, data, ctx)
        return {**get_weights(model), "num_samples": sample_count(data.num_train)}, state, metrics

    def aggregate(self, round: int, state: ServerState, results: Sequence[ClientResult]) -> ServerState:
        weights = [{k: v for k, v in r.uplink.items() if k != "num_samples"} for r in results]
        counts = [int(r.uplink["num_samples"][0]) for r in results]
        return {**state, "global": average_weights(weights, counts)}

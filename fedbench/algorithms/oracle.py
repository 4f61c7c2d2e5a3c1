"""Oracle (001 Sec. IV-C): one model per ground-truth cluster, trained by FedAvg within the cluster.

The ceiling for clustering methods: it is told what no real method knows, each client's ground-truth
distribution id (`RoundContext.distribution_id`, which the runtime gives only a method that declares
`ReadsGroundTruth`). Each round runs in two
exchanges (`DescribedRound`, as FEROMA's): every sampled client first reports the id of the distribution it
holds this round (one int), then is sent that cluster's model, trains it on the same data, and the server
averages the updates of each cluster's members. So under drift a client trains its new cluster's model from
the round it drifts in, and no cluster model ever averages updates that started from another cluster's model.
A cluster no client has trained yet starts from the run's initial model.

001 pools each cluster's data; this is the federated form (FedAvg within clusters), as for Conditional's
default.

Test time: a test client reports its own distribution id and is given that cluster's model (`matched`: a
training client of the cluster). A distribution no client trained on has no model; such a test client gets
the initial model and no match.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from fedbench.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    NoClientState,
    cluster_averages,
    cluster_section,
    reported_cluster,
)
from fedbench.algorithms.capabilities import (
    Assignment,
    DescribedRound,
    ReadsGroundTruth,
    SystemVote,
    TestTimeAssignment,
    TrainedOn,
)
from fedbench.algorithms.functional_fit import FunctionalFit
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, Payload, RoundContext
from fedbench.training import ClientData


@dataclass(frozen=True)
class OracleState:
    """The run's initial model, each ground-truth cluster's model, and the cluster each client last reported
    (this round's, once the round's descriptions are in)."""

    initial: Payload
    models: dict[int, Payload] = field(default_factory=dict)
    cluster_of: dict[int, int] = field(default_factory=dict)


@register_algorithm("oracle")
class Oracle(
    FunctionalFit[NoClientState],
    Algorithm[AlgorithmConfig, OracleState, NoClientState],
    DescribedRound[OracleState, NoClientState],
    TestTimeAssignment[OracleState],
    SystemVote[OracleState, NoClientState],
    ReadsGroundTruth,
):
    """FedAvg per ground-truth cluster: a client trains its cluster's model (`FunctionalFit`'s defaults)."""

    State = OracleState
    picks_by_description = True  # a test client tells its distribution id

    def init_state(self) -> OracleState:
        return OracleState(Payload(self.initial_weights()))

    def round_describe_payloads(self, round: int, state: OracleState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Every sampled client is asked which distribution it holds this round (an empty request)."""
        return {cid: Payload() for cid in sampled}

    def receive_descriptions(self, round: int, state: OracleState, descriptions: Sequence[ClientResult]) -> OracleState:
        """Each described client's cluster this round, which `configure` sends the model of."""
        reported = {r.client_id: reported_cluster(r.uplink) for r in descriptions}
        return dataclasses.replace(state, cluster_of={**state.cluster_of, **reported})

    def configure(self, round: int, state: OracleState, sampled: Sequence[int]) -> dict[int, Payload]:
        return self._models_for(state, sampled)

    def aggregate(self, round: int, state: OracleState, results: Sequence[ClientResult]) -> OracleState:
        """FedAvg within each cluster, over the members that trained this round."""
        averages = cluster_averages(results, lambda r: state.cluster_of[r.client_id])
        return dataclasses.replace(state, models={**state.models, **averages})

    def evaluation_payloads(self, state: OracleState, clients: Sequence[int]) -> dict[int, Payload]:
        return self._models_for(state, clients)

    def describe_payloads(self, state: OracleState, test_clients: Sequence[int]) -> dict[int, Payload]:
        return {tid: Payload() for tid in test_clients}

    def assign(self, state: OracleState, descriptions: dict[int, Payload]) -> Assignment:
        first_member: dict[int, int] = {}
        for cid, cluster in sorted(state.cluster_of.items()):
            first_member.setdefault(cluster, cid)
        payloads, matched = {}, {}
        for tid, uplink in descriptions.items():
            cluster = reported_cluster(uplink)
            payloads[tid] = state.models.get(cluster, state.initial)
            if cluster in first_member:
                matched[tid] = TrainedOn(first_member[cluster])
        return Assignment(payloads, matched)

    def _models_for(self, state: OracleState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's reported cluster's model (the same object for a cluster's members, so it ships once)."""
        held = state.cluster_of
        return {cid: state.models.get(held[cid], state.initial) if cid in held else state.initial for cid in clients}

    # -- client half ---------------------------------------------------------------------------------
    def client_describe_round(
        self, payload: Payload, state: NoClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, NoClientState]:
        """The id of the distribution the client holds this round."""
        return Payload(extras=cluster_section(ground_truth(ctx))), state

    def client_describe(self, payload: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        return Payload(extras=cluster_section(ground_truth(ctx)))


def ground_truth(ctx: RoundContext) -> int:
    """The client's ground-truth distribution id, which the uplink's `CLUSTER` section reports.

    Raises:
        ValueError: the runtime did not say (-1): the Oracle would silently be FedAvg.
    """
    if ctx.distribution_id < 0:
        raise ValueError(
            f"client {ctx.client_id}: the oracle needs the ground-truth distribution id, and the runtime gave none"
        )
    return ctx.distribution_id

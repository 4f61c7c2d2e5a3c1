"""Gossip (001 Sec. IV-C): decentralized learning by random pairwise model averaging, without adaptive weights.

001 describes its baseline in one line: "random pairwise model averaging on a random topology, without adaptive
aggregation weights" (the contrast with DAC, Sec. II). Where it is silent, fedbench follows randomized gossip
(Boyd, Ghosh, Prabhakar, Shah 2006, "Randomized gossip algorithms"), the model-level form decentralized SGD
(Lian et al. 2017, 001's [12]) builds on:

- Topology: every round a fresh random perfect matching of the round's sampled clients over the complete graph
  (seeded from the run seed and the round, the same on every process); with an odd number the one left over
  keeps its model that round.
- Averaging: the two peers of a pair swap models and both take the plain mean 1/2 (w_i + w_j), Boyd et al.'s
  pairwise step. Equal weights (not sample counts) keep the mean of all client models unchanged by every
  exchange, the property gossip averaging is built on.
- Order: exchange, then train. In round t a client receives its partner's model as the partner left its last
  job, averages it with its own, trains on its data and parks the result: both partners start their training
  from the same average, as in a real synchronous exchange, and the relay simulates it exactly.

Round 1 exchanges nothing: every client holds the run's seeded initial model. Later, two clients that have
both never trained (possible with client_fraction < 1) hold the same model too and skip the exchange; otherwise
each partner sends exactly one model, metered as one transfer.

What a client's local accuracy measures (`evaluated`), where 001 is silent: the model it trained this round
(fedbench's default), or that model averaged with its next partner's. The second is where a round that trains
first and exchanges after ends: the same sequence of exchanges and trainings, read between an exchange and the
next training instead of after the training (docs/methods.md, Gossip). After the last round a run reads the
other one too (`SecondReading`), and records both as `acc_local_mean_trained` and `acc_local_mean_mixed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig
from fedbench.algorithms.capabilities import SecondReading
from fedbench.algorithms.peer_relay import Decentralized, DecentralizedClientState, DecentralizedState
from fedbench.core import metrics as M
from fedbench.core.fields import added_later
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext, derive_seed
from fedbench.training import ClientData, average_weights, evaluate, get_weights, train_local


def random_pairs(seed: int, round: int, clients: Sequence[int]) -> list[tuple[int, int]]:
    """A uniformly random perfect matching of `clients` for `round` (one client left out when their number is
    odd), the same on every process for the same run seed."""
    rng = np.random.default_rng(derive_seed(seed, round, "gossip_pairs"))
    order = [int(c) for c in rng.permutation(sorted(clients))]
    return list(zip(order[0::2], order[1::2], strict=False))


@register_algorithm("gossip")
@added_later("evaluated")  # runs recorded before it keep their run hash
class Gossip(Decentralized["Gossip.Config", DecentralizedClientState], SecondReading[DecentralizedState]):
    """Each round: random pairs exchange their models, both average them 1/2-1/2, then train locally."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        evaluated: Literal["trained", "mixed"] = "trained"
        """The model local accuracy measures. trained: the client's model after this round's training.
        mixed: that model averaged with its partner's under the next round's pairs, where a train-then-exchange
        round ends; 001 Sec. IV-C does not say which it reports (docs/methods.md, Gossip)."""

    # -- server half ---------------------------------------------------------------------------------
    def configure(self, round: int, state: DecentralizedState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Each partner gets the other's model; a client without a partner, or in a pair of two clients that
        never trained, gets nothing."""
        downlinks = {cid: Payload() for cid in sampled}
        for a, b in random_pairs(self.seed, round, sampled):
            if a in state.parked or b in state.parked:
                downlinks[a] = Payload(peers={b: self.sent(state, b)})
                downlinks[b] = Payload(peers={a: self.sent(state, a)})
        return downlinks

    def evaluation_payloads(self, state: DecentralizedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Nothing where a client evaluates its trained model; with `evaluated: mixed`, its next partner's model."""
        if self.config.evaluated == "trained":
            return super().evaluation_payloads(state, clients)
        return self.next_partners(state, clients)

    def first_reading(self) -> str:
        """`evaluated`'s point: the trained or the mixed models."""
        return M.ACC_LOCAL_MEAN_TRAINED if self.config.evaluated == "trained" else M.ACC_LOCAL_MEAN_MIXED

    def second_reading(self, state: DecentralizedState, clients: Sequence[int]) -> tuple[str, dict[int, Payload]]:
        """The reading `evaluated` does not give: the mixed models beside a trained run, the trained ones (nothing
        sent) beside a mixed run."""
        if self.config.evaluated == "trained":
            return M.ACC_LOCAL_MEAN_MIXED, self.next_partners(state, clients)
        return M.ACC_LOCAL_MEAN_TRAINED, super().evaluation_payloads(state, clients)

    def next_partners(self, state: DecentralizedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client its partner's model under the pairs of the round after the last one (a client left without a
        partner, nothing)."""
        payloads = {cid: Payload() for cid in clients}
        for a, b in random_pairs(self.seed, state.round + 1, clients):
            payloads[a] = Payload(peers={b: self.sent(state, b)})
            payloads[b] = Payload(peers={a: self.sent(state, a)})
        return payloads

    # -- client half ---------------------------------------------------------------------------------
    def mix(self, payload: Payload, state: DecentralizedClientState) -> Arrays:
        """The client's model averaged with its partner's, 1/2 each (its own model when it has no partner)."""
        own = self.own_weights(state)
        partners = [peer.weights for peer in payload.peers.values()]
        return average_weights([own, *partners], [1.0] * (1 + len(partners))) if partners else own

    def client_update(
        self, payload: Payload, state: DecentralizedClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, DecentralizedClientState, Metrics]:
        model = self.model_with(self.mix(payload, state))
        metrics = train_local(model, data, ctx)
        weights = get_weights(model)
        return Payload(weights), DecentralizedClientState(weights), metrics

    def client_evaluate(
        self, payload: Payload, state: DecentralizedClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        """The client's model, averaged with the partner's the payload carries (`evaluated: mixed`)."""
        return evaluate(self.model_with(self.mix(payload, state)), data, device=ctx.device)

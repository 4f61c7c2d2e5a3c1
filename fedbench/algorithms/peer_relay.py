"""What the decentralized methods (Gossip, DAC) share: the server as a relay, personal models in the client state.

There is no server model. After each job a client parks at the relay what a peer may ask it for (its model, its
sample count, DAC's similarity vector) together with what only the relay needs (DAC's request for next round's
neighbours); parking is not metered, as no real network carries it (`PeerRelay`). In a later round the relay
hands a client what its peers parked, by sender in `Payload.peers`, which the byte meter charges as one transfer
each, to the sender's uplink and the receiver's downlink. So in round t a client receives what its peers held at
the end of their last job: the synchronous round of decentralized learning, in which all clients first exchange
models and then train.

What travels only through the relay is not metered: parked sections a peer never asks for, such as DAC's
request for next round's neighbours (n int64, a few dozen bytes a round, which a real client would send to each
peer it asks), are deliberately left out as negligible next to the models.

Each client's model lives in its client state (the run's seeded initial model before its first job). Local
accuracy evaluates it there (empty evaluation payloads, as for Local). System accuracy's vote (004 Sec. 5) needs
every client's model: after the last round each client that trained uploads it once, for the vote only
(`PersonalModels`, metered as `comm_eval_up_bytes` as for Ditto or FedRep); a client that never trained votes
with the seeded initial model, which every process rebuilds, so it uploads nothing. Test clients, for which no
decentralized method has a rule to pick a model, predict with the ensemble of the clients' last models, equally
weighted (002 App. I.3's rule for its baselines, clusters of one); it is built from the parked copies, which hold
the same arrays the clients have just uploaded for the vote, so that upload is not charged twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from fedbench.algorithms.base import Algorithm, ConfigT
from fedbench.algorithms.capabilities import Assignment, PeerRelay, PersonalModels, SystemVote, TestTimeAssignment
from fedbench.core.types import WEIGHTS, Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, evaluate


@dataclass(frozen=True)
class DecentralizedState:
    """The relay's state: the seeded initial model, which every client holds until its first job, and each client's
    last uplink, parked under its id."""

    initial: Payload
    parked: dict[int, Payload] = field(default_factory=dict)
    round: int = 0
    """The last round aggregated (0 before the first): what a method that evaluates after the next exchange
    (Gossip's `evaluated: mixed`) pairs clients by."""


@dataclass(frozen=True)
class DecentralizedClientState:
    """The client's own model after its last job; None before its first (it holds the run's seeded initial model)."""

    model: Arrays | None = None


PeerStateT = TypeVar("PeerStateT", bound=DecentralizedClientState)
"""The ClientState of a decentralized method (`DecentralizedClientState` or one that extends it, DAC's)."""


class Decentralized(
    Algorithm[ConfigT, DecentralizedState, PeerStateT],
    PeerRelay,
    PersonalModels[PeerStateT],
    TestTimeAssignment[DecentralizedState],
    SystemVote[DecentralizedState, PeerStateT],
):
    """Base of the decentralized methods: the server only relays what peers send each other."""

    State = DecentralizedState
    ClientState = DecentralizedClientState
    SHARED: ClassVar[tuple[str, ...]] = (WEIGHTS,)
    """The parked sections a client sends a peer that asks (the rest only the relay reads)."""

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> DecentralizedState:
        return DecentralizedState(Payload(self.initial_weights()))

    def aggregate(self, round: int, state: DecentralizedState, results: Sequence[ClientResult]) -> DecentralizedState:
        """Nothing is aggregated: every uplink is parked under its client's id."""
        parked = {**state.parked, **{r.client_id: r.uplink for r in results}}
        return dataclasses.replace(state, parked=parked, round=round)

    def sent(self, state: DecentralizedState, sender: int) -> Payload:
        """What `sender` sends a peer: the `SHARED` sections of its parked uplink (the initial model if it never
        trained)."""
        parked = state.parked.get(sender)
        if parked is None:
            return state.initial
        return Payload(extras={name: parked[name] for name in self.SHARED})

    def evaluation_payloads(self, state: DecentralizedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Nothing to send: a client evaluates the model in its own state."""
        return {cid: Payload() for cid in clients}

    def system_payloads(self, state: DecentralizedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Nothing for a client that trained (it uploads its model, `client_share`); the seeded initial model, one
        object for all, for a client that never did."""
        return {cid: Payload() if cid in state.parked else state.initial for cid in clients}

    def assign(self, state: DecentralizedState, descriptions: dict[int, Payload]) -> Assignment:
        """Every test client gets the ensemble of the clients' last models, one client each, so equally weighted
        (002 App. I.3's rule with clusters of one): the parked copies of what they uploaded for the vote."""
        models = {cid: Payload(parked.weights) for cid, parked in state.parked.items()}
        return Assignment.size_weighted(models, {cid: 1.0 for cid in models}, list(descriptions))

    # -- client half ---------------------------------------------------------------------------------
    def own_weights(self, state: PeerStateT) -> Arrays:
        """The client's model: from its state, or the run's seeded initial model before its first job."""
        return state.model if state.model is not None else self.initial_weights()

    def client_evaluate(self, payload: Payload, state: PeerStateT, data: ClientData, ctx: RoundContext) -> Metrics:
        return evaluate(self.model_with(self.own_weights(state)), data, device=ctx.device)

    def client_share(self, payload: Payload, state: PeerStateT) -> Payload:
        """The client's own model, for system accuracy's vote (nothing where it never trained: its system payload
        is the initial model)."""
        return Payload(state.model) if state.model is not None else Payload()

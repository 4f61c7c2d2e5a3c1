"""Personal models beside a federated global one (Ditto's v_k, pFedMe's theta): the states and the evaluation they
share. A client keeps its personal model in its `ClientState`, never sent in training; one that holds one evaluates
it (downloading nothing) and uploads it once after the last round for system accuracy's vote; a client that never
trained uses the global model for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedbench.algorithms.base import GlobalState
from fedbench.algorithms.capabilities import HoldsModels, PersonalModels
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, evaluate


@dataclass(frozen=True)
class PersonalisedState(GlobalState):
    """The global model, and the ids of the clients that trained, so hold a personal model (the server knows whom
    it trained with; it never sees the models)."""

    personalised: frozenset[int] = frozenset()


@dataclass(frozen=True)
class PersonalClientState:
    """A client's personal model; None until its first job."""

    personal: Arrays | None = None


class PersonalBesideGlobal(PersonalModels[PersonalClientState]):
    """Mixin of the methods whose clients keep a personal model next to the global one. Its `State` gives the
    default `init_state` (the initial global model, no client personalised yet); a subclass's `aggregate` records
    who trained (`with_trained`)."""

    State: ClassVar[type] = PersonalisedState
    ClientState: ClassVar[type] = PersonalClientState

    @staticmethod
    def with_trained(state: PersonalisedState, results: Sequence[ClientResult]) -> PersonalisedState:
        """`state` with this round's clients added to those holding a personal model."""
        return dataclasses.replace(state, personalised=state.personalised | {r.client_id for r in results})

    def evaluation_payloads(self, state: PersonalisedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Nothing for a client with a personal model (it evaluates that); the global model for the others."""
        return {cid: Payload() if cid in state.personalised else state.global_model for cid in clients}

    def client_evaluate(
        self: HoldsModels, payload: Payload, state: PersonalClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        """The personal model where the client has one, else the payload's (global) model."""
        weights = state.personal if state.personal is not None else payload.weights
        return evaluate(self.model_with(weights), data, device=ctx.device)

    def client_share(self, payload: Payload, state: PersonalClientState) -> Payload:
        """The personal model, for system accuracy's vote (nothing for a client that never trained: it votes with
        the global model, its system payload)."""
        return Payload(state.personal) if state.personal is not None else Payload()

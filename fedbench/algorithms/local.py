"""Local training only: each client trains its own model and nothing is communicated (the lower bound
on collaboration every seed paper reports, e.g. 001 Sec. IV "Local").

No capability: Local has no server model, so no system vote (the models never reach a server) and nothing to
give an unseen test client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from fedbench.algorithms.base import Algorithm, AlgorithmConfig
from fedbench.algorithms.functional_fit import FunctionalFit
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.training import ClientData, evaluate


@dataclass(frozen=True)
class LocalState:
    """The server holds nothing."""


@dataclass(frozen=True)
class LocalClientState:
    """The client's own model; None before its first job (it starts from the run's seeded initial model)."""

    model: Arrays | None = None


@register_algorithm("local")
class Local(FunctionalFit[LocalClientState], Algorithm[AlgorithmConfig, LocalState, LocalClientState]):
    """Clients start from the run's seeded initial model (rebuilt locally from the shared seed, so no
    download is needed) and keep training their own copy, which lives in the client state."""

    State = LocalState
    ClientState = LocalClientState

    def init_state(self) -> LocalState:
        return LocalState()

    def configure(self, round: int, state: LocalState, sampled: Sequence[int]) -> dict[int, Payload]:
        return {cid: Payload() for cid in sampled}

    def evaluation_payloads(self, state: LocalState, clients: Sequence[int]) -> dict[int, Payload]:
        return {cid: Payload() for cid in clients}

    def fit_start(self, payload: Payload, state: LocalClientState) -> Arrays:
        """The client's own model, or the run's seeded initial model before its first job."""
        return state.model if state.model is not None else self.initial_weights()

    def fit_finish(self, state: LocalClientState, trained: Arrays, num_train: int) -> tuple[Payload, LocalClientState]:
        """Nothing goes up; the trained model stays with the client."""
        return Payload(), LocalClientState(trained)

    def client_evaluate(
        self, payload: Payload, state: LocalClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        return evaluate(self.own_model(state), data, device=ctx.device)

    def own_model(self, state: LocalClientState) -> nn.Module:
        """The client's model: its own, or the run's seeded initial model before its first job."""
        return self.model_with(self.fit_start(Payload(), state))

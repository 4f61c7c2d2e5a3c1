"""FedAvgFT (004 Sec. 3.1): FedAvg, then local fine-tuning: aggregation stops for the last `ft_rounds` rounds
and every client keeps training its own copy of the last global model.

To evaluate the personalised models (each client's local accuracy, and 004's system accuracy, a majority
vote of all of them on every query) the server must hold them: in the fine-tuning rounds each client
uploads its fine-tuned model (metered uplink, as a deployed system would have to), and the server stores it
under the client's id without averaging. A client that already holds a fine-tuned model gets an empty
downlink; one that does not (first fine-tuning round, or never sampled before) gets the frozen global model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from fedbench.algorithms.base import AlgorithmConfig, GlobalState
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, get_weights, train_local


@dataclass(frozen=True)
class FineTunedState(GlobalState):
    """The global model, and each client's fine-tuned model once it uploaded one (the last `ft_rounds` rounds)."""

    personal: dict[int, Payload] = field(default_factory=dict)


@dataclass(frozen=True)
class FineTuningClientState:
    """The client's fine-tuned model; None until its first fine-tuning round (it starts from the global model)."""

    model: Arrays | None = None


FTConfigT = TypeVar("FTConfigT", bound="FedAvgFT.Config")
"""The Config of FedAvgFT or of a method built on it (FedBABU, FedProxFT)."""


@register_algorithm("fedavg_ft")
class FedAvgFT(FedAvg[FTConfigT, FineTunedState, FineTuningClientState]):
    """Rounds 1..R - ft_rounds: the parent's federated rounds; the last ft_rounds rounds: plain local
    fine-tuning of the whole model (004 Sec. 3.1), continued across rounds from the client state.

    The run's round count R comes from the RunSpec (`Algorithm.rounds`). Where it is unknown (None, a unit
    test calling the halves directly) there is no fine-tuning phase. A run with ft_rounds >= R is refused when
    the task loads (`Config.check_run`).
    """

    State = FineTunedState
    ClientState = FineTuningClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        ft_rounds: int = 100
        """Final rounds without aggregation, spent fine-tuning locally (004 Sec. 3.1: the last 100 of 800)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.ft_rounds < 0:
                raise ConfigError("ft_rounds", self.ft_rounds, "an integer >= 0 (0: no fine-tuning)")

        def check_run(self, spec: RunSpec) -> None:
            """Refuse a run that fine-tunes in every round: nothing would ever be aggregated, so the method's
            federated phase would not run at all (the default `ft_rounds` are 004's, out of 800 rounds)."""
            if self.ft_rounds >= spec.rounds:
                raise ConfigError(
                    "algorithm.ft_rounds",
                    self.ft_rounds,
                    f"fewer than the run's rounds ({spec.rounds}): with {self.ft_rounds} every round "
                    "fine-tunes locally and nothing is ever aggregated (the default is 004's, out of "
                    "800 rounds)",
                )

    def fine_tuning(self, round: int) -> bool:
        """Whether `round` is one of the last `ft_rounds` rounds of the run."""
        return self.rounds is not None and round > self.rounds - self.config.ft_rounds

    def fine_tuning_hooks(self) -> TrainHooks:
        """How the fine-tuning rounds train: the whole model, plainly (004 Sec. 3.1); FedBABU may train its head
        only."""
        return TrainHooks()

    # -- server half ---------------------------------------------------------------------------------
    def configure(self, round: int, state: FineTunedState, sampled: Sequence[int]) -> dict[int, Payload]:
        if not self.fine_tuning(round):
            return super().configure(round, state, sampled)
        return {cid: Payload() if cid in state.personal else state.global_model for cid in sampled}

    def aggregate(self, round: int, state: FineTunedState, results: Sequence[ClientResult]) -> FineTunedState:
        if not self.fine_tuning(round):
            return super().aggregate(round, state, results)
        return replace(state, personal={**state.personal, **{r.client_id: r.uplink for r in results}})

    def evaluation_payloads(self, state: FineTunedState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's fine-tuned model where it has one, else the global model."""
        return {cid: state.personal.get(cid, state.global_model) for cid in clients}

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FineTuningClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FineTuningClientState, Metrics]:
        if not self.fine_tuning(ctx.round):
            return super().client_update(payload, state, data, ctx)
        model = self.model_with(payload.weights if state.model is None else state.model)
        metrics = train_local(model, data, ctx, self.fine_tuning_hooks())
        weights = get_weights(model)
        return Payload(weights), FineTuningClientState(weights), metrics

"""Ditto (Li, Hu, Beirami, Smith 2021, "Ditto: Fair and Robust Federated Learning Through Personalization",
Sec. 3, Algorithm 1): a global model trained by FedAvg, and per client a personal model v_k that minimises
h_k(v_k; w) = F_k(v_k) + lam/2 ||v_k - w||^2 (eq. 2), the client's loss pulled towards the global model.

Each round a sampled client, in Algorithm 1's order, first trains the received global model w^t exactly as
FedAvg does and uploads it (UPDATE_GLOBAL), then updates v_k on the same data with the proximal term to w^t,
the model it received, not the one it just trained (`fedprox.proximal_term`). v_k lives in the client state
and never travels. lam = 0 trains v_k as Local does (from the first global model the client received);
lam -> infinity pins it to w^t (Sec. 3.1).

Choices where the paper is silent (docs/methods.md compares them with the released code):
- v_k starts from the global model the client receives the first time it is sampled (Algorithm 1 takes
  some v_k^0 as input; the released code starts every v_k at the initial model w^0, which is the same
  thing when every client is sampled in round 1, as with client_fraction 1).
- The personal job walks the same mini-batches as the global one (the released code takes one step of
  each on every batch; the two updates do not depend on each other, so training one job after the other
  gives the same models), with the run's optimizer and learning rate; `personal_epochs` can change its length.
- Local accuracy is each client's personal model's; a client never sampled has none and is evaluated
  with the global model, and so are test-time clients (FedAvg's `GlobalModelAtTestTime`).
- System accuracy is 004's majority vote of the personal models (004 Table 1 reports one for Ditto). The
  server never holds them in training, so after the last round each client uploads its personal model once,
  for the vote only (`PersonalModels`), metered as evaluation traffic (`comm_eval_up_bytes`), never
  as Ditto's training communication.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fedbench.algorithms.base import AlgorithmConfig, counted
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.fedprox import proximal_term
from fedbench.algorithms.personal import PersonalBesideGlobal, PersonalClientState, PersonalisedState
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, get_weights, train_local


@register_algorithm("ditto")
class Ditto(PersonalBesideGlobal, FedAvg["Ditto.Config", PersonalisedState, PersonalClientState]):
    """FedAvg's global model, plus a personal model v_k per client, kept in its client state, trained against it
    with lam/2 ||v - w^t||^2."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        lam: float = 1.0
        """Weight of the proximal term lam/2 ||v_k - w||^2 (Ditto Sec. 3.1, eq. 2; its experiments tune it per
        dataset). 1.0 as in 001 Sec. IV-D and 004 (docs/methods.md), and in the released code's run scripts
        (`--lam=1`). lam = 0: each personal model is Local's."""
        personal_epochs: int | None = None
        """Epochs of the personal job (Algorithm 1's s). None: as many as the global job's (the run's
        local_epochs, or its local_steps), as in the released code, whose one loop over `local_iters`
        batches steps both models."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if not (math.isfinite(self.lam) and self.lam >= 0):
                raise ConfigError("lam", self.lam, "a number >= 0")
            if self.personal_epochs is not None and self.personal_epochs < 1:
                raise ConfigError("personal_epochs", self.personal_epochs, "an integer >= 1, or None for the run's")

    # -- server half ---------------------------------------------------------------------------------
    def aggregate(self, round: int, state: PersonalisedState, results: Sequence[ClientResult]) -> PersonalisedState:
        return self.with_trained(super().aggregate(round, state, results), results)

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: PersonalClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, PersonalClientState, Metrics]:
        model = self.model_with(payload.weights)
        anchor = {name: p.detach().clone().to(ctx.device) for name, p in model.named_parameters()}
        metrics = train_local(model, data, ctx)  # FedAvg's job, untouched: same batches, same RNG draws
        uplink = counted(get_weights(model), data.num_train)

        personal = self.model_with(payload.weights if state.personal is None else state.personal)
        hooks = TrainHooks(extra_loss=proximal_term(self.config.lam, anchor))
        train_local(personal, data, self.personal_context(ctx), hooks)
        return uplink, PersonalClientState(get_weights(personal)), metrics

    def personal_context(self, ctx: RoundContext) -> RoundContext:
        """The personal job's context: the global job's (same batches), or `personal_epochs` epochs of the same
        shuffle stream."""
        if self.config.personal_epochs is None:
            return ctx
        return dataclasses.replace(ctx, local_epochs=self.config.personal_epochs, local_steps=None)

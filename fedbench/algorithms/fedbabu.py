"""FedBABU (Oh, Kim, Yun 2022, "FedBABU: Toward Enhanced Representation for Federated Image Classification",
ICLR 2022; a baseline of 004 Sec. 3.1).

Federated training updates and aggregates only the body (every part of the model but its `head`): the head
stays at its random initialisation, the same on every client, so it never travels: every process rebuilds it
from the run seed (the run's initial model), and any weights without a head are completed with it. Clients
upload the trained body and their sample count; the server averages the bodies and sends the average. The
global model is that body under the initial head (FedBABU's "initial" model, before personalisation).

Personalisation is FedAvgFT's schedule (004 Sec. 3.1): aggregation stops for the last `ft_rounds` rounds and
each client fine-tunes its own copy of the final global model, continued across rounds from its client state;
it uploads the fine-tuned model (metered) so the server can evaluate it and take 004's majority vote. The whole
model is uploaded even where only the head was fine-tuned: training updates the body's normalisation
statistics too (the loop trains in train mode, as 004's released code does).

What fine-tuning trains, and for how long, differs between the two papers (docs/methods.md): FedBABU's
abstract speaks of fine-tuning the head, while its released personalisation notebook fine-tunes the whole
model (body and head at lr 1e-3) for tau_f = 5 epochs, once; 004 fine-tunes only the head ("then fine-tunes
classifiers per client", and its released code) for its last 200 of 800 rounds, 10 steps each. The defaults
are 004's (`ft_part: head`, `ft_rounds: 200`); `ft_part: full` with ft_rounds x local_epochs = 5 is FedBABU's own.
A run with ft_rounds >= its rounds (any run of 200 rounds or fewer with the default) never trains the body and is
refused when the task loads (FedAvgFT's `check_run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from fedbench.algorithms.base import counted
from fedbench.algorithms.fedavg_ft import FedAvgFT, FineTunedState, FineTuningClientState
from fedbench.algorithms.fedrep import BODY_ONLY, HEAD, HEAD_ONLY
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.models.base import select_parts, without_parts
from fedbench.training import ClientData, TrainHooks, get_weights, train_local


@register_algorithm("fedbabu")
class FedBABU(FedAvgFT["FedBABU.Config"]):
    """Rounds 1..R - ft_rounds: FedAvg over the body, head frozen at its initialisation; then FedAvgFT's local
    fine-tuning of the head (004) or of the whole model (FedBABU's released notebook)."""

    @dataclass(frozen=True)
    class Config(FedAvgFT.Config):
        ft_rounds: int = 200
        """Final rounds of local fine-tuning without aggregation (004's FedBABU: the last 200 of 800, its
        released configs/fedbabu.yaml). FedBABU itself personalises once, for tau_f = 5 epochs (its released
        notebook): ft_rounds x local_epochs = 5."""
        ft_part: Literal["head", "full"] = "head"
        """What fine-tuning trains: the head, body frozen (004 Sec. 3.1 and its released code), or the whole
        model (FedBABU's released notebook; its abstract speaks of the head)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.ft_part not in ("head", "full"):
                raise ConfigError("ft_part", self.ft_part, "head or full")

    def fine_tuning_hooks(self) -> TrainHooks:
        return HEAD_ONLY if self.config.ft_part == "head" else TrainHooks()

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> FineTunedState:
        """The initial body as the global model (the head is rebuilt where it is needed), no fine-tuned models yet."""
        return FineTunedState(Payload(without_parts(self.initial_weights(), HEAD)))

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FineTuningClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FineTuningClientState, Metrics]:
        if self.fine_tuning(ctx.round):
            return super().client_update(payload, state, data, ctx)
        model = self.model_with(payload.weights)
        metrics = train_local(model, data, ctx, BODY_ONLY)
        return counted(without_parts(get_weights(model), HEAD), data.num_train), state, metrics

    def model_with(self, weights: Arrays) -> nn.Module:
        """The model with `weights`, under the frozen initial head where they carry none (a body)."""
        return super().model_with({**select_parts(self.initial_weights(), HEAD), **weights})

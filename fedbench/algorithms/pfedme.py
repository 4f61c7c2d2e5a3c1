"""pFedMe (Dinh, Tran, Nguyen 2020, "Personalized Federated Learning with Moreau Envelopes", Algorithm 1).

Each client keeps a local copy w of the global model and, on every mini-batch (R local rounds), solves the
inner problem of its Moreau envelope approximately with K gradient steps of lr `personal_lr`:

    theta = argmin_theta  f_i(theta; batch) + lam/2 ||theta - w||^2        (the personalised model)

then moves w towards it: w <- w - eta * lam * (w - theta), eta being the run's (scheduled) learning rate. The
server mixes the sample-weighted average of the sampled clients' w into the global model with weight beta:
w_global <- (1 - beta) w_global + beta * avg(w_i).

Both updates are the paper's plain gradient steps: the run's optimizer gives only eta and its schedule (which
scales `personal_lr` too); its momentum, weight decay and kind do not apply (`check_run` warns where they are set). R is
the run's number of
mini-batches (`local_steps`, or `local_epochs` passes of `batch_size`).

Where the paper is silent (choices, as the authors' released code makes them):
- The inner solver starts each round at the downloaded global model and is warm-started from the previous
  mini-batch's theta after that (theta is not reset to w before each batch).
- The uplink is w's parameters with theta's buffers (normalisation statistics), the only ones the client ran.

Evaluation: theta after the client's last local round is its personalised model (the paper's "pFedMe (PM)"),
client state that never travels; local accuracy evaluates it, so a client that holds one downloads nothing
to be evaluated, and one that never trained evaluates the global model. System accuracy (004 Sec. 5) is the
majority vote of the personalised models: each client uploads theta once after the last round, for the vote
only (`PersonalModels`, counted as evaluation traffic). Unseen test clients get the global model
(FedAvg's `GlobalModelAtTestTime`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from fedbench.algorithms.base import AlgorithmConfig, average_uplinks, counted
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.fedprox import proximal_term
from fedbench.algorithms.personal import PersonalBesideGlobal, PersonalClientState, PersonalisedState
from fedbench.core.errors import ConfigError, IgnoredSettingWarning
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, OptimizerSpec, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, average_weights, get_weights, train_local
from fedbench.training.loop import scheduled_lr


class MoreauEnvelope:
    """One client's pFedMe job as hooks of the training loop, which trains theta (the model it is given).

    `local` is w, the client's copy of the global model: the anchor of the proximal term while theta takes
    its `inner_steps` steps on a batch, then moved by `outer_step` after them (Algorithm 1, lines 7-8).
    """

    def __init__(self, model: nn.Module, lam: float, eta: float, device: str = "cpu"):
        self.lam, self.eta = lam, eta
        self.local = {name: p.detach().clone().to(device) for name, p in model.named_parameters()}

    @torch.no_grad()
    def outer_step(self, model: nn.Module) -> None:
        """w <- w - eta * lam * (w - theta) (Algorithm 1, line 8)."""
        for name, theta in model.named_parameters():
            w = self.local[name]
            w.sub_(self.eta * self.lam * (w - theta))

    def hooks(self, inner_steps: int) -> TrainHooks:
        return TrainHooks(
            extra_loss=proximal_term(self.lam, self.local), inner_steps=inner_steps, after_batch=self.outer_step
        )

    def weights(self, model: nn.Module) -> Arrays:
        """The uplink's model: w's parameters, with the buffers of `model` (theta)."""
        return {**get_weights(model), **{name: w.cpu().numpy().copy() for name, w in self.local.items()}}


@register_algorithm("pfedme")
class PFedMe(PersonalBesideGlobal, FedAvg["PFedMe.Config", PersonalisedState, PersonalClientState]):
    """Clients run the Moreau-envelope bi-level update; the server mixes their average in with weight beta. The
    personalised model theta after a client's last local round is its personal model
    (`PersonalClientState.personal`)."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        lam: float = 15.0
        """Regularisation lambda of the Moreau envelope (Dinh et al. 2020, Sec. 5, MNIST: 15, as the authors'
        README runs the paper's MNIST experiments; Synthetic: 20)."""
        inner_steps: int = 5
        """K, gradient steps on each mini-batch's inner problem (Sec. 5: 5 in every README command)."""
        personal_lr: float = 0.09
        """Learning rate of the K inner steps (Sec. 5, MNIST nonconvex DNN at eta = 0.005: 0.09, the README's
        value for those runs and the whole hyperparameter study; MLR: 0.1; Synthetic: 0.01)."""
        beta: float = 1.0
        """Server mixing weight beta (Sec. 5: 1 in the comparisons at eta = 0.005, 2 in the fine-tuned runs of
        Table 1); beta = 1 is FedAvg's averaging."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if not (math.isfinite(self.lam) and self.lam > 0):
                raise ConfigError("lam", self.lam, "a number > 0 (at 0 the local copy of the global model never moves)")
            if isinstance(self.inner_steps, bool) or not isinstance(self.inner_steps, int) or self.inner_steps < 1:
                raise ConfigError("inner_steps", self.inner_steps, "an integer >= 1")
            if not (math.isfinite(self.personal_lr) and self.personal_lr > 0):
                raise ConfigError("personal_lr", self.personal_lr, "a learning rate > 0")
            if not (math.isfinite(self.beta) and self.beta > 0):
                raise ConfigError("beta", self.beta, "a number > 0 (1: FedAvg's average)")

        def check_run(self, spec: RunSpec) -> None:
            """Warn where the run's optimizer is not plain SGD: pFedMe's two updates are the paper's plain gradient
            steps, which take only its learning rate and schedule, so the rest of its settings would be silently
            ignored."""
            opt = spec.optimizer
            ignored = [
                f"optimizer.{name} = {value}"
                for name, value, plain in (
                    ("name", opt.name, "sgd"),
                    ("momentum", opt.momentum, 0.0),
                    ("weight_decay", opt.weight_decay, 0.0),
                )
                if value != plain
            ]
            if ignored:
                warnings.warn(
                    f"pFedMe ignores {', '.join(ignored)}: its inner and outer updates are plain gradient "
                    "steps at optimizer.lr and its schedule (Dinh et al. 2020, Algorithm 1)",
                    IgnoredSettingWarning,
                    stacklevel=2,
                )

    # -- server half ---------------------------------------------------------------------------------
    def aggregate(self, round: int, state: PersonalisedState, results: Sequence[ClientResult]) -> PersonalisedState:
        """(1 - beta) w_global + beta * the sample-weighted average of the uplinks (Algorithm 1, line 12;
        integer buffers are the average's)."""
        mixed = average_weights(
            [average_uplinks(results), state.global_model.weights], [self.config.beta, 1 - self.config.beta]
        )
        return self.with_trained(replace(state, global_model=Payload(mixed)), results)

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: PersonalClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, PersonalClientState, Metrics]:
        theta = self.model_with(payload.weights)
        envelope = MoreauEnvelope(
            theta, self.config.lam, scheduled_lr(ctx.optimizer, ctx.round, ctx.rounds), ctx.device
        )
        inner = OptimizerSpec(lr=self.config.personal_lr, momentum=0.0, schedule=ctx.optimizer.schedule)
        metrics = train_local(theta, data, replace(ctx, optimizer=inner), envelope.hooks(self.config.inner_steps))
        return counted(envelope.weights(theta), data.num_train), PersonalClientState(get_weights(theta)), metrics

"""FedRep (Collins, Hassani, Mokhtari, Shakkottai 2021, "Exploiting Shared Representations for Personalized
Federated Learning", Algorithm 1; a baseline of 004 Sec. 3.1).

The representation (every part of the model but its `head`) is shared and averaged; each client keeps its own
head in its client state, never sent. A sampled client first trains its head with the representation frozen,
then the representation with its new head frozen (the loop's `trainable` hook, two calls), and uploads the
representation with its sample count; the server averages them and sends the average, the representation
only, to the next round's clients.

Choices where the paper is silent or its code differs (docs/methods.md):
- A client's first head is the run's initial model's head (every process rebuilds it from the run seed, so
  it never travels), as in the released code; after that, the head it trained last.
- The average weighs clients by sample count (004's released FedRep; Algorithm 1 averages uniformly, the same
  where clients hold equal shares, as in the paper's CIFAR shards).
- In a run that counts local steps (004: 10 a round) the first half of them, rounded down, train the head and
  the rest the representation (004's released FedRep): at least one each from 2 steps on. With a single step
  a round that step trains the representation and the heads keep their initial weights (`check_run` warns);
  in a run that counts epochs, `head_epochs` and `body_epochs` replace the run's `local_epochs`.
- Each phase starts a fresh optimizer (004's released FedRep; the authors' code keeps one for both).
  Normalisation statistics (buffers, not parameters) follow the data in both phases, as in 004's code.
- Local accuracy: a client's own head on the latest global representation (the evaluation downlink is the
  representation), as the released code tests.
- System accuracy (004's majority vote) needs every client's whole model, and FedRep never sends a head in
  training: after the last round each client uploads its head on the global representation once, for the vote
  only (`PersonalModels`, metered as evaluation traffic, `comm_eval_up_bytes`). No test-time clients:
  a new client has no head of its own and the representation under the initial random head is no classifier,
  so FedRep has no test-time assignment (`TestTimeAssignment`) and they are not evaluated.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from fedbench.algorithms.base import AlgorithmConfig, GlobalState, counted
from fedbench.algorithms.capabilities import PersonalModels
from fedbench.algorithms.fedavg import FedAvgTraining
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.models.base import in_part, select_parts, without_parts
from fedbench.training import ClientData, TrainHooks, evaluate, get_weights, train_local

HEAD = "head"
"""The model part a FedRep client keeps to itself (and FedBABU freezes): the final linear layer."""

HEAD_ONLY = TrainHooks(trainable=lambda name: in_part(name, HEAD))
BODY_ONLY = TrainHooks(trainable=lambda name: not in_part(name, HEAD))


@dataclass(frozen=True)
class FedRepClientState:
    """The client's own head; None before its first job (it starts from the initial model's)."""

    head: Arrays | None = None


@register_algorithm("fedrep")
class FedRep(FedAvgTraining["FedRep.Config", GlobalState, FedRepClientState], PersonalModels[FedRepClientState]):
    """FedAvg over the representation; heads stay on the clients and train first each round. No test-time rule: a
    test-time client has no head of its own, so it is not evaluated."""

    ClientState = FedRepClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        head_epochs: int = 10
        """Epochs training the head, representation frozen, each round (the tau head updates of Algorithm 1;
        FedRep Sec. 5: ten local epochs on every dataset). In a run counting local steps, half of them train
        the head instead."""
        body_epochs: int = 1
        """Epochs training the representation, head frozen, after the head's (FedRep Sec. 5: one on CIFAR-10
        and CIFAR-100, five on FEMNIST and Sent140; the released scripts' `local_rep_ep`)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            for field in ("head_epochs", "body_epochs"):
                if getattr(self, field) < 1:
                    raise ConfigError(field, getattr(self, field), "an integer >= 1")

        def check_run(self, spec: RunSpec) -> None:
            """Warn where one local step a round leaves no step for the heads (half of them, rounded down)."""
            if spec.local_steps == 1:
                warnings.warn(
                    "local_steps: 1 with FedRep: the step trains the representation and the heads keep "
                    "their initial weights (the head gets half the steps, rounded down); use 2 or more",
                    stacklevel=2,
                )

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> GlobalState:
        return GlobalState(Payload(without_parts(self.initial_weights(), HEAD)))

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FedRepClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FedRepClientState, Metrics]:
        model = self.model_with({**payload.weights, **self.head_of(state)})
        head_job, body_job = self.phases(ctx)
        first = train_local(model, data, head_job, HEAD_ONLY)
        second = train_local(model, data, body_job, BODY_ONLY)
        weights = get_weights(model)
        uplink = counted(without_parts(weights, HEAD), data.num_train)
        return uplink, FedRepClientState(select_parts(weights, HEAD)), joined(first, second)

    def client_evaluate(
        self, payload: Payload, state: FedRepClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        """The client's own head on the received global representation."""
        return evaluate(self.model_with({**payload.weights, **self.head_of(state)}), data, device=ctx.device)

    def client_share(self, payload: Payload, state: FedRepClientState) -> Payload:
        """The client's own head, which completes the global representation for system accuracy's vote."""
        return Payload(self.head_of(state))

    def head_of(self, state: FedRepClientState) -> Arrays:
        """The client's own head: the one it trained last, or the initial one if it never trained."""
        return state.head if state.head is not None else select_parts(self.initial_weights(), HEAD)

    def phases(self, ctx: RoundContext) -> tuple[RoundContext, RoundContext]:
        """The head's job and the representation's: the config's epochs, or the run's steps split in two."""
        if ctx.local_steps is None:
            return (
                replace(ctx, local_epochs=self.config.head_epochs),
                replace(ctx, local_epochs=self.config.body_epochs),
            )
        head_steps = ctx.local_steps // 2  # >= 1 from 2 steps on; 0 with one step (`check_run`)
        return (replace(ctx, local_steps=head_steps), replace(ctx, local_steps=ctx.local_steps - head_steps))


def joined(first: Metrics, second: Metrics) -> Metrics:
    """One job's training metrics from two consecutive calls of the loop: the mean batch loss over both."""
    steps = first[M.TRAIN_STEPS] + second[M.TRAIN_STEPS]
    loss = (first[M.TRAIN_LOSS] * first[M.TRAIN_STEPS] + second[M.TRAIN_LOSS] * second[M.TRAIN_STEPS]) / max(steps, 1.0)
    return {M.TRAIN_LOSS: loss, M.TRAIN_STEPS: steps, M.TRAIN_SAMPLES: first[M.TRAIN_SAMPLES]}

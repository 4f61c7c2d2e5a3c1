"""`FunctionalFit`: the capability of a method whose client half trains weights with a loss that is a pure function of
(weights, anchors, batch), so that the batched backend can train many of its clients in one vectorised pass.

A method declares three things: the weights a client starts from, an optional penalty on the weights (FedProx's
proximal term), and how the trained weights become its uplink and client state. Its `client_update` is built from
them here, through `train_local`, so the per-client path and the vectorised one (`training.functional`) read the
same declaration and cannot drift apart.
"""

from __future__ import annotations

from abc import ABC
from typing import Generic, cast

from fedbench.algorithms.base import Algorithm, counted
from fedbench.algorithms.capabilities import ClientStateT, HoldsModels
from fedbench.core.types import Arrays, Metrics, Payload, RoundContext
from fedbench.training import ClientData, TrainHooks, get_weights, train_local
from fedbench.training.functional import Penalty, penalty_as_extra_loss


class FunctionalFit(ABC, Generic[ClientStateT]):
    """A client's fit is: start from `fit_start`, train on the local data (cross-entropy plus `fit_penalty`), hand
    the trained weights to `fit_finish`. The defaults are FedAvg's: the downlinked model in, the trained weights and
    the training-set size up, the client state passed through."""

    @classmethod
    def fits_functionally(cls) -> bool:
        """Whether this class's fit is the declared one: a subclass that replaces `client_update` (MOON's
        contrastive term, FedRep's frozen head) or the model its weights load into (`model_with`) says no, and every
        backend runs its own `client_update`."""
        loads_into = next(k for k in cls.__mro__ if "model_with" in vars(k))  # the class defining it
        return cls.client_update is FunctionalFit.client_update and loads_into is Algorithm

    def fit_start(self, payload: Payload, state: ClientStateT) -> Arrays:
        """The weights the client trains from (state_dict names): the downlinked model."""
        assert payload.weights is not None, "a FunctionalFit method downlinks a model, or overrides fit_start"
        return payload.weights

    def fit_penalty(self) -> Penalty | None:
        """A term added to every batch's loss, as a pure function of (trained weights, start weights); None: none."""
        return None

    def fit_finish(self, state: ClientStateT, trained: Arrays, num_train: int) -> tuple[Payload, ClientStateT]:
        """The uplink and the new client state from the trained weights."""
        return counted(trained, num_train), state

    def client_update(
        self, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientStateT, Metrics]:
        """The per-client path: `train_local` from `fit_start`, with `fit_penalty` anchored at the start weights."""
        model = cast(HoldsModels, self).model_with(self.fit_start(payload, state))
        penalty, hooks = self.fit_penalty(), TrainHooks()
        if penalty is not None:
            anchors = {name: p.detach().clone().to(ctx.device) for name, p in model.named_parameters()}
            hooks = TrainHooks(extra_loss=penalty_as_extra_loss(penalty, anchors))
        metrics = train_local(model, data, ctx, hooks)
        uplink, new_state = self.fit_finish(state, get_weights(model), data.num_train)
        return uplink, new_state, metrics

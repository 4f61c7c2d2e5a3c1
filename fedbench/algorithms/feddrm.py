"""FedDRM (seed 004): a shared backbone and client path, client-local target heads, and a server that routes
each query to the client whose data it most likely comes from.

Per client i the loss is lam * CE(class) + (1 - lam) * CE(client id = i) (004 Sec. 2.4, Algorithm 1).
Everything but the final target layer (the model's `head` part) is averaged with weights n_i / sum n; each client keeps
its own `head` (004 Fig. 2, Remark 2.3). For system-level inference the server needs every client's
target layer, so clients upload it each round next to the shared part (its own `HEAD` section, metered like
all uplink, never averaged) and the server keeps the latest one per client, along with n_i for the shares
pi_i = n_i / sum n.

Routing (004 Sec. 3.2, docs/methods.md): a query goes to argmax_i (client logit_i - log pi_i). The client head
estimates P(client = i | x), proportional to pi_i p_i(x); subtracting log pi_i leaves the density ratio of
eq. (4), so a query goes to the client whose data distribution it fits best, not to the largest client.
Test-time clients (002's protocol, which 004 does not have) are routed the same way, as a whole: each
counts where its unlabelled samples route and gets the model of the client most of them go to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    GlobalState,
    ModelBuilder,
    average_uplinks,
    counted,
    sample_counts,
)
from fedbench.algorithms.capabilities import Assignment, SystemVote, TestTimeAssignment, TrainedOn
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.fields import signature_fields
from fedbench.core.registry import MODELS, register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.models.base import in_part, select_parts, without_parts
from fedbench.training import ClientData, TrainHooks, get_weights, train_local

if TYPE_CHECKING:
    from fedbench.models.feddrm_net import FedDRMNet

LOCAL_PART = "head"
"""The model part that stays on the client: the final target layer (docs/methods.md)."""
HEAD = "head"
"""Uplink section: the client's own target layer, which the server keeps for system inference."""
ROUTING = "routing"
"""Payload section `{"log_pi": float32 [num_clients]}`: log of every client's share of the training data."""
ROUTES = "routes"
"""A test client's uplink section `{"counts": int64 [num_clients]}`: how many of its samples route to each
training client."""


def shared_part(weights: Arrays) -> Arrays:
    return without_parts(weights, LOCAL_PART)


def local_part(weights: Arrays) -> Arrays:
    return select_parts(weights, LOCAL_PART)


def feddrm_hooks(lam: float, client_id: int) -> TrainHooks:
    """The loop's hooks for lam * CE(class logits, y) + (1 - lam) * CE(client logits, client id), one
    backbone pass per batch (004 Sec. 2.4). With lam = 1 there is no client term: the client path is left as
    it is (no gradient, no weight decay)."""
    if lam == 1.0:
        return TrainHooks(trainable=lambda name: not in_part(name, "client_head"))

    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        class_logits, client_logits = cast("FedDRMNet", model).both(x)
        return lam * F.cross_entropy(class_logits, y) + (1.0 - lam) * F.cross_entropy(
            client_logits, torch.full_like(y, client_id)
        )

    return TrainHooks(loss=loss)


@dataclass(frozen=True)
class FedDRMState(GlobalState):
    """The averaged shared part, each client's last target layer, and each client's reported data count."""

    heads: dict[int, Arrays] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FedDRMClientState:
    """The client's own target layer; None before its first job (the run's initial one)."""

    head: Arrays | None = None


@register_algorithm("feddrm")
class FedDRM(
    Algorithm["FedDRM.Config", FedDRMState, FedDRMClientState],
    TestTimeAssignment[FedDRMState],
    SystemVote[FedDRMState, FedDRMClientState],
):
    """Server: averages the shared part, keeps each client's target layer and data count. Client: trains
    the received shared part with its own target layer on the two-term loss.

    The task's model must have a client path (`feddrm_net`); its `num_clients` is set to the run's.
    """

    picks_by_description = True  # a test client's samples route to a client's model

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        variant: Literal["paper", "released"] = "paper"
        """paper: 004 as written; released: the authors' code (docs/methods.md). They differ only in lam's default."""
        lam: float | None = None
        """Weight of the class loss, 1 - lam of the client loss (004 Sec. 2.4). None: the variant's, 0.8 for
        paper (the best system accuracy of 004's sweep, Fig. 4), 0.9 for released (docs/methods.md)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            lam = self.lam if self.lam is not None else 0.8 if self.variant == "paper" else 0.9
            object.__setattr__(self, "lam", lam)
            if not 0.0 <= lam <= 1.0:
                raise ConfigError("lam", lam, "a number in [0, 1]")

        def check_run(self, spec: RunSpec) -> None:
            client_path_options(spec.model.name, dict(spec.model.params), spec.scenario.num_clients)

    State = FedDRMState
    ClientState = FedDRMClientState

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.builder = with_client_path(self.builder, self.num_clients)

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> FedDRMState:
        initial = self.initial_weights()
        head = local_part(initial)
        return FedDRMState(Payload(shared_part(initial)), heads={cid: head for cid in range(self.num_clients)})

    def aggregate(self, round: int, state: FedDRMState, results: Sequence[ClientResult]) -> FedDRMState:
        counts = sample_counts(results)
        heads = {**state.heads, **{r.client_id: r.uplink[HEAD] for r in results}}
        known = {**state.counts, **{r.client_id: n for r, n in zip(results, counts, strict=True)}}
        return replace(state, global_model=Payload(average_uplinks(results)), heads=heads, counts=known)

    def evaluation_payloads(self, state: FedDRMState, clients: Sequence[int]) -> dict[int, Payload]:
        """Client j's full model (the shared part and j's target layer) and every client's log pi."""
        routing = {ROUTING: {"log_pi": self.log_shares(state)}}
        return {cid: Payload({**state.global_model.weights, **state.heads[cid]}, routing) for cid in clients}

    def log_shares(self, state: FedDRMState) -> np.ndarray:
        """log pi_i = log(n_i / sum n) over all clients, float32 [num_clients].

        A client that has not reported its count yet (never sampled) is taken to hold the mean count of
        those that have; before any report the shares are uniform.
        """
        known = state.counts
        fill = float(np.mean(list(known.values()))) if known else 1.0
        counts = np.array([known.get(cid, fill) for cid in range(self.num_clients)], dtype=np.float64)
        return np.log(counts / counts.sum()).astype(np.float32)

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FedDRMClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FedDRMClientState, Metrics]:
        head = state.head if state.head is not None else self.initial_head()
        model = self.model_with({**payload.weights, **head})
        assert self.config.lam is not None  # `Config.__post_init__` fills in the variant's
        metrics = train_local(model, data, ctx, feddrm_hooks(self.config.lam, ctx.client_id))
        weights = get_weights(model)
        uplink = counted(shared_part(weights), data.num_train, {HEAD: local_part(weights)})
        return uplink, FedDRMClientState(local_part(weights)), metrics

    def client_predict(
        self, payload: Payload, state: FedDRMClientState, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        """The payload's class predictions and the routing scores client logits - log pi (same for every
        client's payload: the backbone and client path are shared)."""
        preds, routes = self.answer(self.model_with(payload.weights), payload[ROUTING]["log_pi"], data, ctx)
        return {M.PRED: preds, M.ROUTE: routes}

    # -- test time: the router picks the training client whose model a new client uses ----------------
    def describe_payloads(self, state: FedDRMState, test_clients: Sequence[int]) -> dict[int, Payload]:
        """The shared part (backbone and client path) and log pi: what a test client needs to route its data."""
        request = state.global_model.replace({ROUTING: {"log_pi": self.log_shares(state)}})
        return {tid: request for tid in test_clients}

    def client_describe(self, payload: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        """How many of the test client's samples route to each training client (labels unused). It has no
        target layer of its own, so the initial one fills the model; routing does not read it."""
        model = self.model_with({**payload.weights, **self.initial_head()})
        _, routes = self.answer(model, payload[ROUTING]["log_pi"], data, ctx)
        counts = np.bincount(routes.argmax(axis=1), minlength=self.num_clients).astype(np.int64)
        return Payload(extras={ROUTES: {"counts": counts}})

    def assign(self, state: FedDRMState, descriptions: dict[int, Payload]) -> Assignment:
        """Each test client gets the model of the client most of its samples route to (ties: smallest id)."""
        matched = {tid: int(np.argmax(d[ROUTES]["counts"])) for tid, d in descriptions.items()}
        models = self.evaluation_payloads(state, sorted(set(matched.values())))
        return Assignment(
            {tid: models[j] for tid, j in matched.items()}, {tid: TrainedOn(j) for tid, j in matched.items()}
        )

    def answer(
        self, model: nn.Module, log_pi: np.ndarray, data: ClientData, ctx: RoundContext
    ) -> tuple[np.ndarray, np.ndarray]:
        """(predicted classes int64 [n], routing scores float32 [n, N]) of `model` on the data's test split."""
        model.to(ctx.device).eval()
        shift = torch.from_numpy(np.asarray(log_pi)).to(ctx.device)
        preds, routes = [torch.zeros(0, dtype=torch.int64)], [torch.zeros(0, self.num_clients)]
        with torch.no_grad():
            for x, _ in data.test_batches(256, ctx.device):
                class_logits, client_logits = cast("FedDRMNet", model).both(x)
                preds.append(class_logits.argmax(dim=1).cpu())
                routes.append((client_logits - shift).float().cpu())
        return torch.cat(preds).numpy(), torch.cat(routes).numpy()

    def initial_head(self) -> Arrays:
        """The run's initial target layer, rebuilt locally from the shared seed (nothing is downloaded)."""
        return local_part(self.initial_weights())


def with_client_path(builder: ModelBuilder, num_clients: int) -> ModelBuilder:
    """The builder with the model's `num_clients` set to the run's."""
    options = client_path_options(builder.name, dict(builder.options), num_clients)
    return dataclasses.replace(builder, options=tuple(sorted(options.items())))


def client_path_options(model: str, options: dict, num_clients: int) -> dict:
    """The model's options with num_clients set; a model without a client path, or another count, is refused."""
    if "num_clients" not in signature_fields(MODELS.get(model, field="model.name"), skip=2):
        raise ConfigError("model.name", model, "a model with a client path for feddrm: feddrm_net")
    if options.get("num_clients", 0) not in (0, num_clients):
        raise ConfigError(
            "model.num_clients",
            options["num_clients"],
            f"the run's number of clients ({num_clients}), or 0: feddrm sets it",
        )
    return {**options, "num_clients": num_clients}

"""The algorithm interface: a server half and a pure client half, in one class per method.

Server half (driver): `init_state`, `configure`, `aggregate`, `evaluation_payloads`.
Client half (any worker, no shared memory with the server): `client_update`, `client_evaluate`.

The runtime calls these; an algorithm never imports Ray, MLflow or the runtime, never counts bytes
(the runtime meters every Payload) and never writes a training loop (it passes hooks to `train_local`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS
from fedbench.core.runspec import RunSpec
from fedbench.core.types import ClientResult, ClientState, Metrics, Payload, RoundContext, derive_seed
from fedbench.models import build_model
from fedbench.training import ClientData, evaluate, get_weights, set_weights

ServerState = dict[str, Any]


@dataclass(frozen=True)
class AlgorithmConfig:
    """Hyperparameters every algorithm has; each method's Config extends this."""

    client_fraction: float = 1.0
    """Share C of clients sampled per round (McMahan et al. 2017, Sec. 2; 002 Sec. 5 uses 100%)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.client_fraction <= 1.0:
            raise ConfigError("algorithm.client_fraction", self.client_fraction, "a number in (0, 1]")


@dataclass(frozen=True)
class ModelBuilder:
    """Builds the run's model; picklable, so the same builder runs on the driver and on every worker."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    options: tuple[tuple[str, Any], ...] = ()

    def __call__(self) -> nn.Module:
        return build_model(self.name, self.input_shape, self.num_classes, **dict(self.options))

    def initial(self, seed: int) -> nn.Module:
        """The run's initial model: the same weights on every process for the same run seed."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "init") % (2**31))
            return self()


class Algorithm:
    """Base class. Subclasses set `Config` and override the halves they change."""

    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig

    def __init__(self, config: AlgorithmConfig, builder: ModelBuilder, num_clients: int, seed: int):
        self.config = config
        self.builder = builder
        self.num_clients = num_clients
        self.seed = seed
        self._model: nn.Module | None = None

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> ServerState:
        """The server's state before round 1 (by default, the initial global model)."""
        return {"global": get_weights(self.builder.initial(self.seed))}

    def configure(self, round: int, state: ServerState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Per-client downlink for this round (by default, the global model to every sampled client).

        Return the same dict object for clients that receive the same payload: the runtime ships it once.
        """
        return {cid: state["global"] for cid in sampled}

    def aggregate(self, round: int, state: ServerState, results: Sequence[ClientResult]) -> ServerState:
        """The next server state from this round's results (given in client-id order)."""
        return state

    def evaluation_payloads(self, state: ServerState, clients: Sequence[int]) -> dict[int, Payload]:
        """What each client evaluates on its local test split (by default, the global model)."""
        return {cid: state["global"] for cid in clients}

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState, Metrics]:
        raise NotImplementedError

    def client_evaluate(self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext) -> Metrics:
        """Accuracy of the payload's model (by default) on the client's local test split."""
        model = self.model_with(payload)
        return evaluate(model, data, device=ctx.device)

    # -- helpers for subclasses ----------------------------------------------------------------------
    def model_with(self, weights: Payload) -> nn.Module:
        """This process's model instance with `weights` loaded (built once per process, then reused).

        Building it draws initial weights; that happens outside the job's random stream, so whether a worker
        builds its model in this job or an earlier one cannot change the job's noise or dropout draws.
        """
        if self._model is None:
            with torch.random.fork_rng(devices=[]):
                self._model = self.builder()
        set_weights(self._model, weights)
        return self._model


def make_algorithm(spec: RunSpec, input_shape: tuple[int, ...], num_classes: int) -> Algorithm:
    """The RunSpec's algorithm, configured, with a builder for the RunSpec's model."""
    cls = ALGORITHMS.get(spec.algorithm.name, field="algorithm.name")
    builder = ModelBuilder(spec.model.name, tuple(input_shape), num_classes, spec.model.params)
    return cls(cls.Config(**spec.algorithm.kwargs), builder, spec.scenario.num_clients, spec.seed)


def sample_count(n: int) -> np.ndarray:
    """The uplink field carrying a client's training-set size (a real client sends it; it is metered)."""
    return np.array([n], dtype=np.int64)

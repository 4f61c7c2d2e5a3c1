"""Client-Conditional FL (001, Brännvall 2026): one shared model conditioned on each client's PCA statistics.

Each client computes s_i, the normalised top-l eigenvalues of the covariance of [phi(x) || onehot(y)] over
its training data (001 Sec. III-A; `conditional_stats`), and keeps it in its client state: s_i never
leaves the client, so the uplink is exactly FedAvg's for the same model (001 Sec. III-C). The model
concatenates s_i to the flattened conv features before the first FC layer (001 eq. 2-3: `cnn_mnist`,
`cnn_cifar` with cond_dim = l); training and inference both call f(x; theta, s_i).

Training protocols:
- federated (default, 001 Sec. III-C "in deployment"): FedAvg, each client training from the global model
  with its own fixed s_i.
- `centralized_pool` (001 Sec. III-C, the protocol of the paper's tables): "all clients' augmented data are
  concatenated and the model is trained on the pooled set". Each client uploads its training rows (as the
  model sees them), labels and s_i once (again only when its data change: the server sends back the
  digest of what it holds); the server trains the model on the pool for `local_epochs` epochs per round
  with the run's batch size and optimizer (001 Sec. IV-D: SGD lr 0.01, momentum 0.9, batch 64, 20 epochs
  in all), each row conditioned on its client's s_i; clients then evaluate it with their own s_i. The
  uplink meters the data set, as pooling costs. The optimizer's momentum restarts each round, as a
  client's does.

The protocol matters (bench/conditional_e1.py, Fashion-MNIST E1 with K = 5, 25 clients, cnn_mnist): after
3 federated rounds of 1 local epoch Conditional is at 20% local accuracy (FedAvg 33%, Oracle 98.5%),
after five pooled epochs at 99.2%. Within a client s_i is a constant input, so local SGD moves the weights
on s only along s_i, and what tells clients apart is learnt only through averaging; pooled batches
contrast clients in every step.

Stages: s_i is recomputed whenever the client's training data differ from those it was computed on
(drift stages; the state keeps a digest of the raw rows, labels and transform), and reused otherwise.

Clients without statistics in their state (test-time clients, which the runtime evaluates with an empty
state; 001 has none: its test data always belong to a training client): s comes from their labelled
samples when they have more than l of them, otherwise from their test inputs with pseudo-labels: first
with an all-zero label block, then `pseudo_label_iterations` times with the model's own predictions under
the previous s as the labels. Test labels are never used.

System accuracy (004): every client answers its own test split with the global model and its own s_i
(no other client's s_i is available to it), so it equals the pooled local accuracy.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from fedbench.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    GlobalModelAtTestTime,
    GlobalState,
    average_uplinks,
    counted,
)
from fedbench.algorithms.capabilities import RoundReport, SystemVote
from fedbench.algorithms.conditional_stats import (
    IDENTITY_MAX_DIM,
    Normalization,
    client_statistics,
    encode_all,
    random_conv_encoder,
)
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import MODELS, register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import ClientResult, Metrics, Payload, RoundContext, derive_seed
from fedbench.data import dataset_facts
from fedbench.training import ClientData, TrainHooks, evaluate, get_weights, predict, train_local

Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]
CHUNK = 1024
"""Rows per batch when a client encodes its data for the statistics or predicts for pseudo-labels."""
POOL = "pool"
"""Pooled protocol's payload section: downlink `{"key"}`, the digest of the client's rows the server holds
(empty: none); uplink `{"x", "y", "stats", "key"}`, the client's rows as the model sees them, labels, s_i and
their digest, only when the server does not hold them yet."""


@dataclass(frozen=True)
class ConditionalConfig(AlgorithmConfig):
    num_eigenvalues: int = 32
    """l, the length of s_i: the top-l PCA eigenvalues, and the model's cond_dim (001 Sec. III-A: l = 32)."""
    normalization: Normalization = "log1p"
    """How eigenvalues become inputs: log(1 + lambda) or raw (001 is silent; see conditional_stats.normalize)."""
    feature_map: Literal["auto", "identity", "random_conv"] = "auto"
    """phi: identity on flattened inputs (001 Sec. III-A, 28x28) or a fixed random conv encoder to 128-d (001
    uses a cross-trained one for 32x32); auto: the encoder for images of more than 1024 values, else identity."""
    centralized_pool: bool = False
    """Train on the pooled data on the server, as 001 Sec. III-C does, instead of FedAvg (see the module docstring)."""
    pseudo_label_iterations: int = 2
    """Self-labelling passes for clients with no statistics and at most l labels (test-time clients; not in 001)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_eigenvalues < 1:
            raise ConfigError("num_eigenvalues", self.num_eigenvalues, "an integer >= 1")
        if self.pseudo_label_iterations < 0:
            raise ConfigError("pseudo_label_iterations", self.pseudo_label_iterations, "an integer >= 0")

    def check_run(self, spec: RunSpec) -> None:
        conditioned_options(spec.model.name, dict(spec.model.params), self.num_eigenvalues)
        if self.centralized_pool and spec.local_steps is not None:
            raise ConfigError(
                "local_steps",
                spec.local_steps,
                "null with algorithm.centralized_pool (the server "
                "trains local_epochs whole epochs on the pool each round)",
            )
        facts = dataset_facts(spec.dataset.name, **spec.dataset.kwargs)
        if self.feature_map == "random_conv" and not (facts.image_size and min(facts.image_size) >= 4):
            raise ConfigError(
                "algorithm.feature_map",
                "random_conv",
                f"identity or auto for {facts.dataset} (the encoder takes images [C, H, W] with H, W >= 4)",
            )


@dataclass(frozen=True)
class PooledRows:
    """One client's rows in the server's pool (pooled protocol): [flattened x || s_i], labels, and the digest of
    the data they came from."""

    rows: np.ndarray
    y: np.ndarray
    key: np.ndarray


@dataclass(frozen=True)
class ConditionalState(GlobalState):
    """The global model; with the pooled protocol the pool by client and the server's last training loss."""

    pool: dict[int, PooledRows] = field(default_factory=dict)
    pool_loss: float = math.nan


@dataclass(frozen=True)
class ConditionalClientState:
    """The client's statistics s_i and the digest of the data they were computed from (`data_key`); None before
    its first job."""

    stats: np.ndarray | None = None
    stats_key: str | None = None


def conditioned_models() -> list[str]:
    """Registered models whose factory takes `cond_dim` (001's conditioning input)."""
    return [name for name in MODELS.names() if "cond_dim" in inspect.signature(MODELS.get(name)).parameters]


def conditioned_options(model: str, options: dict, eigenvalues: int) -> dict:
    """The model's options with cond_dim = l (001's number of eigenvalues, `eigenvalues`); a model without the
    conditioning input, or another cond_dim, is refused."""
    if model not in conditioned_models():
        raise ConfigError(
            "model.name",
            model,
            f"a model taking cond_dim for the conditional algorithm: {', '.join(conditioned_models())}",
        )
    if options.get("cond_dim", 0) not in (0, eigenvalues):  # 0 is the factory's default: the algorithm sets it
        allowed = f"unset, 0 or {eigenvalues} (= algorithm.num_eigenvalues)"
        raise ConfigError("model.cond_dim", options["cond_dim"], allowed)
    return {**options, "cond_dim": eigenvalues}


def data_key(data: ClientData) -> str:
    """A digest of what s_i is computed from: the raw training rows, their labels and the client's transform."""
    digest = hashlib.blake2b(digest_size=16)
    for tensor in (data.train_x, data.train_y, data.train_source_y):
        digest.update(tensor.contiguous().numpy().tobytes())
    prepare = data.prepare
    name = getattr(prepare, "__qualname__", None)
    digest.update((f"{prepare.__module__}.{name}" if name else repr(prepare)).encode())
    return digest.hexdigest()


def as_is(x: torch.Tensor, source_y: torch.Tensor) -> torch.Tensor:
    """The prepare step of pooled rows: already floats as the model sees them."""
    return x


def pooled_data(pool: dict[int, PooledRows]) -> ClientData:
    """The server's pool as one training set of rows [flattened x || s_i], in client-id order."""
    rows = torch.from_numpy(np.concatenate([pool[c].rows for c in sorted(pool)]))
    labels = torch.from_numpy(np.concatenate([pool[c].y for c in sorted(pool)]))
    empty = torch.zeros(0, dtype=torch.int64)
    return ClientData(rows, labels, rows[:0], empty, labels, empty, as_is)


def with_cond(stats: torch.Tensor) -> Forward:
    """The forward hook f(x; theta, s): s [l] repeated for every row of the batch."""

    def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x, stats.to(x.device).expand(len(x), -1))

    return forward


@register_algorithm("conditional")
class Conditional(
    Algorithm[ConditionalConfig, ConditionalState, ConditionalClientState],
    RoundReport[ConditionalState],
    GlobalModelAtTestTime[ConditionalState],
    SystemVote[ConditionalState, ConditionalClientState],
):
    """FedAvg (or pooled training) of one model f(x; theta, s_i); s_i is computed and kept on client i."""

    Config = ConditionalConfig
    State = ConditionalState
    ClientState = ConditionalClientState

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = conditioned_options(self.builder.name, dict(self.builder.options), self.config.num_eigenvalues)
        self.builder = replace(self.builder, options=tuple(options.items()))
        self.feature_map = self._resolve_feature_map(tuple(self.builder.input_shape))
        self._phi: nn.Module | None = None

    def _resolve_feature_map(self, shape: tuple[int, ...]) -> str:
        is_image = len(shape) == 3 and min(shape[1:]) >= 4
        if self.config.feature_map != "auto":
            return self.config.feature_map
        return "random_conv" if is_image and math.prod(shape) > IDENTITY_MAX_DIM else "identity"

    # -- server half ---------------------------------------------------------------------------------
    def configure(self, round: int, state: ConditionalState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Federated: the global model. Pooled: to each client, the digest of its rows the server holds."""
        if not self.config.centralized_pool:
            return super().configure(round, state, sampled)
        held = state.pool
        return {
            cid: Payload(extras={POOL: {"key": held[cid].key if cid in held else np.zeros(0, np.uint8)}})
            for cid in sampled
        }

    def aggregate(self, round: int, state: ConditionalState, results: Sequence[ClientResult]) -> ConditionalState:
        if not self.config.centralized_pool:
            return replace(state, global_model=Payload(average_uplinks(results)))
        pool = dict(state.pool)
        for r in results:
            if POOL in r.uplink:
                upload = r.uplink[POOL]
                n = len(upload["y"])
                stats = np.broadcast_to(upload["stats"], (n, len(upload["stats"])))
                rows = np.concatenate([upload["x"].reshape(n, -1), stats], axis=1)
                pool[r.client_id] = PooledRows(rows, upload["y"], upload["key"])
        model = self.model_with(state.global_model.weights)
        metrics = train_local(
            model, pooled_data(pool), self._server_context(round), TrainHooks(forward=self._split_forward)
        )
        return replace(state, global_model=Payload(get_weights(model)), pool=pool, pool_loss=metrics[M.TRAIN_LOSS])

    def round_metrics(self, state: ConditionalState) -> Metrics:
        """Pooled: the server's training loss stands for the clients', which do not train."""
        return {M.TRAIN_LOSS_MEAN: state.pool_loss} if self.config.centralized_pool else {}

    def _server_context(self, round: int) -> RoundContext:
        if self.training is None:
            raise ConfigError(
                "algorithm.centralized_pool", True, "a run with known training settings (built by make_algorithm)"
            )
        t = self.training
        return RoundContext(
            round=round,
            client_id=-1,
            seed=self.seed,
            local_epochs=t.local_epochs,
            batch_size=t.batch_size,
            optimizer=t.optimizer,
            num_classes=self.builder.num_classes,
            num_threads=torch.get_num_threads(),
            rounds=self.rounds or round,
        )

    def _split_forward(self, model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        """f(x; theta, s) on pooled rows [flattened x || s]."""
        eigenvalues = self.config.num_eigenvalues
        return model(rows[:, :-eigenvalues].reshape(len(rows), *self.builder.input_shape), rows[:, -eigenvalues:])

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: ConditionalClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ConditionalClientState, Metrics]:
        key = data_key(data)
        if state.stats_key != key:
            state = ConditionalClientState(self.statistics(data, ctx).numpy(), key)
        if self.config.centralized_pool:
            return self._pool_upload(payload, state, data, ctx), state, {M.TRAIN_LOSS: float("nan")}
        model = self.model_with(payload.weights)
        # torch.tensor copies: on Ray the state arrives as read-only object-store memory
        metrics = train_local(model, data, ctx, TrainHooks(forward=with_cond(torch.tensor(state.stats))))
        return counted(get_weights(model), data.num_train), state, metrics

    def _pool_upload(
        self, payload: Payload, state: ConditionalClientState, data: ClientData, ctx: RoundContext
    ) -> Payload:
        """Pooled protocol: the client's rows as the model sees them, labels and s_i, unless the server holds them."""
        assert state.stats_key is not None  # `client_update` computed the statistics first
        key = np.frombuffer(bytes.fromhex(state.stats_key), dtype=np.uint8)
        if np.array_equal(payload[POOL]["key"], key):
            return counted(None, data.num_train)
        rows = [data.train_batch(idx)[0].numpy() for idx in torch.arange(data.num_train).split(CHUNK)]
        upload = {
            "x": np.concatenate(rows).astype(np.float32),
            "y": data.train_y.numpy(),
            "stats": np.array(state.stats),
            "key": key,
        }
        return counted(None, data.num_train, {POOL: upload})

    def client_evaluate(
        self, payload: Payload, state: ConditionalClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        model = self.model_with(payload.weights)
        return evaluate(
            model, data, device=ctx.device, forward=with_cond(self._evaluation_stats(model, state, data, ctx))
        )

    def client_predict(
        self, payload: Payload, state: ConditionalClientState, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        model = self.model_with(payload.weights)
        stats = self._evaluation_stats(model, state, data, ctx)
        return {M.PRED: self._predict(model, data, ctx, stats).numpy()}

    def statistics(self, data: ClientData, ctx: RoundContext) -> torch.Tensor:
        """s_i from the client's training rows (as the model sees them) and their labels (001 Sec. III-A)."""
        batches = (data.train_batch(rows, ctx.device)[0] for rows in torch.arange(data.num_train).split(CHUNK))
        return self._statistics(encode_all(batches, self._encoder(ctx.device)), data.train_y, ctx)

    def _statistics(self, features: torch.Tensor, labels: torch.Tensor | None, ctx: RoundContext) -> torch.Tensor:
        # One random test matrix for the whole federation: the same procedure on every client (001 Sec. III-A).
        seed = derive_seed(self.seed, "conditional/svd")
        eigenvalues, labels = self.config.num_eigenvalues, None if labels is None else labels.to(features.device)
        return client_statistics(features, labels, ctx.num_classes, eigenvalues, seed, self.config.normalization).cpu()

    def _evaluation_stats(
        self, model: nn.Module, state: ConditionalClientState, data: ClientData, ctx: RoundContext
    ) -> torch.Tensor:
        """The client's own s_i when its state holds one for these data; else see the module docstring."""
        if state.stats is not None and state.stats_key == data_key(data):
            return torch.tensor(state.stats)
        if data.num_train > self.config.num_eigenvalues:
            return self.statistics(data, ctx)
        if data.num_test == 0:
            return torch.zeros(self.config.num_eigenvalues)
        features = encode_all((x for x, _ in data.test_batches(CHUNK, ctx.device)), self._encoder(ctx.device))
        stats = self._statistics(features, None, ctx)
        for _ in range(self.config.pseudo_label_iterations):
            stats = self._statistics(features, self._predict(model, data, ctx, stats), ctx)
        return stats

    def _predict(self, model: nn.Module, data: ClientData, ctx: RoundContext, stats: torch.Tensor) -> torch.Tensor:
        return predict(model, data, CHUNK, ctx.device, forward=with_cond(stats))

    def _encoder(self, device: str) -> nn.Module | None:
        """phi: None for the identity, else the run's random conv encoder (built once per process)."""
        if self.feature_map == "identity":
            return None
        if self._phi is None:
            self._phi = random_conv_encoder(self.builder.input_shape[0], derive_seed(self.seed, "conditional/encoder"))
        return self._phi.to(device)

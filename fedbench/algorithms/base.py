"""The algorithm interface: a server half and a pure client half, in one class per method.

Server half (driver): `init_state`, `configure`, `aggregate`, `evaluation_payloads` (and `system_payloads`).
Client half (any worker, no shared memory with the server): `client_update`, `client_evaluate`.

The runtime calls these; an algorithm never imports Ray, MLflow or the runtime, never counts bytes
(the runtime meters every Payload) and never writes a training loop (it passes hooks to `train_local`).

What travels is a `Payload`: the model being federated in its `weights` section, everything else (the
sample count `counted` adds, profiles, cluster ids, a second model) in extra sections the method names.
FedAvg-style averages (`average_uplinks`) read only `weights`, so an extra can never be averaged into a model.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Mapping, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS
from fedbench.core.runspec import RunSpec
from fedbench.core.types import (
    Arrays, ClientResult, ClientState, LocalTraining, Metrics, Payload, RoundContext, derive_seed,
)
from fedbench.models import build_model
from fedbench.training import ClientData, RunningAverage, average_weights, evaluate, get_weights, predict, probabilities, set_weights

ServerState = dict[str, Any]
"""The server's state between rounds; its keys belong to the algorithm (the runtime reads it only through
the algorithm's methods, `round_metrics` included)."""


class Aggregator(Protocol):
    """A round's aggregation as a fold (`Algorithm.aggregator`): results are added in client-id order."""

    def add(self, result: ClientResult) -> None: ...

    def finish(self) -> ServerState: ...


@dataclass(frozen=True)
class AlgorithmConfig:
    """Hyperparameters every algorithm has; each method's Config extends this.

    A range check in `__post_init__` names its field relative to the section (`client_fraction`): the task
    parser puts the section's path in front (`algorithm.client_fraction`). `check_run` sees the whole RunSpec
    and names absolute paths (`model.name`).
    """

    client_fraction: float = 1.0
    """Share C of clients sampled per round (McMahan et al. 2017, Sec. 2; 002 Sec. 5 uses 100%)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.client_fraction <= 1.0:
            raise ConfigError("client_fraction", self.client_fraction, "a number in (0, 1]")

    def clients_per_round(self, num_clients: int) -> int:
        """How many of `num_clients` clients a round samples: max(1, C * num_clients rounded half up)."""
        return max(1, int(np.floor(self.client_fraction * num_clients + 0.5)))


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


@dataclass(frozen=True)
class Ensemble:
    """Test time for a method with no rule to pick one model for an unseen client (002 App. I.3's rule for its
    baselines): the test client averages the output probabilities of all `models`, model k weighted by
    `weights[k]`, the number of clients in its cluster (1 for a client's own model)."""

    models: dict[int, Payload]
    weights: dict[int, float]

    def __post_init__(self) -> None:
        if set(self.models) != set(self.weights) or not self.models:
            raise ValueError("an Ensemble needs one weight per model and at least one model")


@dataclass(frozen=True)
class Assignment:
    """The server's test-time decision (DESIGN.md `assign`): what each test client predicts with.

    Attributes:
        payloads: test client id -> the payload its `client_evaluate` runs; a test client left out is not evaluated.
        matched: test client id -> the training client whose model it was given, for methods that pick one
            (FEROMA); the runtime scores these associations against the scenario's ground truth.
        ensemble: instead of `payloads`, one size-weighted ensemble every described test client downloads whole
            and predicts with (`Assignment.size_weighted`).
    """

    payloads: dict[int, Payload]
    matched: dict[int, int] = field(default_factory=dict)
    ensemble: Ensemble | None = None

    @classmethod
    def size_weighted(cls, models: dict[int, Payload], sizes: dict[int, float], test_ids: Sequence[int]) -> Assignment:
        """Every test client in `test_ids` gets the ensemble of `models` weighted by `sizes`, the number of
        clients behind each model (002 App. I.3: "we weight all models by the number of clients in the cluster")."""
        if not test_ids or not models:
            return cls({})
        return cls({tid: Payload() for tid in test_ids}, ensemble=Ensemble(models, sizes))


class Algorithm:
    """Base class. Subclasses set `Config` and override the halves they change."""

    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    completes_personal_models: ClassVar[bool] = False
    """True where each client's personal model is completed by what only the client holds (Ditto's personal
    model, FedRep's head, FedEM's mixture weights): for system accuracy's vote each client then uploads, once
    after the last round, `client_share(its system_payloads entry, its state)`, the part the server lacks,
    metered as evaluation traffic (`comm_eval_up_bytes`); the vote uses the entry merged with it."""
    decentralized: ClassVar[bool] = False
    """True for peer-to-peer methods simulated through the server as a relay (Gossip, DAC): their uplinks only
    park models at the relay and are not metered; what peers send each other travels in `peer:` sections of the
    downlinks (`Payload.from_peers`), charged to both ends."""

    def __init__(
        self,
        config: AlgorithmConfig,
        builder: ModelBuilder,
        num_clients: int,
        seed: int,
        rounds: int | None = None,
        training: LocalTraining | None = None,
        distributions: int | None = None,
    ):
        """Args:
            rounds: the run's number of rounds, for methods whose schedule counts back from the end
                (FedAvgFT's last `ft_rounds`); None where unknown (unit tests of a single round).
            training: the run's epochs, batch size and optimizer, for methods whose server trains
                (Conditional's pooled protocol); None where unknown.
            distributions: how many distinct distributions the clients train on over the run
                (`Scenario.trained_distributions`), the K that clustering methods are given by default (IFCA);
                only the count, never which client holds which. None where unknown.
        """
        self.config = config
        self.builder = builder
        self.num_clients = num_clients
        self.seed = seed
        self.rounds = rounds
        self.training = training
        self.distributions = distributions
        self._model: nn.Module | None = None
        self._initial: Arrays | None = None

    @classmethod
    def check_run(cls, spec: RunSpec) -> None:
        """Refuse, when the task loads, a run this method cannot train (a model without an input it needs);
        raises ConfigError naming the field. By default every run is fine."""

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> ServerState:
        """The server's state before round 1 (by default, the initial global model)."""
        return {"global": Payload(self.initial_weights())}

    def configure(self, round: int, state: ServerState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Per-client downlink for this round (by default, the global model to every sampled client).

        Return the same Payload object for clients that receive the same content: the runtime ships it once.
        """
        return {cid: state["global"] for cid in sampled}

    def aggregate(self, round: int, state: ServerState, results: Sequence[ClientResult]) -> ServerState:
        """The next server state from this round's results (given in client-id order)."""
        return state

    def aggregator(self, round: int, state: ServerState, train_sizes: Mapping[int, int]) -> Aggregator | None:
        """A fold that builds the same next state as `aggregate`, one fit result at a time in client-id order, so
        that a round never holds every client's update at once; None (the default): `aggregate` gets the whole
        list. `train_sizes`: each sampled client's training-set size, known before any result arrives."""
        return None

    def round_metrics(self, state: ServerState) -> Metrics:
        """Numbers the server half computed in the `aggregate` that returned `state` (FEROMA's aggregation
        kinds, Conditional's pooled training loss); the runtime adds them to the round record. None by default."""
        return {}

    def evaluation_payloads(self, state: ServerState, clients: Sequence[int]) -> dict[int, Payload]:
        """What each client evaluates on its local test split (by default, the global model)."""
        return {cid: state["global"] for cid in clients}

    def system_payloads(self, state: ServerState, clients: Sequence[int]) -> dict[int, Payload]:
        """Every training client's personal model as the server holds it, for system accuracy (004 Sec. 5):
        by default `evaluation_payloads`. With `completes_personal_models` each entry (empty where the server holds
        nothing of it: Ditto's personal models, Gossip's) is merged with what its client uploads (`client_share`).
        Otherwise an empty result, or an empty payload for some client, means part of the personal models never
        reaches the server (Local's models), so the run has no system accuracy."""
        return self.evaluation_payloads(state, clients)

    def describe_payloads(self, state: ServerState, test_clients: Sequence[int]) -> dict[int, Payload]:
        """What each test client needs to describe itself before `assign` (FEROMA: the frozen profile
        extractor). Empty (the default): test clients send nothing and `assign` gets no descriptions."""
        return {}

    def assign(self, state: ServerState, descriptions: dict[int, Payload]) -> Assignment:
        """Test time: a payload per test client, from the final state and each test client's `client_describe`
        uplink (by default, the global model to every test client; nothing for methods without one)."""
        if "global" not in state:
            return Assignment({})
        return Assignment({tid: state["global"] for tid in descriptions})

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState, Metrics]:
        raise NotImplementedError

    def client_evaluate(self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext) -> Metrics:
        """Accuracy of the payload's model (by default) on the client's local test split."""
        model = self.model_with(payload.weights)
        return evaluate(model, data, device=ctx.device)

    def client_share(self, payload: Payload, state: ClientState) -> Payload:
        """With `completes_personal_models`: what the client adds to its `system_payloads` entry (`payload`) to make
        its personal model: arrays it replaces or adds, section by section (FedRep: its head). None by default."""
        return Payload()

    def client_describe(self, payload: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        """A test client's uplink for `assign`. Its `data.train` holds only the few labelled samples it may
        use (002 App. E; often none), `data.test` all its samples; labels of `data.test` are never to be used."""
        return Payload()

    def client_predict(self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext) -> dict[str, np.ndarray]:
        """Predictions of the payload's model on `data`'s test split, for system accuracy (004 Sec. 5).

        Returns:
            `M.PRED`: int64 [n_test] predicted classes; methods with a router add `M.ROUTE`: float [n_test,
            num_clients], scores whose argmax is the client whose model should answer (004 eq. 9).
        """
        return {M.PRED: predict(self.model_with(payload.weights), data, device=ctx.device).numpy()}

    def client_probabilities(self, payload: Payload, data: ClientData, ctx: RoundContext) -> np.ndarray:
        """Class probabilities (float64 [n_test, num_classes]) of the payload's model on `data`'s test split, which a
        test client averages over an `Ensemble`'s models."""
        return probabilities(self.model_with(payload.weights), data, device=ctx.device).numpy()

    # -- helpers for subclasses ----------------------------------------------------------------------
    def resolve_clusters(self, configured: int | None) -> int:
        """K for a clustering method (IFCA, FeSEM, FedRC): its `clusters` field where set, else the scenario's
        number of training distributions, the true K (001 Sec. IV-C); ConfigError where neither is known."""
        clusters = configured if configured is not None else self.distributions
        if clusters is None:
            raise ConfigError("algorithm.clusters", None, "an integer >= 1: this scenario's number of distributions "
                              "is unknown here (the runtime gives it to algorithms it builds)")
        return clusters

    def initial_models(self, count: int, purpose: str) -> list[Arrays]:
        """`count` distinct starting models for a method with several (IFCA's clusters, FedEM's components): the
        run's initial model first, so that one of them is FedAvg's start, then models seeded from (run seed,
        `purpose`, k)."""
        others = [get_weights(self.builder.initial(derive_seed(self.seed, purpose, k))) for k in range(1, count)]
        return [self.initial_weights(), *others]

    def initial_weights(self) -> Arrays:
        """The run's initial model's weights, which every process rebuilds from the run seed (so a client can
        start from them without a download: FedRep's first head, FedBABU's frozen head); kept per process."""
        if self._initial is None:
            self._initial = get_weights(self.builder.initial(self.seed))
        return self._initial

    @cached_property
    def parameter_names(self) -> tuple[str, ...]:
        """The model's parameter names in `named_parameters` order: the entries of its weights that training
        moves, buffers (normalisation statistics, counters) left out; kept per process."""
        with torch.random.fork_rng(devices=[]):
            return tuple(name for name, _ in self.builder().named_parameters())

    def model_with(self, weights: Arrays) -> nn.Module:
        """This process's model instance with `weights` loaded (built once per process, then reused).

        Building it draws initial weights; that happens outside the job's random stream, so whether a worker
        builds its model in this job or an earlier one cannot change the job's noise or dropout draws.
        """
        if self._model is None:
            with torch.random.fork_rng(devices=[]):
                self._model = self.builder()
        set_weights(self._model, weights)
        return self._model


PERSONAL = "personal"
"""Client-state key of a `PersonalModels` client's personal model."""
PERSONALISED = "personalised"
"""Server-state key of a `PersonalModels` method: the ids of the clients that trained, so hold a personal model
(the server knows whom it trained with; it never sees the models)."""


class PersonalModels(Algorithm):
    """Base of the methods whose clients each keep a personal model in their state (`PERSONAL`, Ditto's v_k,
    pFedMe's theta) next to the federated global model, never sent in training. A client that holds one evaluates
    it (downloading nothing) and uploads it once after the last round for system accuracy's vote; a client that
    never trained uses the global model for both. A subclass's `aggregate` records who trained (`with_trained`)."""

    completes_personal_models = True

    def init_state(self) -> ServerState:
        return {**super().init_state(), PERSONALISED: frozenset()}

    @staticmethod
    def with_trained(state: ServerState, results: Sequence[ClientResult]) -> ServerState:
        """`state` with this round's clients added to those holding a personal model."""
        return {**state, PERSONALISED: state[PERSONALISED] | {r.client_id for r in results}}

    def evaluation_payloads(self, state: ServerState, clients: Sequence[int]) -> dict[int, Payload]:
        """Nothing for a client with a personal model (it evaluates that); the global model for the others."""
        return {cid: Payload() if cid in state[PERSONALISED] else state["global"] for cid in clients}

    def client_evaluate(self, payload: Payload, state: ClientState, data: ClientData, ctx: RoundContext) -> Metrics:
        """The personal model where the client has one, else the payload's (global) model."""
        return evaluate(self.model_with(state.get(PERSONAL, payload.weights)), data, device=ctx.device)

    def client_share(self, payload: Payload, state: ClientState) -> Payload:
        """The personal model, for system accuracy's vote (nothing for a client that never trained: it votes with
        the global model, its system payload)."""
        return Payload(state[PERSONAL]) if PERSONAL in state else Payload()


def make_algorithm(spec: RunSpec, input_shape: tuple[int, ...], num_classes: int,
                   distributions: int | None = None) -> Algorithm:
    """The RunSpec's algorithm, configured, with a builder for the RunSpec's model.

    Args:
        distributions: the scenario's number of training distributions (`Scenario.trained_distributions`).
    """
    cls = ALGORITHMS.get(spec.algorithm.name, field="algorithm.name")
    builder = ModelBuilder(spec.model.name, tuple(input_shape), num_classes, spec.model.params)
    training = LocalTraining(spec.local_epochs, spec.batch_size, spec.optimizer)
    return cls(cls.Config(**spec.algorithm.kwargs), builder, spec.scenario.num_clients, spec.seed, spec.rounds, training,
               distributions)


SAMPLES = "samples"
"""Uplink section `{"n": int64 [1]}`: the client's training-set size, by which FedAvg-style averages weigh its
model (a real client sends it, so it is metered)."""


def warn_if_phase_covers_run(field: str, rounds_of_phase: int, spec: RunSpec, consequence: str) -> None:
    """For `check_run`: warn (naming `algorithm.<field>`) when a phase counted in rounds (a warm-up, ATP's rate
    rounds) lasts the whole run, so what follows it never happens and `consequence` is what the run amounts to."""
    if rounds_of_phase >= spec.rounds:
        warnings.warn(f"algorithm.{field}: {rounds_of_phase} >= rounds ({spec.rounds}): {consequence}; lower {field} "
                      "or raise rounds", stacklevel=3)


def counted(weights: Arrays | None, n: int, extras: dict[str, Arrays] | None = None) -> Payload:
    """A client's uplink: its model's weights (None: no model), its training-set size and the method's extras."""
    return Payload(weights, {**(extras or {}), SAMPLES: {"n": np.array([n], dtype=np.int64)}})


def sample_counts(results: Sequence[ClientResult]) -> list[int]:
    """The training-set sizes the results' uplinks carry, in their order."""
    return [int(r.uplink[SAMPLES]["n"][0]) for r in results]


def average_uplinks(results: Sequence[ClientResult]) -> Arrays:
    """FedAvg's average (McMahan et al. 2017) of the results' `weights` sections, by their sample counts."""
    return average_weights([r.uplink.weights for r in results], sample_counts(results))


class UplinkAverage:
    """`average_uplinks` as a fold (FedAvg's `aggregator`): each result's weights go into the running float64
    sums as it arrives and are dropped, so a round holds one average, not every client's model.

    The coefficients n_k / n need every n_k first: they are the sampled clients' training-set sizes, which the
    runtime knows before the round; each uplink's own count is checked against them, so the numbers are those
    of `average_uplinks` over the same results, bit for bit.
    """

    def __init__(self, state: ServerState, train_sizes: Mapping[int, int]):
        self.state = state
        self.order = sorted(train_sizes)
        self.sizes = dict(train_sizes)
        self.average = RunningAverage([train_sizes[cid] for cid in self.order])

    def add(self, result: ClientResult) -> None:
        expected = self.order[self.average.added]
        [n] = sample_counts([result])
        if result.client_id != expected or n != self.sizes[expected]:
            raise RuntimeError(f"streamed aggregation expected client {expected} with {self.sizes[expected]} training "
                               f"samples, got client {result.client_id} with {n}")
        self.average.add(result.uplink.weights)

    def finish(self) -> ServerState:
        return {**self.state, "global": Payload(self.average.result())}

"""The algorithm interface: a server half and a pure client half, in one class per method.

The core every method implements (`Algorithm`): server half (driver) `init_state`, `configure`, `aggregate`,
`evaluation_payloads`; client half (any worker, no shared memory with the server) `client_update`,
`client_evaluate`. What a method can do beyond that it opts into by type (`fedbench.algorithms.capabilities`).
Each method owns its typed states: `State` (the server's, between rounds) and `ClientState` (a client's, kept by
the runtime's state store between its jobs), frozen dataclasses the runtime treats as opaque and a checkpoint
serialises (`fedbench.core.state_codec`).

The runtime calls these; an algorithm never imports Ray, MLflow or the runtime, never counts bytes
(the runtime meters every Payload) and never writes a training loop (it passes hooks to `train_local`).

What travels is a `Payload`: the model being federated in its `weights` section, everything else (the
sample count `counted` adds, profiles, cluster ids) in extra sections the method names, several models in
`Payload.models` by index. FedAvg-style averages (`average_uplinks`) read only `weights`, so an extra can never
be averaged into a model.
"""

from __future__ import annotations

import dataclasses
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import numpy as np
import torch
from torch import nn

from fedbench.algorithms.capabilities import Assignment, ClientStateT, StateT, TestTimeAssignment
from fedbench.core.errors import ConfigError, DegenerateRunWarning
from fedbench.core.registry import ALGORITHMS
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, LocalTraining, Metrics, Payload, RoundContext, derive_seed
from fedbench.models import build_model
from fedbench.training import ClientData, RunningAverage, average_weights, evaluate, get_weights, set_weights


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

    def check_run(self, spec: RunSpec) -> None:
        """Refuse, when the task loads, a run this method cannot train with these values (a model without an input
        it needs); raises ConfigError naming the absolute field (`model.name`). By default every run is fine."""


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
class GlobalState:
    """Server state of a method that federates one global model (FedAvg and the methods built on it)."""

    global_model: Payload


@dataclass(frozen=True)
class NoClientState:
    """Client state of a method whose clients keep nothing between jobs."""


ConfigT = TypeVar("ConfigT", bound=AlgorithmConfig)
"""A method's hyperparameters (its `Config`)."""


class HoldsGlobalModel(Protocol):
    """A server state with one global model: what the core's default hooks read (`GlobalState` and the states of the
    methods built on FedAvg)."""

    @property
    def global_model(self) -> Payload: ...


def with_global_model(state: StateT, model: Payload) -> StateT:
    """`state` with `model` as its global model: the update of the default hooks (FedAvg's), for a `GlobalState` or
    any frozen dataclass state with the same `global_model` field (`HoldsGlobalModel`), whose other fields it keeps."""
    return cast(StateT, dataclasses.replace(cast(GlobalState, state), global_model=model))


class Algorithm(ABC, Generic[ConfigT, StateT, ClientStateT]):
    """The core every method implements. Subclasses set `Config`, `State` and `ClientState`, name the same three
    types as its parameters (`Algorithm["IFCA.Config", IFCAState, NoClientState]`, so that mypy checks every hook
    against them), and override the halves they change; the defaults are a method that federates one global model
    (`GlobalState`)."""

    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    State: ClassVar[type] = GlobalState
    """The server's state between rounds: a frozen dataclass the method owns."""
    ClientState: ClassVar[type] = NoClientState
    """A client's state between its jobs: a frozen dataclass the method owns, built with no arguments for a client
    that never ran a job (and for test-time clients)."""
    client_metrics: ClassVar[tuple[str, ...]] = ()
    """Keys `client_update` reports beside `metrics.FIT_KEYS` (a detector's statistic, a reset flag): the runtime
    records each round's mean over the clients as `client_<key>_mean` and each client's value in the per-client
    table, unmetered (a number kept for the record, not sent as communication). A key not declared fails the run."""

    @classmethod
    def check_spec(cls, spec: RunSpec) -> None:
        """Refuse, when the task loads, a run this method cannot honour whatever its Config: scoring the round of
        lowest validation loss (`RunSpec.scored_round`) keeps only the server's state of that round, so a method
        whose clients keep state would answer with later rounds' client states."""
        if spec.scored_round == "lowest_validation_loss" and cls.ClientState is not NoClientState:
            raise ConfigError(
                "scored_round",
                spec.scored_round,
                f"last for {spec.algorithm.name} (its clients keep state between rounds, which is not kept per "
                "round); lowest_validation_loss is for methods whose clients keep none, e.g. fedavg",
            )

    def __init__(
        self,
        config: ConfigT,
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

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> StateT:
        """The server's state before round 1: by default `State` (a `GlobalState` whose other fields have defaults)
        holding the initial global model."""
        return cast(StateT, self.State(Payload(self.initial_weights())))

    def configure(self, round: int, state: StateT, sampled: Sequence[int]) -> dict[int, Payload]:
        """Per-client downlink for this round (by default, the global model to every sampled client).

        Return the same Payload object for clients that receive the same content: the runtime ships it once.
        """
        return dict.fromkeys(sampled, cast(HoldsGlobalModel, state).global_model)

    def aggregate(self, round: int, state: StateT, results: Sequence[ClientResult]) -> StateT:
        """The next server state from this round's results (given in client-id order)."""
        return state

    def evaluation_payloads(self, state: StateT, clients: Sequence[int]) -> dict[int, Payload]:
        """What each client evaluates on its local test split (by default, the global model)."""
        return dict.fromkeys(clients, cast(HoldsGlobalModel, state).global_model)

    # -- client half ---------------------------------------------------------------------------------
    @abstractmethod
    def client_update(
        self, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientStateT, Metrics]:
        """One client's job in a round: (its uplink, its new `ClientState`, its training metrics)."""

    def client_evaluate(self, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext) -> Metrics:
        """Accuracy of the payload's model (by default) on the client's local test split."""
        return evaluate(self.model_with(payload.weights), data, device=ctx.device)

    # -- helpers for subclasses ----------------------------------------------------------------------
    def resolve_clusters(self, configured: int | None) -> int:
        """K for a clustering method (IFCA, FeSEM, FedRC): its `clusters` field where set, else the scenario's
        number of training distributions, the true K (001 Sec. IV-C); ConfigError where neither is known."""
        clusters = configured if configured is not None else self.distributions
        if clusters is None:
            raise ConfigError(
                "algorithm.clusters",
                None,
                "an integer >= 1: this scenario's number of distributions "
                "is unknown here (the runtime gives it to algorithms it builds)",
            )
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


class GlobalModelAtTestTime(TestTimeAssignment[StateT]):
    """Test time of a method with one global model (a `GlobalState`, or a state with the same field): every test
    client gets it. A method built on one whose state holds no global model overrides `assign` (CFL, FeSEM)."""

    def assign(self, state: StateT, descriptions: dict[int, Payload]) -> Assignment:
        return Assignment({tid: cast(HoldsGlobalModel, state).global_model for tid in descriptions})


def make_algorithm(
    spec: RunSpec, input_shape: tuple[int, ...], num_classes: int, distributions: int | None = None
) -> Algorithm[Any, Any, Any]:
    """The RunSpec's algorithm, configured, with a builder for the RunSpec's model.

    Args:
        distributions: the scenario's number of training distributions (`Scenario.trained_distributions`).
    """
    cls = ALGORITHMS.get(spec.algorithm.name, field="algorithm.name")
    builder = ModelBuilder(spec.model.name, tuple(input_shape), num_classes, spec.model.params)
    training = LocalTraining(spec.local_epochs, spec.batch_size, spec.optimizer)
    return cls(
        cls.Config(**spec.algorithm.kwargs),
        builder,
        spec.scenario.num_clients,
        spec.seed,
        spec.rounds,
        training,
        distributions,
    )


SAMPLES = "samples"
"""Uplink section `{"n": int64 [1]}`: the client's training-set size, by which FedAvg-style averages weigh its
model (a real client sends it, so it is metered)."""


def warn_if_phase_covers_run(field: str, rounds_of_phase: int, spec: RunSpec, consequence: str) -> None:
    """For `Config.check_run`: warn (naming `algorithm.<field>`) when a phase counted in rounds (a warm-up, ATP's rate
    rounds) lasts the whole run, so what follows it never happens and `consequence` is what the run amounts to."""
    if rounds_of_phase >= spec.rounds:
        warnings.warn(
            DegenerateRunWarning(
                f"algorithm.{field}",
                f"{rounds_of_phase} >= rounds ({spec.rounds}): {consequence}; lower {field} or raise rounds",
            ),
            stacklevel=3,
        )


def counted(weights: Arrays | None, n: int, extras: dict[str, Arrays] | None = None) -> Payload:
    """A client's uplink: its model's weights (None: no model), its training-set size and the method's extras."""
    return Payload(weights, {**(extras or {}), SAMPLES: {"n": np.array([n], dtype=np.int64)}})


def samples_of(uplink: Payload) -> int:
    """The training-set size an uplink carries (`counted`)."""
    return int(uplink[SAMPLES]["n"][0])


def sample_counts(results: Sequence[ClientResult]) -> list[int]:
    """The training-set sizes the results' uplinks carry, in their order."""
    return [samples_of(r.uplink) for r in results]


def average_uplinks(results: Sequence[ClientResult]) -> Arrays:
    """FedAvg's average (McMahan et al. 2017) of the results' `weights` sections, by their sample counts."""
    return average_weights([r.uplink.weights for r in results], sample_counts(results))


CLUSTER = "cluster"
"""Uplink section `{"id": int64 [1]}`: the cluster whose model the client trained (IFCA, FedDrift) or the
distribution it trained on (Oracle)."""


def cluster_section(k: int) -> dict[str, Arrays]:
    """The `CLUSTER` section reporting cluster `k`, for `counted`'s extras or a test client's description."""
    return {CLUSTER: {"id": np.array([k], dtype=np.int64)}}


def reported_cluster(uplink: Payload) -> int:
    """The cluster id an uplink reports (`cluster_section`)."""
    return int(uplink[CLUSTER]["id"][0])


def cluster_averages(results: Sequence[ClientResult], cluster_of: Callable[[ClientResult], int]) -> dict[int, Payload]:
    """FedAvg within clusters: each cluster's sample-weighted average of its members' `weights`, for the clusters
    with a member among `results` (each averaged in the results' client-id order)."""
    members: dict[int, list[ClientResult]] = {}
    for r in results:
        members.setdefault(cluster_of(r), []).append(r)
    return {k: Payload(average_uplinks(group)) for k, group in members.items()}


class UplinkAverage(Generic[StateT]):
    """`average_uplinks` as a fold (FedAvg's `aggregator`): each result's weights go into the running float64
    sums as it arrives and are dropped, so a round holds one average, not every client's model; `finish` puts it
    in `state` (`with_global_model`).

    The coefficients n_k / n need every n_k first: they are the sampled clients' training-set sizes, which the
    runtime knows before the round; each uplink's own count is checked against them, so the numbers are those
    of `average_uplinks` over the same results, bit for bit.
    """

    def __init__(self, state: StateT, train_sizes: Mapping[int, int]):
        self.state = state
        self.order = sorted(train_sizes)
        self.sizes = dict(train_sizes)
        self.average = RunningAverage([train_sizes[cid] for cid in self.order])

    def add(self, result: ClientResult) -> None:
        expected = self.order[self.average.added]
        n = samples_of(result.uplink)
        if result.client_id != expected or n != self.sizes[expected]:
            raise RuntimeError(
                f"streamed aggregation expected client {expected} with {self.sizes[expected]} training "
                f"samples, got client {result.client_id} with {n}"
            )
        self.average.add(result.uplink.weights)

    def finish(self) -> StateT:
        return with_global_model(self.state, Payload(self.average.result()))

"""What a method can do beyond the core every method implements (`Algorithm`): capabilities it opts into by
inheriting their type. The runtime asks `isinstance(algorithm, TestTimeAssignment)`, never a flag or a string.

- `StreamedAggregation`: aggregates as a fold over the results, one at a time (FedAvg), so a round never holds
  every client's model.
- `RoundReport`: the server half computes numbers of its own each round (cluster sizes, FEROMA's kinds).
- `DescribedRound`: before `configure`, each sampled client describes the data it holds this round, and the server
  builds its downlink for that data (FEROMA's profile exchange, 002 Sec. 3.2).
- `TestTimeAssignment`: unseen test clients (002 Sec. 3.3) get a model chosen for them, after optionally
  describing themselves (FEROMA's profile).
- `SystemVote`: the federation answers a pooled test set with every client's personal model (004 Sec. 5).
- `PersonalModels`: each client's personal model is completed by what only the client holds (Ditto's personal
  model, FedRep's head); for the vote each client uploads that part once, after the last round.
- `PeerRelay`: a decentralized method simulated through the server as a relay (Gossip, DAC): its uplinks only
  park models there and are not metered; peers' payloads arrive in `Payload.peers`, charged to both ends.
- `SecondReading`: the last round's local accuracy is also read a second way from the same models (Gossip: its
  trained model, and that model mixed with its next partner's), so that one run answers both readings.
- `ReadsGroundTruth`: the client half is told each client's true distribution id (`RoundContext.distribution_id`);
  an oracle's ceiling (001 Sec. IV-C). Every other method's jobs get -1, so a drift detector cannot become an
  oracle by accident.

The protocols that use them live in `fedbench.runtime.evaluation`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import ClientData, predict, probabilities

if TYPE_CHECKING:
    from torch import nn

StateT = TypeVar("StateT")
"""A method's server state between rounds (its `State`)."""
ClientStateT = TypeVar("ClientStateT")
"""A method's client state between jobs (its `ClientState`)."""
StateT_co = TypeVar("StateT_co", covariant=True)
"""A server state a fold builds (`Aggregator`)."""
StateT_contra = TypeVar("StateT_contra", contravariant=True)
"""A server state a hook reads (`EvaluatesPayloads`)."""


class HoldsModels(Protocol):
    """What a capability's default client half needs of the method it is mixed into (`Algorithm`)."""

    def model_with(self, weights: Arrays) -> nn.Module: ...


class EvaluatesPayloads(Protocol[StateT_contra]):
    """What `SystemVote`'s default needs of the method it is mixed into (`Algorithm`)."""

    def evaluation_payloads(self, state: StateT_contra, clients: Sequence[int]) -> dict[int, Payload]: ...


class Aggregator(Protocol[StateT_co]):
    """A round's aggregation as a fold (`StreamedAggregation.aggregator`): results are added in client-id order."""

    def add(self, result: ClientResult) -> None: ...

    def finish(self) -> StateT_co: ...


class ReadsGroundTruth:
    """A method told what no real method knows: each client's ground-truth distribution id, in its jobs'
    `RoundContext.distribution_id`. Only an oracle declares it (001 Sec. IV-C's Oracle, the ceiling clustering
    methods are measured against); for every other method the runtime passes -1, and the contract test shows that
    permuting the scenario's ids leaves each one's whole history bit-identical."""


class StreamedAggregation(ABC, Generic[StateT]):
    """Aggregation as a fold that builds the same next state as `aggregate`, bit for bit."""

    @classmethod
    def streams(cls) -> bool:
        """Whether this class aggregates with its fold: a subclass that changes `aggregate` says no, and its
        `aggregate` gets the whole list."""
        return True

    @abstractmethod
    def aggregator(self, round: int, state: StateT, train_sizes: Mapping[int, int]) -> Aggregator[StateT]:
        """A fold over this round's fit results in client-id order. `train_sizes`: each sampled client's
        training-set size, known before any result arrives."""


class RoundReport(ABC, Generic[StateT]):
    """The server half reports numbers of its own with every round."""

    @abstractmethod
    def round_metrics(self, state: StateT) -> Metrics:
        """Numbers computed in the `aggregate` that returned `state`; the runtime adds them to the round record."""


class DescribedRound(ABC, Generic[StateT, ClientStateT]):
    """A round in two exchanges (002 Sec. 3.2, Algorithm 1): every sampled client first describes the data it holds
    this round, the server turns the descriptions into the state `configure` builds the downlinks from, and the
    clients then train what they were sent on that same data. Without it a method can only fit a client's model to
    the data the client described the round before, one drift stage behind."""

    @abstractmethod
    def round_describe_payloads(self, round: int, state: StateT, sampled: Sequence[int]) -> dict[int, Payload]:
        """What each sampled client needs to describe its data this round (FEROMA: the frozen extractor, to a client
        that does not hold it yet). Empty: no description this round (a warm-up), `configure` runs as usual."""

    @abstractmethod
    def client_describe_round(
        self, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientStateT]:
        """A training client's description of this round's data (`data.train`), and its new client state."""

    @abstractmethod
    def receive_descriptions(self, round: int, state: StateT, descriptions: Sequence[ClientResult]) -> StateT:
        """The server state `configure` reads this round, from the clients' descriptions (in client-id order)."""


@dataclass(frozen=True)
class TrainedOn:
    """What a model given to a test client was trained on: `client`'s data of `round`; None: of the last round
    (a model its client kept training to the end). Association accuracy compares that data's distribution, not the
    client's current one, with the test client's."""

    client: int
    round: int | None = None


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
    """The server's test-time decision: what each test client predicts with.

    Attributes:
        payloads: test client id -> the payload its `client_evaluate` runs; a test client left out is not evaluated.
        matched: test client id -> what the model it was given was trained on (`TrainedOn`), for methods that pick
            one (FEROMA); the runtime scores these associations against the scenario's ground truth.
        ensemble: instead of `payloads`, one size-weighted ensemble every described test client downloads whole
            and predicts with (`Assignment.size_weighted`).
    """

    payloads: dict[int, Payload]
    matched: dict[int, TrainedOn] = field(default_factory=dict)
    ensemble: Ensemble | None = None

    @classmethod
    def size_weighted(cls, models: dict[int, Payload], sizes: dict[int, float], test_ids: Sequence[int]) -> Assignment:
        """Every test client in `test_ids` gets the ensemble of `models` weighted by `sizes`, the number of
        clients behind each model (002 App. I.3: "we weight all models by the number of clients in the cluster")."""
        if not test_ids or not models:
            return cls({})
        return cls({tid: Payload() for tid in test_ids}, ensemble=Ensemble(models, sizes))


class TestTimeAssignment(ABC, Generic[StateT]):
    """Unseen test clients (002 Sec. 3.3) are evaluated after the last round, with what `assign` gives them."""

    __test__ = False  # not a pytest test class, despite its name

    picks_by_description: ClassVar[bool] = False
    """True for a method whose `assign` picks a model from what the test client tells (FEROMA's profile, FedDRM's
    routes, the Oracle's distribution id): it keeps its rule under `test_time: known`, which gives the methods
    without one the known association instead (002 App. E)."""

    def describe_payloads(self, state: StateT, test_clients: Sequence[int]) -> dict[int, Payload]:
        """What each test client needs to describe itself before `assign` (FEROMA: the frozen profile extractor).
        Empty (the default): test clients send nothing, and `assign` gets an empty description from each."""
        return {}

    def client_describe(self, payload: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        """A test client's uplink for `assign`. Its `data.train` holds only the few labelled samples it may
        use (002 App. E; often none), `data.test` all its samples; labels of `data.test` are never to be used."""
        return Payload()

    @abstractmethod
    def assign(self, state: StateT, descriptions: dict[int, Payload]) -> Assignment:
        """A payload per test client (or an ensemble), from the final state and each test client's description."""

    def client_probabilities(self: HoldsModels, payload: Payload, data: ClientData, ctx: RoundContext) -> np.ndarray:
        """Class probabilities (float64 [n_test, num_classes]) of the payload's model on `data`'s test split, which a
        test client averages over an `Ensemble`'s models."""
        return probabilities(self.model_with(payload.weights), data, device=ctx.device).numpy()


class SystemVote(Generic[StateT, ClientStateT]):
    """System accuracy (004 Sec. 5): every client's personal model answers a pooled test set."""

    def system_payloads(self: EvaluatesPayloads[StateT], state: StateT, clients: Sequence[int]) -> dict[int, Payload]:
        """Every training client's personal model as the server holds it: by default what it evaluates. With
        `PersonalModels` each entry (empty where the server holds nothing of it) is merged with what its client
        uploads (`client_share`). Otherwise an empty payload for some client means part of the personal models
        never reaches the server, so the run has no system accuracy."""
        return self.evaluation_payloads(state, clients)

    def client_predict(
        self: HoldsModels, payload: Payload, state: ClientStateT, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        """Predictions of the payload's model on `data`'s test split.

        Returns:
            `M.PRED`: int64 [n_test] predicted classes; methods with a router add `M.ROUTE`: float [n_test,
            num_clients], scores whose argmax is the client whose model should answer (004 eq. 9).
        """
        return {M.PRED: predict(self.model_with(payload.weights), data, device=ctx.device).numpy()}


class PersonalModels(ABC, Generic[ClientStateT]):
    """Each client's personal model is completed by what only the client holds."""

    @abstractmethod
    def client_share(self, payload: Payload, state: ClientStateT) -> Payload:
        """What the client adds to its `system_payloads` entry (`payload`) to make its personal model: arrays it
        replaces or adds, section by section (FedRep: its head); empty where it adds nothing."""


class SecondReading(ABC, Generic[StateT]):
    """After the last round (from the models the run is scored with), local accuracy is read a second way beside the
    run's own: where a paper does not say which of two points it reports, one run answers both, each recorded under
    its own name. Its evaluation jobs are not the protocol's, so they are neither metered nor counted as compute."""

    @abstractmethod
    def first_reading(self) -> str:
        """The name the run's own mean local accuracy (`acc_local_mean`) is also recorded under."""

    @abstractmethod
    def second_reading(self, state: StateT, clients: Sequence[int]) -> tuple[str, dict[int, Payload]]:
        """The metric the second reading's mean local accuracy is recorded as, and what each client evaluates with
        for it (read by the method's `client_evaluate`, as a local evaluation's payload is)."""


class PeerRelay:
    """A decentralized method simulated through the server as a relay: its uplinks are not metered (they only park
    at the relay); what peers send each other travels in `Payload.peers` of the downlinks, charged to both ends."""


def gets_given_association(method: type, association: str) -> bool:
    """Whether `method`'s test-time clients are given a training client's personal model by the RunSpec's
    `test_time` (`association`) rather than by the method's rule: with `known` (002 App. E's known association) or
    `index` (the
    same-index client, 002's baseline code), and only for a method with test-time clients and personal models for
    the vote (what a test client is then given) but no rule of its own to pick one
    (`TestTimeAssignment.picks_by_description`)."""
    return (
        association in ("known", "index")
        and issubclass(method, TestTimeAssignment)
        and issubclass(method, SystemVote)
        and not method.picks_by_description
    )


CAPABILITIES: tuple[type, ...] = (
    StreamedAggregation,
    RoundReport,
    DescribedRound,
    TestTimeAssignment,
    SystemVote,
    PersonalModels,
    PeerRelay,
)


def capabilities_of(cls: type) -> list[str]:
    """The names of the capabilities an algorithm class has, in `CAPABILITIES` order, then `FunctionalFit` (for
    `fedbench list`)."""
    from fedbench.algorithms.functional_fit import FunctionalFit  # beside the core, whose `counted` it uses

    return [
        capability.__name__
        for capability in CAPABILITIES
        if issubclass(cls, capability)
        and (capability is not StreamedAggregation or (issubclass(cls, StreamedAggregation) and cls.streams()))
    ] + (["FunctionalFit"] if issubclass(cls, FunctionalFit) and cls.fits_functionally() else [])

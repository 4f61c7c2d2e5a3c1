"""RunSpec: one fully resolved configuration, frozen, serializable, with a stable short hash (the run id).

The types declare each field once. Serialisation (`to_dict`, `flat`), the run hash and every cache key are
derived from the dataclass fields by `plain`, so adding a field is one edit and cannot drop out of the
run's identity. Field metadata marks the exceptions, on the field itself:

- `NOT_IDENTITY`: a field that does not change what a run computes (where it runs, where the data lives);
  serialised, but left out of the run hash.
- `IDENTITY_UNLESS_DEFAULT`: a field added after runs were recorded; in the run hash only when not at its default.
- `INLINE`: a component whose parameters sit in its parent's section (`scenario: {partition: dirichlet,
  alpha: 0.3}`), as task files write them.
- `component(REGISTRY)`: a registered thing chosen by name, whose parameters the registry entry declares.

Each type checks its own values in `__post_init__` and names fields relative to itself; the parser in
`fedbench.config` turns a task's mapping into these types and fills in the path (`scenario.shifts[1].sigma`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import yaml

from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS, BACKENDS, DATASETS, MODELS, PARTITIONS, SHIFTS, Registry
from fedbench.core.types import OptimizerSpec

Params = tuple[tuple[str, Any], ...]

NOT_IDENTITY = {"identity": False}
"""Field metadata: serialised, but not part of the run hash (it does not change what the run computes)."""
IDENTITY_UNLESS_DEFAULT = {"identity": "unless_default"}
"""Field metadata: part of the run hash only when set away from its default, so that adding the field leaves
every existing run's hash (and what was recorded under it) as it was."""
INLINE = "inline"
"""Field metadata key: the component's name goes under the field's name, its parameters into the parent."""


def component(registry: Registry, skip: int = 0, inline: bool = False) -> dict[str, Any]:
    """Field metadata of a registered component: its registry, and how many leading positional parameters of
    the registered callable are not user parameters (a model's `input_shape, num_classes`)."""
    return {"registry": registry, "skip": skip, INLINE: inline}


REGISTERED_NAME = "registered_name"
"""Field metadata key: a plain string that must name an entry of this registry (`resources.backend`); the entry
takes no parameters, so the field holds the name alone."""


@dataclass(frozen=True)
class Component:
    """A registered thing chosen by name (dataset, model, algorithm, partition) and its resolved parameters."""

    SHORTHAND: ClassVar[str] = "name"
    """A task may write the bare name (`algorithm: fedavg`) for a mapping of this field alone."""

    name: str
    params: Params = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class DatasetSpec(Component):
    """A dataset by name and its loader options; `data_root` says where its files are on this machine."""

    data_root: str | None = field(default=None, metadata=NOT_IDENTITY)


@dataclass(frozen=True)
class Normalization:
    """How image inputs are standardised, (x - mean) / std per channel, on the worker after the shift
    transforms (so a colour or noise shift acts on the pixel values the paper describes).

    The papers differ: FEROMA's code does not normalise, FedDRM uses Normalize(0.5, 0.5), common practice is
    each dataset's mean and std (MNIST (0.1307, 0.3081)). Scenario presets default to their paper's choice.
    Vector (non-image) datasets are never normalised.
    """

    SHORTHAND: ClassVar[str] = "mode"

    mode: Literal["none", "dataset", "values"] = "dataset"
    """none: x in [0, 1]; dataset: the loader's published per-channel mean and std (computed from the official
    training split where none is published); values: `mean` and `std` as given."""
    mean: tuple[float, ...] = ()
    """Per-channel means (one value for every channel, or one per channel) for mode `values`."""
    std: tuple[float, ...] = ()
    """Per-channel standard deviations, > 0, for mode `values`."""

    def __post_init__(self) -> None:
        if self.mode != "values":
            for name in ("mean", "std"):
                if getattr(self, name):
                    raise ConfigError(
                        name,
                        list(getattr(self, name)),
                        f"only with mode: values (mode is {self.mode!r}); write mode: values to give your own",
                    )
            return
        if len(self.mean) not in (1, 3):
            raise ConfigError("mean", list(self.mean), "1 value (every channel) or 3 (one per RGB channel)")
        if len(self.std) != len(self.mean):
            raise ConfigError("std", list(self.std), f"{len(self.mean)} values, as many as mean")
        if not all(s > 0 for s in self.std):
            raise ConfigError("std", list(self.std), "standard deviations > 0")


@dataclass(frozen=True)
class TestClientSpec:
    """The test-time clients: data a run is evaluated on after training, never trained on (002 Sec. 3.3, I.7)."""

    __test__ = False  # not a pytest test class, whatever its name

    mode: Literal["feroma", "own", "next", "none"] = "feroma"
    """feroma: drawn from all clients' last-stage distributions, the client's own for P(Y|X) concept shift
    (docs/methods.md, ANDA); own: each client's last distribution; next: its next drifted one; none: no test clients."""
    unseen_rate: float = 0.0
    """Share of test clients given a distribution no client trained on (002 I.7: 0% to 100%)."""
    labelled_per_class: int = 0
    """Labelled samples per class a method may use to pick a model (002 App. E: 20); the rest are unlabelled."""
    size: int | None = None
    """Samples per test client; None: as many as the matching training client's local test split."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.unseen_rate <= 1.0:
            raise ConfigError("unseen_rate", self.unseen_rate, "a number in [0, 1]")
        if self.labelled_per_class < 0:
            raise ConfigError("labelled_per_class", self.labelled_per_class, "an integer >= 0")
        if self.size is not None and self.size < 1:
            raise ConfigError("size", self.size, "an integer >= 1 or null")


@dataclass(frozen=True)
class ScenarioSpec:
    """How the dataset becomes a federation: a partition, shifts layered on it, drift, test-time clients."""

    partition: Component = field(default=Component("iid"), metadata=component(PARTITIONS, inline=True))
    """The partition's name; its parameters sit beside the scenario's own fields (`alpha: 0.3`)."""
    shifts: tuple[Component, ...] = field(default=(), metadata=component(SHIFTS))
    """Feature and concept shifts, applied in order (transforms compose, label maps compose)."""
    num_clients: int = 10
    test_fraction: float = 0.2
    """Share of each client's data kept for its local test split (002 Sec. 5: 20%; 004: 30%)."""
    source: Literal["train", "all"] = "train"
    """Which official split is partitioned: the training set only, or train and test pooled (004 Sec. 5)."""
    local_test: Literal["split", "official"] = "split"
    """split: each client's own random split of its data; official: drawn from the official test split with
    the client's class mix, as 001 Sec. IV-B splits test data identically to training data."""
    drift_every: int | None = None
    """Rounds between drifts: every client's distribution changes every k rounds (002 I.2: 4, 2, 1)."""
    copies: int = 1
    """How often the pool is duplicated for large federations (002 I.3: 2 for 50 clients, 3 for 100)."""
    test_clients: TestClientSpec = TestClientSpec()
    preset: str | None = None
    """The named preset the section was expanded from, if any (for provenance; its values are filled in)."""

    def __post_init__(self) -> None:
        checks = [
            ("num_clients", self.num_clients >= 1, "an integer >= 1"),
            ("test_fraction", 0.0 <= self.test_fraction < 1.0, "a number in [0, 1)"),
            ("drift_every", self.drift_every is None or self.drift_every >= 1, "an integer >= 1 or null (no drift)"),
            ("copies", self.copies >= 1, "an integer >= 1"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ConfigError(name, getattr(self, name), allowed)


@dataclass(frozen=True)
class ResourceSpec:
    """Where a run executes. Not part of the run id: it does not change what a run computes, except on the batched
    backend, whose vectorised passes sum in another order (within docs/backends.md's tolerance, and tagged on the
    run as `clients.numerics`)."""

    backend: str = field(default="serial", metadata={REGISTERED_NAME: BACKENDS})
    """Where client jobs run: a registered backend (`fedbench.runtime.backends`): `serial` (this process), `ray` (a
    pool of Ray actors), `batched` (those actors, training many clients of a FedAvg-family method in one vectorised
    pass: docs/backends.md)."""
    client_cpus: float = 1.0
    """CPUs a client worker reserves (Ray's scheduling); its jobs run on one torch thread whatever this says, so
    that the numbers do not depend on it (results differ with the thread count)."""
    client_gpus: float = 0.0
    num_workers: int | None = None
    """Client workers in the Ray pool; None: as many as the free CPUs (and GPU fractions) allow."""
    clients_per_pass: int | None = None
    """The batched backend's clients per vectorised pass (bounded by the device's memory); None: all of a round's
    sampled clients in one pass. A run's numbers depend on it (docs/backends.md), not on `num_workers`."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.client_cpus) and self.client_cpus > 0):  # NaN compares False with everything
            raise ConfigError("client_cpus", self.client_cpus, "a finite number > 0")
        if not (math.isfinite(self.client_gpus) and self.client_gpus >= 0):
            raise ConfigError("client_gpus", self.client_gpus, "a finite number >= 0 (a fraction of a GPU is allowed)")
        if self.num_workers is not None and self.num_workers < 1:
            raise ConfigError("num_workers", self.num_workers, "an integer >= 1, or null for as many as fit")
        if self.clients_per_pass is not None and self.clients_per_pass < 1:
            raise ConfigError(
                "clients_per_pass", self.clients_per_pass, "an integer >= 1, or null for all of a round's"
            )


MAX_ROUNDS = 100_000
"""The most rounds a run may have: the papers' longest protocol is 800 (004), every round is logged to MLflow
and a drifting scenario builds a stage per `drift_every` rounds, so a larger number is a typo (`rounds: 1e12`)."""


@dataclass(frozen=True)
class RunSpec:
    """One configuration: everything needed to reproduce a run. Defaults are FEROMA's setup (002 Sec. 5)."""

    task: str
    dataset: DatasetSpec = field(metadata=component(DATASETS, skip=1))
    model: Component = field(metadata=component(MODELS, skip=2))
    algorithm: Component = field(default=Component("fedavg"), metadata=component(ALGORITHMS))
    scenario: ScenarioSpec = ScenarioSpec()
    rounds: int = 20
    local_epochs: int = 2
    local_steps: int | None = None
    """Mini-batch steps per round instead of `local_epochs` (004 trains 10 steps a round); None: epochs."""
    batch_size: int = 64
    optimizer: OptimizerSpec = OptimizerSpec()
    normalize: Normalization = Normalization()
    seed: int = 0
    eval_every: int = 1
    """Evaluate every client's local test split every this many rounds (and always at the last round)."""
    eval_clients: Literal["all", "sampled"] = field(default="all", metadata=IDENTITY_UNLESS_DEFAULT)
    """Whose local test split a round evaluates: every registered client, or only the round's sampled ones, so
    that a round of a large federation at partial participation costs what its sampled clients cost. The last
    round evaluates every client either way: the final numbers cover the whole federation."""
    system_accuracy: bool = field(default=True, metadata=IDENTITY_UNLESS_DEFAULT)
    """Report `acc_system` (004 Sec. 5: the pooled test splits, one answer per sample from the federation) and,
    where a router answers, `acc_routing`, after the last round. Where the clients' models differ (personal
    models vote) or a router picks one, that takes one more pass over every test split, each client running every
    distinct model (clients holding part of their model upload it first); where every client answers with the one
    model it was just evaluated with (FedAvg's global model), the vote is that model's answer, so `acc_system` is
    the last evaluation's pooled accuracy, taken from it without a pass. False: neither metric, and no pass."""
    test_time: Literal["own", "known", "index"] = field(default="own", metadata=IDENTITY_UNLESS_DEFAULT)
    """How the test-time clients (002 Sec. 3.3) get a model. `own`: each method's own rule: FEROMA's profile match,
    FedDRM's routing, the Oracle's cluster, and for a method with no rule to pick one model, the size-weighted
    ensemble of its models (clustered methods, 002 App. I.3) or its global model. `known`: 002's protocol (App. E,
    "baseline methods are evaluated under (optimal) known association"): a method with no rule of its own gives
    each test client the personal model of the training client whose last-round distribution it holds (its
    cluster's model, its personalised model, the global model); methods with a rule keep it, and a test client of
    a distribution no training client held gets the method's own answer. `index`: the association of the code 002's
    baselines come from (the LINs-lab/FedRC and microsoft/FedDrift adaptations score client i's test set with client
    i's own final pi, cluster or personal model): test client i gets training client i's personal model, whatever
    distribution it holds, which is the right one only where each test client keeps its own last distribution
    (P(Y|X), 002 App. I.2) and for global-model methods; methods with a rule keep it (docs/methods.md, FEROMA)."""
    scored_round: Literal["last", "lowest_validation_loss"] = field(default="last", metadata=IDENTITY_UNLESS_DEFAULT)
    """Which round's model the final scores (test-time clients, system accuracy) come from. `last`: the last
    round's, the platform's default. `lowest_validation_loss`: the round whose evaluation of every client had the
    lowest validation loss (each client's local test split, weighted by its size: Flower's distributed loss), as
    002's released FedAvg reports it (FEROMA `fedavg/server.py`: the checkpoint of `best_loss_round` is scored);
    `final.round_scored` records which. Only for methods whose clients keep no state between rounds (that state
    is not kept per round)."""
    resources: ResourceSpec = field(default_factory=ResourceSpec, metadata=NOT_IDENTITY)
    log_models: bool = field(default=False, metadata=NOT_IDENTITY)
    """Log the run's final model(s) as MLflow PyTorch models under the run's `models/` artifacts (`model_0`, ...;
    `models/clients.json` says which clients each is for): the models the server sends the clients to evaluate at
    the end (the scored round's under `scored_round`), one for a global-model method, one per cluster for a
    clustered one; a personalised method's clients adapt them further on their own. Off by default: a sweep of
    hundreds of runs would store as many models."""
    run_name: str | None = field(default=None, metadata=NOT_IDENTITY)
    """The run's display name (MLflow run name, progress lines); a task names its runs by what varies in its
    grid (`fedavg-cf0.5-a0.1-s0`). None: algorithm, dataset, seed and hash."""

    def __post_init__(self) -> None:
        for name in ("rounds", "local_epochs", "batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.rounds > MAX_ROUNDS:
            raise ConfigError(
                "rounds", self.rounds, f"at most {MAX_ROUNDS:,} (a sane maximum: the papers run up to 800)"
            )
        for name in ("system_accuracy", "log_models"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "true or false")
        if self.test_time not in ("own", "known", "index"):
            raise ConfigError(
                "test_time",
                self.test_time,
                "own (each method's rule), known (002 App. E's known "
                "association for methods without one) or index (test client i gets training client i's "
                "model, as 002's baseline code did)",
            )
        if self.scored_round not in ("last", "lowest_validation_loss"):
            raise ConfigError(
                "scored_round",
                self.scored_round,
                "last (the last round's model) or lowest_validation_loss (the round with the lowest validation "
                "loss, as 002's FedAvg)",
            )
        if self.local_steps is not None and self.local_steps < 1:
            raise ConfigError("local_steps", self.local_steps, "an integer >= 1, or null for local_epochs epochs")

    # -- serialization -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field as plain YAML/JSON values, as a task file writes them (what `fedbench.config` parses)."""
        return plain(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @functools.cached_property
    def run_hash(self) -> str:
        """10 hex digits identifying what the run computes (fields marked NOT_IDENTITY left out); computed once
        per spec (it is frozen): a sweep's plan, its resume and its callbacks ask for it again and again."""
        return digest(plain(self, identity_only=True))[:10]

    def flat(self) -> dict[str, Any]:
        """Dotted keys to scalar values, for MLflow params and tables (a new mapping each call; its values are
        shared)."""
        return dict(self._flat)

    @functools.cached_property
    def _flat(self) -> dict[str, Any]:
        """Computed once per spec (it is frozen): loading a task asks for every run's twice (reference fields, data
        configurations), 0.1 ms each."""
        return flatten(self.to_dict())

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    @property
    def label(self) -> str:
        return self.run_name or f"{self.algorithm.name}-{self.dataset.name}-s{self.seed}-{self.run_hash}"


_LEAVES = frozenset({str, int, float, bool, type(None)})


def plain(value: Any, identity_only: bool = False) -> Any:
    """A spec as plain JSON/YAML values, derived from its dataclass fields.

    Args:
        identity_only: leave out fields marked NOT_IDENTITY (what the run hash and cache keys cover).
    """
    if type(value) in _LEAVES:  # most calls: a task's plan turns thousands of specs into plain values
        return value
    if isinstance(value, Component):
        out = {"name": value.name, **{k: plain(v) for k, v in value.params}}
        out.update(_fields(value, identity_only, skip=("name", "params")))
        return out
    if dataclasses.is_dataclass(value):
        return _fields(value, identity_only)
    if isinstance(value, (tuple, list)):
        return [plain(v, identity_only) for v in value]
    if isinstance(value, dict):
        return {k: plain(v, identity_only) for k, v in value.items()}
    return value


def _fields(value: Any, identity_only: bool, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, identity, default, inline in _field_facts(type(value)):  # type: ignore[arg-type]  # classes hash
        if name in skip or (identity_only and not identity):
            continue
        if identity_only and identity == "unless_default" and getattr(value, name) == default:
            continue
        item = plain(getattr(value, name), identity_only)
        if inline:
            out[name] = item.pop("name")
            out.update(item)
        else:
            out[name] = item
    return out


@functools.cache
def _field_facts(cls: type) -> tuple[tuple[str, Any, Any, bool], ...]:
    """(name, identity, default, inline) of each dataclass field, read once per class: a paper suite's plan
    turns thousands of specs into plain values."""
    return tuple(
        (f.name, f.metadata.get("identity", True), f.default, bool(f.metadata.get(INLINE)))
        for f in dataclasses.fields(cls)
    )


def quiet_defaults() -> dict[str, str]:
    """RunSpec fields added after runs were recorded (`IDENTITY_UNLESS_DEFAULT`: the scored round, the test-time
    protocol...) -> their default as a string: as the run hash leaves them out at their default, a configuration's
    label does too, so that a grid setting one method's `scored_round` does not label every other method with
    `scored_round=last`."""
    return {f.name: str(f.default) for f in dataclasses.fields(RunSpec) if f.metadata == IDENTITY_UNLESS_DEFAULT}


def algorithm_defaults(name: str) -> dict[str, Any]:
    """Algorithm `name`'s Config defaults as plain values, as the Config declares them: what a task need not write.
    A field whose declared default is None (the method then picks one itself, from its variant) stays None, so a
    run that leaves it unset is never told apart from the default by it."""
    defaults = {}
    for f in dataclasses.fields(ALGORITHMS.get(name).Config):
        if f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = plain(f.default_factory())
        elif f.default is not dataclasses.MISSING:
            defaults[f.name] = plain(f.default)
    return defaults


def changed_params(algorithm: Component) -> dict[str, Any]:
    """The algorithm's parameters set away from its defaults: what tells one configuration of it from another
    (run names, dry-run tables and leaderboard labels show these)."""
    if not algorithm.params:
        return {}
    defaults = algorithm_defaults(algorithm.name)
    return {k: v for k, v in plain(algorithm).items() if k != "name" and defaults.get(k) != v}


def digest(tree: Any) -> str:
    """A stable hex digest of plain values (key order does not matter), for run ids and cache keys."""
    blob = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat

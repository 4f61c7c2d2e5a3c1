"""RunSpec: one fully resolved configuration, frozen, serializable, with a stable short hash (the run id)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from fedbench.core.fields import coerce, resolve_params, signature_fields
from fedbench.core.errors import ConfigError
from fedbench.core.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS, SHIFTS
from fedbench.core.types import OptimizerSpec

Params = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Component:
    """A registered thing chosen by name (dataset, model, algorithm, partition) and its resolved parameters."""

    name: str
    params: Params = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **_plain(self.kwargs)}


@dataclass(frozen=True)
class DatasetSpec(Component):
    """A dataset by name; `data_root` says where its files are on this machine (not part of the run id)."""

    data_root: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.data_root is not None:
            out["data_root"] = self.data_root
        return out


@dataclass(frozen=True)
class TestClientSpec:
    """The test-time clients: data a run is evaluated on after training, never trained on (002 Sec. 3.3, I.7)."""

    __test__ = False  # not a pytest test class, whatever its name

    mode: Literal["feroma", "own", "next", "none"] = "feroma"
    """feroma: drawn from all clients' last-stage distributions, the client's own for P(Y|X) concept shift
    (METHODS.md, ANDA); own: each client's last distribution; next: its next drifted one; none: no test clients."""
    unseen_rate: float = 0.0
    """Share of test clients given a distribution no client trained on (002 I.7: 0% to 100%)."""
    labelled_per_class: int = 0
    """Labelled samples per class a method may use to pick a model (002 App. E: 20); the rest are unlabelled."""
    size: int | None = None
    """Samples per test client; None: as many as the matching training client's local test split."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ScenarioSpec:
    """How the dataset becomes a federation: a partition, shifts layered on it, drift, test-time clients."""

    partition: Component = Component("iid")
    shifts: tuple[Component, ...] = ()
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

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"preset": self.preset} if self.preset else {}),
            "partition": self.partition.name,
            **_plain(self.partition.kwargs),
            "shifts": [s.to_dict() for s in self.shifts],
            "num_clients": self.num_clients,
            "test_fraction": self.test_fraction,
            "source": self.source,
            "local_test": self.local_test,
            "drift_every": self.drift_every,
            "copies": self.copies,
            "test_clients": self.test_clients.to_dict(),
        }


@dataclass(frozen=True)
class ResourceSpec:
    """Where a run executes. Does not change what it computes, so it is not part of the run id."""

    backend: Literal["serial", "ray"] = "serial"
    client_cpus: float = 1.0
    client_gpus: float = 0.0
    num_workers: int | None = None
    """Client workers in the Ray pool; None: as many as the free CPUs (and GPU fractions) allow."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunSpec:
    """One configuration: everything needed to reproduce a run. Defaults are FEROMA's setup (002 Sec. 5)."""

    task: str
    dataset: DatasetSpec
    model: Component
    algorithm: Component = Component("fedavg")
    scenario: ScenarioSpec = ScenarioSpec()
    rounds: int = 20
    local_epochs: int = 2
    local_steps: int | None = None
    """Mini-batch steps per round instead of `local_epochs` (004 trains 10 steps a round); None: epochs."""
    batch_size: int = 64
    optimizer: OptimizerSpec = OptimizerSpec()
    seed: int = 0
    eval_every: int = 1
    """Evaluate every client's local test split every this many rounds (and always at the last round)."""
    resources: ResourceSpec = field(default_factory=ResourceSpec)

    # -- serialization -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "dataset": self.dataset.to_dict(),
            "scenario": self.scenario.to_dict(),
            "model": self.model.to_dict(),
            "algorithm": self.algorithm.to_dict(),
            "rounds": self.rounds,
            "local_epochs": self.local_epochs,
            "local_steps": self.local_steps,
            "batch_size": self.batch_size,
            "optimizer": dataclasses.asdict(self.optimizer),
            "seed": self.seed,
            "eval_every": self.eval_every,
            "resources": self.resources.to_dict(),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @property
    def run_hash(self) -> str:
        """10 hex digits identifying what the run computes (resources and data location left out)."""
        identity = self.to_dict()
        identity.pop("resources")
        identity["dataset"].pop("data_root", None)
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    def flat(self) -> dict[str, Any]:
        """Dotted keys to scalar values, for MLflow params and tables."""
        return _flatten(self.to_dict())

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    @property
    def label(self) -> str:
        return f"{self.algorithm.name}-{self.dataset.name}-s{self.seed}-{self.run_hash}"

    # -- parsing -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunSpec:
        """Validate a plain mapping (as written in a task file) into a RunSpec; errors name the field."""
        raw = dict(raw)
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in raw:
            if key not in allowed:
                raise ConfigError(key, raw[key], "top-level fields are: " + ", ".join(allowed))
        for required in ("task", "dataset", "model"):
            if required not in raw:
                raise ConfigError(required, None, "a value is required")
        out: dict[str, Any] = {"task": coerce("task", raw["task"], str)}
        out["dataset"] = parse_dataset(raw["dataset"])
        out["model"] = _parse_component("model", raw["model"], MODELS, skip=2)
        if "algorithm" in raw:
            out["algorithm"] = _parse_component("algorithm", raw["algorithm"], ALGORITHMS)
        else:
            out["algorithm"] = _parse_component("algorithm", "fedavg", ALGORITHMS)
        out["scenario"] = _parse_scenario(raw.get("scenario", {}))
        for name in ("rounds", "local_epochs", "batch_size", "seed", "eval_every"):
            if name in raw:
                out[name] = coerce(name, raw[name], int)
                if name != "seed" and out[name] < 1:
                    raise ConfigError(name, raw[name], "an integer >= 1")
        if raw.get("local_steps") is not None:
            out["local_steps"] = coerce("local_steps", raw["local_steps"], int)
            if out["local_steps"] < 1:
                raise ConfigError("local_steps", raw["local_steps"], "an integer >= 1, or null for local_epochs epochs")
        if "optimizer" in raw:
            out["optimizer"] = _parse_dataclass("optimizer", raw["optimizer"], OptimizerSpec)
            if out["optimizer"].name not in ("sgd", "adam"):
                raise ConfigError("optimizer.name", out["optimizer"].name, "sgd, adam")
        if "resources" in raw:
            res = _parse_dataclass("resources", raw["resources"], ResourceSpec)
            if res.client_cpus <= 0 or res.client_gpus < 0:
                raise ConfigError("resources", raw["resources"], "client_cpus > 0 and client_gpus >= 0")
            out["resources"] = res
        spec = cls(**out)
        ALGORITHMS.get(spec.algorithm.name).check_run(spec)  # a model the method cannot train, refused here
        return spec


def _section(path: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        return {"name": raw}
    if not isinstance(raw, dict):
        raise ConfigError(path, raw, "a name or a mapping with a 'name' key")
    if "name" not in raw:
        raise ConfigError(f"{path}.name", None, "a value is required")
    return dict(raw)


def _parse_component(path: str, raw: Any, registry, skip: int = 0) -> Component:
    section = _section(path, raw)
    name = section.pop("name")
    entry = registry.get(name, field=f"{path}.name")
    target = getattr(entry, "Config", entry)
    params = resolve_params(path, f"{registry.kind} {name}", section, target, skip)
    if dataclasses.is_dataclass(target):
        try:
            target(**dict(params))  # runs the Config's own range checks (__post_init__)
        except ConfigError as exc:
            raise exc.under(path) from None
    return Component(name, params)


def parse_dataset(raw: Any) -> DatasetSpec:
    """The `dataset:` section: a name or a mapping of the loader's parameters (and `data_root`)."""
    section = _section("dataset", raw)
    data_root = section.pop("data_root", None)
    component = _parse_component("dataset", section, DATASETS, skip=1)
    return DatasetSpec(component.name, component.params, data_root=data_root)


SCENARIO_FIELDS = ("num_clients", "test_fraction", "source", "local_test", "drift_every", "copies", "preset")


def _parse_scenario(raw: Any) -> ScenarioSpec:
    """The `scenario:` section; keys that are not scenario fields are the partition's parameters."""
    if not isinstance(raw, dict):
        raise ConfigError("scenario", raw, "a mapping")
    section = dict(raw)
    own: dict[str, Any] = {k: section.pop(k) for k in SCENARIO_FIELDS if k in section}
    shifts = section.pop("shifts", [])
    test_clients = section.pop("test_clients", {})
    partition = {**_section("scenario.partition", section.pop("partition", "iid")), **section}
    own["partition"] = _parse_component("scenario", partition, PARTITIONS)
    if not isinstance(shifts, list):
        raise ConfigError("scenario.shifts", shifts, "a list of shift names or mappings with a 'name' key")
    own["shifts"] = tuple(_parse_component(f"scenario.shifts[{i}]", s, SHIFTS) for i, s in enumerate(shifts))
    own["test_clients"] = _parse_dataclass("scenario.test_clients", test_clients, TestClientSpec)
    spec = _parse_dataclass("scenario", own, ScenarioSpec)
    checks = [
        ("num_clients", spec.num_clients >= 1, "an integer >= 1"),
        ("test_fraction", 0.0 <= spec.test_fraction < 1.0, "a number in [0, 1)"),
        ("drift_every", spec.drift_every is None or spec.drift_every >= 1, "an integer >= 1 or null (no drift)"),
        ("copies", spec.copies >= 1, "an integer >= 1"),
        ("test_clients.unseen_rate", 0.0 <= spec.test_clients.unseen_rate <= 1.0, "a number in [0, 1]"),
        ("test_clients.labelled_per_class", spec.test_clients.labelled_per_class >= 0, "an integer >= 0"),
        ("test_clients.size", spec.test_clients.size is None or spec.test_clients.size >= 1, "an integer >= 1 or null"),
    ]
    for name, ok, allowed in checks:
        if not ok:
            value = getattr(spec.test_clients, name.split(".")[1]) if name.startswith("test_clients") else getattr(spec, name)
            raise ConfigError(f"scenario.{name}", value, allowed)
    return spec


def _parse_dataclass(path: str, raw: Any, cls: type) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(path, raw, "a mapping")
    fields = signature_fields(cls)
    values = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(f"{path}.{key}", value, f"fields of {path} are: " + ", ".join(fields))
        values[key] = value if _parsed(value) else coerce(f"{path}.{key}", value, fields[key][0])
    return cls(**values)


def _parsed(value: Any) -> bool:
    """Already validated by its own parser (a component, a list of them, a nested spec)."""
    if isinstance(value, tuple) and value and all(isinstance(v, Component) for v in value):
        return True
    return isinstance(value, Component) or dataclasses.is_dataclass(value)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat

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
from fedbench.core.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS
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
class ScenarioSpec:
    """How the dataset is split into a federation. The full shift/drift generator extends this section."""

    partition: Component = Component("iid")
    num_clients: int = 10
    test_fraction: float = 0.2
    """Share of each client's data kept for its local test split (002 Sec. 5: 20%)."""
    source: Literal["train", "all"] = "train"
    """Which official split is partitioned: the training set only, or train and test pooled (004 Sec. 5)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition.name,
            **_plain(self.partition.kwargs),
            "num_clients": self.num_clients,
            "test_fraction": self.test_fraction,
            "source": self.source,
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
        out["dataset"] = _parse_dataset(raw["dataset"])
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
        if "optimizer" in raw:
            out["optimizer"] = _parse_dataclass("optimizer", raw["optimizer"], OptimizerSpec)
            if out["optimizer"].name not in ("sgd", "adam"):
                raise ConfigError("optimizer.name", out["optimizer"].name, "sgd, adam")
        if "resources" in raw:
            res = _parse_dataclass("resources", raw["resources"], ResourceSpec)
            if res.client_cpus <= 0 or res.client_gpus < 0:
                raise ConfigError("resources", raw["resources"], "client_cpus > 0 and client_gpus >= 0")
            out["resources"] = res
        return cls(**out)


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
        target(**dict(params))  # runs the Config's own range checks (__post_init__)
    return Component(name, params)


def _parse_dataset(raw: Any) -> DatasetSpec:
    section = _section("dataset", raw)
    data_root = section.pop("data_root", None)
    component = _parse_component("dataset", section, DATASETS, skip=1)
    return DatasetSpec(component.name, component.params, data_root=data_root)


def _parse_scenario(raw: Any) -> ScenarioSpec:
    if not isinstance(raw, dict):
        raise ConfigError("scenario", raw, "a mapping")
    section = dict(raw)
    own = {k: section.pop(k) for k in ("num_clients", "test_fraction", "source") if k in section}
    partition = _parse_component("scenario", {"name": section.pop("partition", "iid"), **section}, PARTITIONS, skip=3)
    spec = _parse_dataclass("scenario", {"partition": partition, **own}, ScenarioSpec)
    if spec.num_clients < 1:
        raise ConfigError("scenario.num_clients", spec.num_clients, "an integer >= 1")
    if not 0.0 <= spec.test_fraction < 1.0:
        raise ConfigError("scenario.test_fraction", spec.test_fraction, "a number in [0, 1)")
    return spec


def _parse_dataclass(path: str, raw: Any, cls: type) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(path, raw, "a mapping")
    fields = signature_fields(cls)
    values = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(f"{path}.{key}", value, f"fields of {path} are: " + ", ".join(fields))
        values[key] = value if isinstance(value, Component) else coerce(f"{path}.{key}", value, fields[key][0])
    return cls(**values)


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

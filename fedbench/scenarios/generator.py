"""Build the Scenario artifact for a dataset, a scenario spec and a seed (a pure, cached function).

This is the hook the full heterogeneity generator extends (shifts, drift stages, test-time clients).
For now it produces a static federation: one partition, one stage, each client's local train/test split.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from fedbench.core.runspec import ScenarioSpec
from fedbench.core.registry import PARTITIONS
from fedbench.core.types import derive_seed
from fedbench.data import BaseDataset
from fedbench.scenarios.artifact import ClientView, Scenario

_CACHE: dict[str, Scenario] = {}


def scenario_key(dataset: BaseDataset, spec: ScenarioSpec, seed: int) -> str:
    blob = json.dumps({"dataset": dataset.name, "n": len(dataset), "spec": spec.to_dict(), "seed": seed}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def build_scenario(dataset: BaseDataset, spec: ScenarioSpec, seed: int) -> Scenario:
    """The federation for (dataset, spec, seed); identical inputs give identical indices, on any process."""
    key = scenario_key(dataset, spec, seed)
    if key not in _CACHE:
        _CACHE[key] = _generate(dataset, spec, seed, key)
    return _CACHE[key]


def _generate(dataset: BaseDataset, spec: ScenarioSpec, seed: int, key: str) -> Scenario:
    rng = np.random.default_rng(derive_seed(seed, "scenario", key))
    pool = np.arange(len(dataset)) if spec.source == "all" else np.flatnonzero(dataset.meta["split"].to_numpy() == "train")
    partition = PARTITIONS.get(spec.partition.name)
    parts = partition(dataset.y[pool], spec.num_clients, rng, **spec.partition.kwargs)
    views = tuple(_local_split(pool[part], spec.test_fraction, rng) for part in parts)
    return Scenario(key=key, num_clients=spec.num_clients, num_classes=dataset.num_classes, stages=(views,))


def _local_split(indices: np.ndarray, test_fraction: float, rng: np.random.Generator) -> ClientView:
    """A client's own random train/test split (002 Sec. 5: 20% of local data kept for evaluation)."""
    shuffled = rng.permutation(indices)
    n_test = int(round(test_fraction * len(shuffled)))
    return ClientView(train=np.sort(shuffled[n_test:]), test=np.sort(shuffled[:n_test]))

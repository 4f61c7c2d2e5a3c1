"""Building scenarios the way a task does (preset expansion and load-time checks included)."""

from __future__ import annotations

import numpy as np

from fedbench.config.task import resolve_run
from fedbench.data import load_dataset
from fedbench.scenarios import build_scenario
from fedbench.scenarios.generator import _generate, num_stages, scenario_key
from fedbench.scenarios.report import mean_pairwise_js  # noqa: F401  (re-exported for the tests)

MNIST_LIKE = {"name": "synthetic_images", "train_samples": 6000, "test_samples": 1000}
CIFAR100_LIKE = {
    "name": "synthetic_images",
    "channels": 3,
    "size": 32,
    "num_classes": 100,
    "train_samples": 20000,
    "test_samples": 2000,
}


def run_spec(scenario: dict, dataset=MNIST_LIKE, rounds: int = 1, seed: int = 0):
    return resolve_run(
        {"task": "t", "dataset": dataset, "model": "mlp", "scenario": scenario, "rounds": rounds, "seed": seed}
    )


def make(scenario: dict, dataset=MNIST_LIKE, rounds: int = 1, seed: int = 0, fresh: bool = False):
    """(dataset, scenario) for a task's scenario section; `fresh` bypasses the cache (determinism tests)."""
    spec = run_spec(scenario, dataset, rounds, seed)
    data = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    if fresh:
        stages = num_stages(spec.scenario, rounds)
        return data, _generate(data, spec.scenario, seed, scenario_key(data, spec.scenario, seed, stages), stages)
    return data, build_scenario(data, spec.scenario, seed, rounds)


def seen_labels(data, view) -> np.ndarray:
    labels = data.y[view.train]
    return labels if view.label_map is None else view.label_map[labels]


def histograms(data, views, num_classes: int) -> np.ndarray:
    return np.array([np.bincount(data.y[v.train], minlength=num_classes) / max(len(v.train), 1) for v in views])

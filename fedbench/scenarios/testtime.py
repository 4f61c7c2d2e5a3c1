"""Test-time clients: clients a run is evaluated on after training (002 Sec. 3.3, App. E, I.7).

By default as FEROMA's generator does it (docs/methods.md): each test client takes the last-stage distribution
of a random training client, or its own for P(Y|X) concept shift, where a label-free match cannot tell
relabellings apart. Also: each client's own last distribution, its next (drifted) one, and a share of
distributions that no client trained on. Samples come from the official test split where there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedbench.core.errors import ConfigError
from fedbench.core.runspec import TestClientSpec
from fedbench.scenarios.artifact import ClientView, TestClient
from fedbench.scenarios.pool import Split, allocate, class_queues, histogram, weights_demand
from fedbench.scenarios.shifts import Bank


@dataclass(frozen=True, eq=False)
class DistributionRecord:
    """A training client's distribution in one stage, enough to draw fresh samples from it."""

    view: ClientView
    class_weights: np.ndarray
    """Class mix of its training samples, original labels."""

    @classmethod
    def of(cls, view: ClientView, labels: np.ndarray, num_classes: int) -> DistributionRecord:
        return cls(view, histogram(labels[view.train], num_classes))


def make_test_clients(
    spec: TestClientSpec,
    last: list[DistributionRecord],
    following: list[DistributionRecord],
    split: Split,
    banks: list[Bank],
    ids,
    labels: np.ndarray,
    num_classes: int,
    test_pool: np.ndarray,
    label_shift: bool,
    trained_ids: set[int],
    rng: np.random.Generator,
) -> tuple[TestClient, ...]:
    """One test client per training client (none when `spec.mode` is none)."""
    if spec.mode == "none":
        return ()
    n = len(last)
    unseen = set(rng.permutation(n)[: int(round(spec.unseen_rate * n))].tolist())
    if unseen and not split.unseen and not any(b.unseen for b in banks):
        raise ConfigError(
            "scenario.test_clients.unseen_rate",
            spec.unseen_rate,
            "0 for this scenario: its partition and shifts define no distribution outside training",
        )
    pool_labels = labels[test_pool]
    clients = []
    for t in range(n):
        if spec.mode == "next":
            origin, record = t, following[t]
        else:
            origin = t if spec.mode == "own" or label_shift else int(rng.integers(n))
            record = last[origin]
        size = spec.size or max(len(record.view.test), 1)
        if t in unseen:
            view = _unseen_view(record, split, banks, ids, rng, t)
            weights = split.unseen[t % len(split.unseen)][0] if split.unseen else record.class_weights
            origin = -1
        else:
            view = record.view
            weights = record.class_weights
        queues = class_queues(pool_labels, num_classes, rng)
        positions = allocate(weights_demand(weights, size)[None, :], queues)[0]
        indices = test_pool[positions]
        labelled = _labelled(indices, labels, spec.labelled_per_class, rng)
        test_view = ClientView(
            np.zeros(0, dtype=np.int64), indices, view.distribution_id, view.transform, view.label_map, view.description
        )
        clients.append(TestClient(test_view, labelled, origin, view.distribution_id in trained_ids))
    return tuple(clients)


def _unseen_view(record: DistributionRecord, split: Split, banks: list[Bank], ids, rng, t: int) -> ClientView:
    """A distribution no training client had: unseen class mix and/or unseen shift modes (002 I.7)."""
    key: list = ["unseen"]
    parts = []
    if split.unseen:
        choice = t % len(split.unseen)
        key.append(("classes", choice))
        parts.append(split.unseen[choice][1])
    label_map, ops = (split.label_maps[0] if split.label_maps else None), []
    for b, bank in enumerate(banks):
        if bank.unseen:
            m = int(rng.integers(len(bank.unseen)))
            mode = bank.unseen[m]
            key.append((b, m))
        else:
            mode = bank.modes[0]
        parts.append(mode.description)
        ops.extend(mode.ops)
        if mode.label_map is not None:
            label_map = mode.label_map if label_map is None else mode.label_map[label_map]
    description = "unseen: " + " | ".join(p for p in parts if p)
    return ClientView(
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        ids.id_of(tuple(key), description),
        tuple(ops),
        label_map,
        description,
    )


def _labelled(indices: np.ndarray, labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Up to `per_class` random samples of each class the test client holds (002 App. E: 20 per class)."""
    if per_class == 0 or len(indices) == 0:
        return np.zeros(0, dtype=np.int64)
    shuffled = rng.permutation(indices)
    picked = [shuffled[labels[shuffled] == c][:per_class] for c in np.unique(labels[indices])]
    return np.sort(np.concatenate(picked))

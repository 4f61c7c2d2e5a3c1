"""What partitions and shifts work on: the labels of a sample pool, its metadata, and what the dataset offers.

Also the one allocator every per-stage draw uses: clients ask for so many samples of each class and get
disjoint indices, shrunk proportionally where a class cannot serve everyone (002 I.2: each client's
data is sized so that all keep enough samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from fedbench.data import DatasetFacts

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, eq=False)
class PoolContext:
    """The samples a federation is cut from.

    Attributes:
        indices: dataset indices of the pool (positions below index this array).
        labels: labels of the pool, aligned with `indices`.
        meta: metadata rows of the pool, aligned with `indices`.
        facts: what the dataset offers (classes, channels, superclasses).
        copies: how many times each sample may be handed out within one stage (002 I.3 duplication).
        bank_seed: seed of the scenario's fixed banks (class subsets, transform patterns).
        stages: the number of drift stages the run has (1 without drift); 002's generator scales a label-skew
            client's data with it.
    """

    indices: np.ndarray
    labels: np.ndarray
    meta: pd.DataFrame
    facts: DatasetFacts
    copies: int = 1
    bank_seed: int = 0
    stages: int = 1

    def bank_rng(self, stream: int = 0) -> np.random.Generator:
        """A generator fixed for the whole scenario: banks drawn from it are the same in every stage."""
        return np.random.default_rng([self.bank_seed, stream])

    @property
    def num_classes(self) -> int:
        return self.facts.num_classes

    def class_counts(self) -> np.ndarray:
        return np.bincount(self.labels, minlength=self.num_classes)


@dataclass(frozen=True, eq=False)
class Split:
    """One stage's assignment of pool positions to clients.

    Attributes:
        parts: per client, positions into the pool (not dataset indices).
        groups: per client, the ground-truth group (cluster, bank entry or the client itself) its data came from.
        descriptions: per client, a short text for `fedbench scenario show`.
        label_maps: per client, original label -> label it sees, or None (a partition that relabels, e.g. to
            superclasses).
        class_weights: per group id, the class distribution it was drawn with (test-time clients reuse it).
        unseen: class distributions of groups that never occur in training (for unseen test clients).
        redraws: True when every drift stage draws a fresh split (bank-based partitions); False: the data
            stays and only the shifts drift.
        resampled: True when a client's part repeats positions (002's label-skew data scaling).
    """

    parts: list[np.ndarray]
    groups: list[int]
    descriptions: list[str]
    label_maps: list[np.ndarray | None] | None = None
    class_weights: dict[int, np.ndarray] = field(default_factory=dict)
    unseen: list[tuple[np.ndarray, str]] = field(default_factory=list)
    redraws: bool = False
    resampled: bool = False


def class_queues(labels: np.ndarray, num_classes: int, rng: np.random.Generator, copies: int = 1) -> list[np.ndarray]:
    """Per class, its positions in random order, repeated `copies` times (each copy shuffled on its own)."""
    queues = []
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        queues.append(np.concatenate([rng.permutation(members) for _ in range(copies)]) if len(members) else members)
    return queues


def allocate(demand: np.ndarray, queues: list[np.ndarray]) -> list[np.ndarray]:
    """Serve `demand[client, class]` samples from per-class queues, disjointly.

    A class asked for more than its queue holds is shared out in proportion to the demands (rounded down),
    so no sample is handed out twice and every asking client gets its fair share.
    """
    demand = np.asarray(demand, dtype=np.int64)
    taken = [[] for _ in range(demand.shape[0])]
    for c, queue in enumerate(queues):
        want = demand[:, c]
        total = int(want.sum())
        if total == 0:
            continue
        give = want if total <= len(queue) else np.floor(want * (len(queue) / total)).astype(np.int64)
        cuts = np.concatenate([[0], np.cumsum(give)])
        for client in np.flatnonzero(give):
            taken[client].append(queue[cuts[client] : cuts[client + 1]])
    return [np.sort(np.concatenate(t)) if t else np.zeros(0, dtype=np.int64) for t in taken]


def weights_demand(weights: np.ndarray, size: int) -> np.ndarray:
    """Integer per-class counts summing to `size` that follow `weights` (largest remainders)."""
    weights = np.asarray(weights, dtype=np.float64)
    exact = weights / weights.sum() * size
    counts = np.floor(exact).astype(np.int64)
    short = size - counts.sum()
    if short > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def histogram(labels: np.ndarray, num_classes: int) -> np.ndarray:
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    return counts / max(counts.sum(), 1.0)

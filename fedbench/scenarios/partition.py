"""Partitions: which samples of the pool each client holds in a stage (label skew, quantity skew, clusters).

Each partition is a frozen dataclass registered by name; its fields are the parameters a task's `scenario:`
section sets (`partition: dirichlet, alpha: 0.3`). `check` rejects an impossible setting when the task is
loaded, from the dataset's facts alone; `split` draws the assignment from a pool. A partition names its
fields relative to itself (`alpha`); its caller puts them under `scenario`, where the task writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_partition
from fedbench.data import DatasetFacts
from fedbench.scenarios.pool import PoolContext, Split, allocate, class_queues, histogram, weights_demand

FEROMA_CHUNK_DIVISOR = 30
"""002 I.2 / ANDA: the 30 in its data scaling max(1, stages x clients / 30); under feature and concept drift
each client's stage holds a fresh chunk of about N_train / 30 samples (MNIST: ~2,000)."""


class Partition:
    """Base: subclasses are dataclasses of their parameters."""

    offers_unseen = False
    """Whether `split` also returns class mixes no client trains on (for unseen test-time clients)."""
    min_samples = 0
    """The fewest samples `split` promises each client (Dirichlet and Quantity make it a parameter)."""

    def check(self, facts: DatasetFacts, num_clients: int) -> None:
        """Raise ConfigError when this partition cannot be built for the dataset and client count."""

    def split(self, ctx: PoolContext, num_clients: int, rng: np.random.Generator) -> Split:
        """Draw one stage's assignment; `check` has already accepted this dataset and client count."""
        raise NotImplementedError


def blocks(num_clients: int, num_groups: int) -> np.ndarray:
    """Client -> group in contiguous blocks of (nearly) equal size: clients 0..n/K-1 form group 0, and so on."""
    return np.arange(num_clients) * num_groups // num_clients


def _split_members(members: np.ndarray, clients: np.ndarray, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """A group's positions shared iid among its clients (sizes differ by at most one)."""
    pieces = np.array_split(rng.permutation(members), len(clients))
    return {int(c): np.sort(p) for c, p in zip(clients, pieces, strict=True)}


def _grouped_split(
    ctx: PoolContext, groups: np.ndarray, members_of: list[np.ndarray], rng: np.random.Generator
) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """Group g's members shared iid by the clients of group g; also each group's class distribution."""
    parts: dict[int, np.ndarray] = {}
    weights = {}
    for g, members in enumerate(members_of):
        parts.update(_split_members(members, np.flatnonzero(groups == g), rng))
        weights[g] = histogram(ctx.labels[members], ctx.num_classes)
    return [parts[c] for c in range(len(groups))], weights


def superclass_of(facts: DatasetFacts) -> np.ndarray:
    """Class -> superclass: the dataset's own (CIFAR-10 vehicles/animals, CIFAR-100's 20) or below/above C/2."""
    if facts.superclasses is not None:
        return np.asarray(facts.superclasses)
    return (np.arange(facts.num_classes) >= facts.num_classes / 2).astype(np.int64)


def subclass_sets(facts: DatasetFacts, clusters: int) -> list[list[int]]:
    """Cluster k's classes: every superclass's member classes dealt round-robin to the clusters (001 E2a)."""
    sup = superclass_of(facts)
    sets: list[list[int]] = [[] for _ in range(clusters)]
    for s in np.unique(sup):
        for i, c in enumerate(np.flatnonzero(sup == s)):
            sets[i % clusters].append(int(c))
    return [sorted(s) for s in sets]


def _check_subclasses(facts: DatasetFacts, clusters: int, field: str) -> None:
    sup = superclass_of(facts)
    smallest = int(np.bincount(sup).min())
    if clusters < 1 or clusters > smallest:
        raise ConfigError(field, clusters, f"1..{smallest}: every superclass must have a subclass for each cluster")


def _check_clients(num_clients: int, groups: int, field: str, value: int) -> None:
    if num_clients < groups:
        raise ConfigError(field, value, f"at most num_clients={num_clients} (every group needs a client)")


@register_partition("iid")
@dataclass(frozen=True)
class IID(Partition):
    """A uniform random split into near-equal shares; every client has the same distribution."""

    def split(self, ctx, num_clients, rng):
        parts = [np.sort(p) for p in np.array_split(rng.permutation(len(ctx.labels)), num_clients)]
        return Split(
            parts, [0] * num_clients, ["iid"] * num_clients, class_weights={0: histogram(ctx.labels, ctx.num_classes)}
        )


@register_partition("dirichlet")
@dataclass(frozen=True)
class Dirichlet(Partition):
    """Label skew: each class is split over clients with proportions ~ Dirichlet(alpha) (003 Sec. III-B).

    Small alpha gives each client few classes and unequal sizes (004's Dir-0.3); large alpha approaches
    IID. Draws are repeated until every client holds at least `min_samples` samples.
    """

    offers_unseen = True

    alpha: float = 0.5
    """Concentration (003 Fig. 3: beta in {0.1, 0.3, 0.5, 0.7, 1.0}; 004 Sec. 5: 0.3)."""
    min_samples: int = 10
    """Smallest acceptable client size."""
    max_attempts: int = 100
    """Redraws before giving up with an error."""

    def __post_init__(self):
        if self.alpha <= 0:
            raise ConfigError("alpha", self.alpha, "a number > 0")

    def split(self, ctx, num_clients, rng):
        if self.min_samples * num_clients > len(ctx.labels):
            raise ConfigError(
                "min_samples", self.min_samples, f"at most {len(ctx.labels) // num_clients} for {num_clients} clients"
            )
        for _ in range(self.max_attempts):
            shares: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            for cls in np.unique(ctx.labels):
                members = rng.permutation(np.flatnonzero(ctx.labels == cls))
                cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, self.alpha)))[:-1] * len(members)).astype(int)
                for client, part in enumerate(np.split(members, cuts)):
                    shares[client].append(part)
            parts = [np.sort(np.concatenate(s)) for s in shares]
            if min(len(p) for p in parts) >= self.min_samples:
                weights = {c: histogram(ctx.labels[p], ctx.num_classes) for c, p in enumerate(parts)}
                unseen = [
                    (rng.dirichlet(np.full(ctx.num_classes, self.alpha)), f"new Dir({self.alpha}) draw")
                    for _ in range(num_clients)
                ]
                return Split(
                    parts,
                    list(range(num_clients)),
                    [f"Dir({self.alpha}) client {c}" for c in range(num_clients)],
                    class_weights=weights,
                    unseen=unseen,
                )
        raise ConfigError(
            "alpha",
            self.alpha,
            f"a value for which every client gets >= {self.min_samples} samples (raise alpha or lower min_samples)",
        )


@register_partition("shards")
@dataclass(frozen=True)
class Shards(Partition):
    """S label-homogeneous shards per client (004 Sec. 5, S-SPC with S = 5): each class is cut into equal shards."""

    shards_per_client: int = 5
    """Shards each client receives (004: S = 5)."""

    def check(self, facts, num_clients):
        total = num_clients * self.shards_per_client
        if self.shards_per_client < 1 or total % facts.num_classes:
            raise ConfigError(
                "shards_per_client",
                self.shards_per_client,
                f"a value with num_clients x shards_per_client divisible by the {facts.num_classes} classes, "
                f"so every shard holds one class ({num_clients} x {self.shards_per_client} = {total})",
            )

    def split(self, ctx, num_clients, rng):
        per_class = num_clients * self.shards_per_client // ctx.num_classes
        shards = []
        for c in range(ctx.num_classes):
            shards.extend(np.array_split(rng.permutation(np.flatnonzero(ctx.labels == c)), per_class))
        order = rng.permutation(len(shards)).reshape(num_clients, self.shards_per_client)
        parts = [np.sort(np.concatenate([shards[s] for s in row])) for row in order]
        weights = {c: histogram(ctx.labels[p], ctx.num_classes) for c, p in enumerate(parts)}
        classes = [sorted({int(ctx.labels[shards[s][0]]) for s in row if len(shards[s])}) for row in order]
        return Split(
            parts, list(range(num_clients)), [f"shards of classes {cl}" for cl in classes], class_weights=weights
        )


@register_partition("quantity")
@dataclass(frozen=True)
class Quantity(Partition):
    """Quantity skew (ANDA's fifth type): client sizes ~ Dirichlet(alpha), samples iid, so P(x, y) is shared."""

    alpha: float = 1.0
    """Concentration of the size proportions; small alpha gives very unequal sizes."""
    min_samples: int = 10
    """Smallest client size."""

    def __post_init__(self):
        if self.alpha <= 0:
            raise ConfigError("alpha", self.alpha, "a number > 0")

    def split(self, ctx, num_clients, rng):
        spare = len(ctx.labels) - self.min_samples * num_clients
        if spare < 0:
            raise ConfigError("min_samples", self.min_samples, f"at most {len(ctx.labels) // num_clients}")
        sizes = self.min_samples + np.floor(rng.dirichlet(np.full(num_clients, self.alpha)) * spare).astype(int)
        cuts = np.cumsum(sizes)[:-1]
        parts = [np.sort(p) for p in np.split(rng.permutation(len(ctx.labels))[: sizes.sum()], cuts)]
        return Split(
            parts,
            [0] * num_clients,
            [f"iid, {len(p)} samples" for p in parts],
            class_weights={0: histogram(ctx.labels, ctx.num_classes)},
        )


@register_partition("chunks")
@dataclass(frozen=True)
class Chunks(Partition):
    """A fresh iid chunk per client and stage (002 I.2 / ANDA): the data under feature and concept drift."""

    samples_per_client: int | None = None
    """Chunk size; None: pool size / 30 (002 I.2, ~2,000 on MNIST)."""

    def split(self, ctx, num_clients, rng):
        size = self.samples_per_client or len(ctx.labels) // FEROMA_CHUNK_DIVISOR
        weights = histogram(ctx.labels, ctx.num_classes)
        demand = np.stack([weights_demand(weights, size)] * num_clients)
        parts = allocate(demand, class_queues(ctx.labels, ctx.num_classes, rng, ctx.copies))
        return Split(parts, [0] * num_clients, ["iid chunk"] * num_clients, class_weights={0: weights}, redraws=True)


@register_partition("class_bank")
@dataclass(frozen=True)
class ClassBank(Partition):
    """FEROMA's label skew (002 I.2, Table 12): each client draws its classes from a bank of class subsets.

    As 002's generator builds it (FEROMA's ANDA, `split_trDR_teND_Py`, commit 1821636): each client holds a fixed
    iid share of the pool (N / clients), grown by resampling with replacement to max(1, stages x clients / 30)
    times its size (002 I.2: "we dynamically scale the size of training dataset based on the factor of drifting
    frequency"), once for the run. A bank of `banks` distinct subsets of `classes_per_client` classes is drawn
    once; in every stage each client draws one subset uniformly and keeps the samples of its share in those
    classes. So a stage is not a fixed-size chunk: on MNIST with 20 clients, 2 of 10 classes, 20 rounds, a stage
    holds about 2,000 samples when drifting every 4 rounds (5 stages), 4,000 every 2 and 8,000 every round,
    duplicates included, drawn from the same ~600 distinct samples of the client's share.
    """

    offers_unseen = True

    banks: int = 4
    """Bank size: 4 / 6 / 8 for low / medium / high (002 Table 12)."""
    classes_per_client: int = 2
    """Classes per subset: 2 for 10-class data, 20 for CIFAR-100 (002 I.2)."""

    def check(self, facts, num_clients):
        k, n = self.classes_per_client, facts.num_classes
        if not 1 <= k <= n:
            raise ConfigError("classes_per_client", k, f"1..{n} (the dataset has {n} classes)")
        possible = math.comb(n, k)
        if not 1 <= self.banks <= possible:
            raise ConfigError("banks", self.banks, f"1..{possible} distinct subsets of {k} of {n} classes")

    def _bank(self, num_classes: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
        bank: list[tuple[int, ...]] = []
        while len(bank) < self.banks:
            subset = tuple(sorted(int(c) for c in rng.choice(num_classes, self.classes_per_client, replace=False)))
            if subset not in bank:
                bank.append(subset)
        return bank

    def _unseen(self, bank: list[tuple[int, ...]], ctx: PoolContext) -> list[tuple[int, ...]]:
        """Up to `banks` subsets outside the bank, for unseen test-time clients (002 I.7)."""
        outside = math.comb(ctx.num_classes, self.classes_per_client) - len(bank)
        wider = ClassBank(min(len(bank) + outside, 2 * len(bank)), self.classes_per_client)
        others = wider._bank(ctx.num_classes, ctx.bank_rng(1))
        return [s for s in others if s not in bank][: len(bank)]

    def split(self, ctx, num_clients, rng):
        bank = self._bank(ctx.num_classes, ctx.bank_rng())  # fixed for the run, whatever the stage
        shares, scaling = scaled_shares(ctx, num_clients)
        weights = {b: _uniform_over(s, ctx.num_classes) for b, s in enumerate(bank)}
        groups = [int(g) for g in rng.integers(len(bank), size=num_clients)]
        parts = [np.sort(share[np.isin(ctx.labels[share], bank[g])]) for share, g in zip(shares, groups, strict=True)]
        unseen = [(_uniform_over(s, ctx.num_classes), f"classes {list(s)}") for s in self._unseen(bank, ctx)]
        return Split(
            parts,
            groups,
            [f"classes {list(bank[g])}" for g in groups],
            class_weights=weights,
            unseen=unseen,
            redraws=True,
            resampled=scaling > 1,
        )


def scaled_shares(ctx: PoolContext, num_clients: int) -> tuple[list[np.ndarray], float]:
    """Each client's share of the pool for the whole run, as 002's generator makes it: an iid cut of the pool
    (repeated `copies` times, 002 I.3), grown with int(n x (s - 1)) positions resampled from it with replacement,
    s = max(1, stages x clients / 30). Drawn from a scenario-fixed generator, so every stage filters the same.
    Returns the shares and s."""
    rng = ctx.bank_rng(2)
    pool = np.concatenate([rng.permutation(len(ctx.labels)) for _ in range(ctx.copies)])
    scaling = max(1.0, ctx.stages * num_clients / FEROMA_CHUNK_DIVISOR)
    shares = []
    for share in np.array_split(pool, num_clients):
        extra = rng.integers(len(share), size=int(len(share) * (scaling - 1))) if len(share) else share[:0]
        shares.append(np.concatenate([share, share[extra]]))
    return shares, scaling


@register_partition("class_clusters")
@dataclass(frozen=True)
class ClassClusters(Partition):
    """K clusters on disjoint class groups (001 E1): the dataset's superclasses when there are K of them
    (CIFAR-10 K=2 vehicles/animals, CIFAR-100 K=20 official superclasses), else contiguous class blocks.
    Clients per cluster = num_clients / K sets the sparsity (001 Sec. IV-A: 5 rich ... 100 super sparse)."""

    clusters: int = 2
    """K, the number of clusters (001 E1: K in {2, 3, 5, 10}; 20 on CIFAR-100)."""

    def check(self, facts, num_clients):
        if not 1 <= self.clusters <= facts.num_classes:
            raise ConfigError("clusters", self.clusters, f"1..{facts.num_classes}: each cluster needs its own classes")
        _check_clients(num_clients, self.clusters, "clusters", self.clusters)

    def class_groups(self, facts: DatasetFacts) -> list[np.ndarray]:
        sup = facts.superclasses
        if sup is not None and len(set(sup)) == self.clusters:
            return [np.flatnonzero(np.asarray(sup) == s) for s in sorted(set(sup))]
        return np.array_split(np.arange(facts.num_classes), self.clusters)

    def split(self, ctx, num_clients, rng):
        class_groups = self.class_groups(ctx.facts)
        groups = blocks(num_clients, self.clusters)
        members = [np.flatnonzero(np.isin(ctx.labels, g)) for g in class_groups]
        parts, weights = _grouped_split(ctx, groups, members, rng)
        return Split(
            parts,
            groups.tolist(),
            [f"cluster {g}: classes {class_groups[g].tolist()}" for g in groups],
            class_weights=weights,
        )


@register_partition("subclass_clusters")
@dataclass(frozen=True)
class SubclassClusters(Partition):
    """Covariate subclass shift (001 E2a): all clusters predict the same superclasses, each from its own
    subclasses (CIFAR-10 K=2: one sees trucks and dogs, the other cars and cats)."""

    clusters: int = 2
    """K, the number of clusters (001 E2a)."""
    label: Literal["superclass", "original"] = "superclass"
    """What clients predict: the superclass (001 E2a) or the original class."""

    def check(self, facts, num_clients):
        _check_subclasses(facts, self.clusters, "clusters")
        _check_clients(num_clients, self.clusters, "clusters", self.clusters)

    def split(self, ctx, num_clients, rng):
        sets = subclass_sets(ctx.facts, self.clusters)
        groups = blocks(num_clients, self.clusters)
        members = [np.flatnonzero(np.isin(ctx.labels, s)) for s in sets]
        parts, weights = _grouped_split(ctx, groups, members, rng)
        label_map = superclass_of(ctx.facts) if self.label == "superclass" else None
        return Split(
            parts,
            groups.tolist(),
            [f"cluster {g}: subclasses {sets[g]}" for g in groups],
            label_maps=[label_map] * num_clients,
            class_weights=weights,
        )


@register_partition("concept_covariate")
@dataclass(frozen=True)
class ConceptCovariate(Partition):
    """Combined shift (001 E4b): 2 concept groups (semantic vs size labels) x C covariate clusters (subclasses).

    Concept group 0 predicts the superclass (CIFAR-10: vehicle/animal); group 1 predicts object size on
    CIFAR-10 (small: bird, cat, dog, frog), parity of the class elsewhere. 2C clusters in contiguous blocks.
    """

    covariate_clusters: int = 2
    """C, covariate clusters per concept group (001 E4b: C in {2, 3, 4})."""

    def check(self, facts, num_clients):
        _check_subclasses(facts, self.covariate_clusters, "covariate_clusters")
        _check_clients(num_clients, 2 * self.covariate_clusters, "covariate_clusters", self.covariate_clusters)

    def split(self, ctx, num_clients, rng):
        c = self.covariate_clusters
        sets = subclass_sets(ctx.facts, c)
        groups = blocks(num_clients, 2 * c)
        members = [np.flatnonzero(np.isin(ctx.labels, sets[g % c])) for g in range(2 * c)]
        parts, weights = _grouped_split(ctx, groups, members, rng)
        maps = [superclass_of(ctx.facts), second_concept(ctx.facts)]
        names = ["semantic", "size" if ctx.facts.dataset == "cifar10" else "parity"]
        return Split(
            parts,
            groups.tolist(),
            [f"{names[g // c]} labels, subclasses {sets[g % c]}" for g in groups],
            label_maps=[maps[g // c] for g in groups],
            class_weights=weights,
        )


@register_partition("natural")
@dataclass(frozen=True)
class Natural(Partition):
    """Natural split by a metadata column: writers for FEMNIST (003 Sec. III-A: disjoint writer groups of size
    writers / clients), the source dataset of a `mixture` (001 E4a), or any column a dataset provides.

    With at least as many values as clients, each client gets its own group of values; with fewer, each
    value is a cluster shared iid by a contiguous block of clients.
    """

    column: str = "writer"
    """The metadata column (e.g. `writer`, `domain`)."""

    def check(self, facts, num_clients):
        if self.column not in facts.meta_columns:
            have = ", ".join(facts.meta_columns) or "none"
            raise ConfigError("column", self.column, f"a metadata column of {facts.dataset or 'the dataset'} ({have})")

    def split(self, ctx, num_clients, rng):
        values = ctx.meta[self.column].to_numpy()
        distinct = np.unique(values)
        if len(distinct) >= num_clients:
            owners = np.array_split(rng.permutation(distinct), num_clients)
            parts = [np.sort(np.flatnonzero(np.isin(values, o))) for o in owners]
            weights = {c: histogram(ctx.labels[p], ctx.num_classes) for c, p in enumerate(parts)}
            return Split(
                parts, list(range(num_clients)), [f"{len(o)} {self.column}s" for o in owners], class_weights=weights
            )
        groups = blocks(num_clients, len(distinct))
        members = [np.flatnonzero(values == v) for v in distinct]
        parts, weights = _grouped_split(ctx, groups, members, rng)
        return Split(parts, groups.tolist(), [f"{self.column} {distinct[g]}" for g in groups], class_weights=weights)


CIFAR10_SMALL = (2, 3, 5, 6)
"""bird, cat, dog, frog: the 'small objects' of 001 E4b's size concept on CIFAR-10 (our reading)."""


def second_concept(facts: DatasetFacts) -> np.ndarray:
    if facts.dataset == "cifar10":
        return (~np.isin(np.arange(10), CIFAR10_SMALL)).astype(np.int64)
    return np.arange(facts.num_classes) % 2


def _uniform_over(classes, num_classes: int) -> np.ndarray:
    w = np.zeros(num_classes)
    w[list(classes)] = 1.0 / len(classes)
    return w

"""FeSEM (Long, Xie, Shen, Zhou, Wang, Jiang 2023, "Multi-center federated learning: clients clustering for
better personalization", World Wide Web 26; Algorithm 1, federated stochastic expectation maximisation).

The server holds K cluster centers (models). In each round every sampled client trains, starting from the
center of its cluster, and uploads its local model W_i. In the E-step the server assigns each uploading client
to the center nearest its local model in L2 distance, ||W_i - W~_k||. In the M-step each center becomes the
average of its members' models from this round, weighted by sample count; a center that no client joined keeps
its model. Next round each client trains from its new center. So the assignment happens after local training,
on the model the client produced, and a client trains from the center that assignment gave it.

Choices where the paper leaves room:
- Initialisation: Algorithm 1 starts from initialised centers without fixing them further. Independent random
  centers would not work here: every client trains from the same start in round 1 and would end up nearest the
  same center. Identical centers (the released code's) would make the first assignment arbitrary. So in round 1
  every client trains the run's initial model, and the server seeds the K centers from these uploads by
  k-means++ (D^2 sampling, Arthur and Vassilvitskii 2007, seeded by the run seed) before the first E and M
  steps. Round 1 therefore needs at least K uploads: a client_fraction that samples fewer is refused at build.
- Distances are taken over the model's parameters, leaving out buffers such as BatchNorm statistics.
- A client that has never been assigned (never sampled since round 1) trains from, and is evaluated with, the
  center with the most training samples.
- K (`clusters`) defaults to the scenario's number of training distributions, the true K, as 001 Sec. IV-C
  gives its clustering baselines.
- Test time: FeSEM has no rule for an unseen client (002 App. I.3). Each test client predicts with the ensemble
  of the centers, each weighted by its number of current members (002 App. I.3: "by the number of clients in
  the cluster").

The released code (github mingxuts/multi-center-fed-learning, models/fedsem.py) differs from Algorithm 1 in
ways not offered here; see docs/methods.md. It clusters by k-means on one layer's weights, and only every
`update-center-every` rounds (150 in its config, beyond its 60 rounds). Its first assignment is k-means on
random points, and every center starts from the same model.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig, NoClientState, cluster_averages, sample_counts
from fedbench.algorithms.capabilities import Assignment, RoundReport
from fedbench.algorithms.cfl import inner_products
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, derive_seed

MOVED = "fesem_moved"
"""Round metric: clients whose cluster this round's E-step changed (0 once the assignment is stable)."""
SIZE = "fesem_cluster_size_{}"
"""Round metric, one per center k: how many of this round's clients the E-step assigned to it."""
CLUSTER_OF = "fesem_cluster_of_{}"
"""Round metric, one per assigned client: its center after this round."""


def squared_distances(rows: Sequence[Arrays], cols: Sequence[Arrays], names: Sequence[str]) -> np.ndarray:
    """[len(rows), len(cols)] squared L2 distances between the models' `names` arrays (float64)."""

    def squared_norms(models: Sequence[Arrays]) -> np.ndarray:
        return np.array([sum(np.sum(np.asarray(m[name], np.float64) ** 2) for name in names) for m in models])

    cross = inner_products(rows, cols, names)
    return np.maximum(squared_norms(rows)[:, None] + squared_norms(cols)[None, :] - 2 * cross, 0.0)


def kmeans_pp(distances: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """k-means++ seeding (Arthur and Vassilvitskii 2007): k row indices, the first uniform, each next drawn with
    probability proportional to its squared distance to the nearest one already drawn (`distances`: squared,
    pairwise). Where every remaining point coincides with a drawn one, the first undrawn index is taken."""
    chosen = [int(rng.integers(len(distances)))]
    while len(chosen) < k:
        nearest = distances[:, chosen].min(axis=1)
        total = nearest.sum()
        if total > 0:
            chosen.append(int(rng.choice(len(distances), p=nearest / total)))
        else:
            chosen.append(next(i for i in range(len(distances)) if i not in chosen))
    return chosen


@dataclass(frozen=True)
class FeSEMState:
    """The K centers, which center each client last joined, and what this round's E-step changed."""

    initial: Payload
    """The run's initial model, which every client trains in round 1."""
    centers: tuple[Payload, ...] = ()
    """The K center models; empty before round 1's seeding."""
    member_of: dict[int, int] = field(default_factory=dict)
    """Each client assigned so far: its center."""
    samples: dict[int, int] = field(default_factory=dict)
    """Each client assigned so far: the training samples it last reported."""
    moved: int = 0
    """Clients whose center this round's E-step changed."""
    sizes: tuple[int, ...] = ()
    """How many of this round's clients the E-step assigned to each center."""


@register_algorithm("fesem")
class FeSEM(FedAvg["FeSEM.Config", FeSEMState, NoClientState], RoundReport[FeSEMState]):
    """K centers; each client joins the center nearest the model it trained, and each center averages its members."""

    State = FeSEMState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        clusters: int | None = None
        """K, the number of centers (Algorithm 1's input). None: the scenario's number of training
        distributions, the true K, as 001 Sec. IV-C gives its clustering baselines (002 does not say which K
        it ran FeSEM with)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.clusters is not None and self.clusters < 1:
                raise ConfigError(
                    "clusters", self.clusters, "an integer >= 1, or null for the scenario's number of distributions"
                )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clusters = self.resolve_clusters(self.config.clusters)
        if self.clusters > self.num_clients:
            raise ConfigError(
                "algorithm.clusters", self.clusters, f"at most the number of clients ({self.num_clients})"
            )
        first = self.config.clients_per_round(self.num_clients)
        if first < self.clusters:
            raise ConfigError(
                "algorithm.client_fraction",
                self.config.client_fraction,
                f"a fraction sampling at least algorithm.clusters = {self.clusters} of the "
                f"{self.num_clients} clients (it samples {first}): round 1's models seed the centers; "
                "or lower algorithm.clusters",
            )

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> FeSEMState:
        return FeSEMState(Payload(self.initial_weights()), sizes=(0,) * self.clusters)

    def configure(self, round: int, state: FeSEMState, sampled: Sequence[int]) -> dict[int, Payload]:
        return self.center_models(state, sampled)

    def aggregate(self, round: int, state: FeSEMState, results: Sequence[ClientResult]) -> FeSEMState:
        models = [r.uplink.weights for r in results]
        centers = state.centers or self._seed_centers(models)
        # E-step
        assigned = squared_distances(models, [c.weights for c in centers], self.parameter_names).argmin(axis=1)
        now = {r.client_id: int(k) for r, k in zip(results, assigned, strict=True)}
        averaged = cluster_averages(results, lambda r: now[r.client_id])  # M-step; a center nobody joined stays
        centers = tuple(averaged.get(k, center) for k, center in enumerate(centers))
        moved = sum(c in state.member_of and state.member_of[c] != k for c, k in now.items())
        sizes = Counter(now.values())
        samples = {**state.samples, **dict(zip(now, sample_counts(results), strict=True))}
        return dataclasses.replace(
            state,
            centers=centers,
            member_of={**state.member_of, **now},
            samples=samples,
            moved=moved,
            sizes=tuple(sizes[k] for k in range(self.clusters)),
        )

    def round_metrics(self, state: FeSEMState) -> Metrics:
        metrics = {MOVED: float(state.moved), **{SIZE.format(k): float(n) for k, n in enumerate(state.sizes)}}
        return {**metrics, **{CLUSTER_OF.format(c): float(k) for c, k in sorted(state.member_of.items())}}

    def evaluation_payloads(self, state: FeSEMState, clients: Sequence[int]) -> dict[int, Payload]:
        return self.center_models(state, clients)

    def assign(self, state: FeSEMState, descriptions: dict[int, Payload]) -> Assignment:
        """The centers' ensemble, each weighted by its number of members (002 App. I.3)."""
        sizes = [float(list(state.member_of.values()).count(k)) for k in range(len(state.centers))]
        models = {k: state.centers[k] for k in range(len(sizes)) if sizes[k] > 0}
        return Assignment.size_weighted(models, {k: sizes[k] for k in models}, list(descriptions))

    # -- helpers -------------------------------------------------------------------------------------
    def center_models(self, state: FeSEMState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's center; before round 1's seeding, the initial model; for a client never assigned, the
        center with the most training samples (one object per center, so it ships once)."""
        if not state.centers:
            return {cid: state.initial for cid in clients}
        fallback = int(np.argmax(self.center_samples(state)))
        return {cid: state.centers[state.member_of.get(cid, fallback)] for cid in clients}

    def center_samples(self, state: FeSEMState) -> list[float]:
        """Training samples of each center's current members."""
        sizes = [0.0] * len(state.centers)
        for cid, k in state.member_of.items():
            sizes[k] += state.samples[cid]
        return sizes

    def _seed_centers(self, models: list[Arrays]) -> tuple[Payload, ...]:
        """Round 1: K of the uploaded models, drawn by k-means++ seeding (at least K: `__init__` checks)."""
        distances = squared_distances(models, models, self.parameter_names)
        rng = np.random.default_rng(derive_seed(self.seed, "fesem", "seeding"))
        return tuple(Payload(models[i]) for i in kmeans_pp(distances, self.clusters, rng))

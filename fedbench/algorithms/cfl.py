"""CFL (Sattler, Mueller, Samek 2021, "Clustered Federated Learning: Model-Agnostic Distributed Multitask
Optimization Under Privacy Constraints", IEEE TNNLS 32(8); Algorithm 2, with Algorithm 1's optimal bipartition).

CFL starts as FedAvg with one cluster holding every client. Each round every client trains its cluster's model.
The server takes each client's weight update dW_i (its trained model minus the cluster model it was sent). For
each cluster it computes the norm of the members' mean update and the largest member's update norm. When the
mean is below eps1 (the cluster's federation has reached a stationary point) and some member's update is above
eps2 (that client is still far from a stationary point of its own, so the cluster holds incongruent
distributions), the cluster is split in two by the cosine similarity of its members' updates. Each half then
continues from the cluster's model plus its own members' mean update. A half can split again later, so the
bipartition is recursive. Each client is sent, and evaluated with, its own cluster's model. Cluster membership
is server state.

The paper and the authors' released code (github felisat/clustered-federated-learning) differ. `variant` picks
which one runs:
- paper: Algorithm 1's optimal bipartition, the split that minimises the largest similarity between the two
  halves. That is single-linkage clustering stopped at two clusters. The mean update is weighted by sample
  count (Algorithm 2: |D_i| / |D_c|), and any cluster of two or more clients may split.
- released: agglomerative clustering with complete linkage on the similarities, plain means of the updates,
  only clusters of more than two clients split, and no split before round 21 (the notebook's `c_round > 20`).
- fedrc: the `clustered` baseline of FedRC's code (github LINs-lab/FedRC, `ClusteredAggregator`), which 002 ran
  for its CFL rows: as released (complete linkage, plain mean of the updates for the norms, more than two
  clients to split), but with no warm-up, eps_2 = 0.6 (its `tol_2`; eps_1 = 0.4 as everywhere) and each
  cluster's model the sample-weighted average of its members' models.

Choices and omissions:
- The uplink is the trained model: the server subtracts the model it sent, which gives the same bytes as
  sending dW_i. Averaging models keeps a one-cluster round equal to FedAvg's bit for bit.
- Updates are taken over the model's parameters, leaving out buffers such as BatchNorm statistics, as the
  released code's `named_parameters` does.
- Every client takes part in every round (Algorithm 2 and the released code), so `client_fraction` must be 1.
- Algorithm 2 also takes a bound gamma_max on the clients' empirical-risk approximation error and splits only
  when the bipartition's cross-cluster similarity leaves room for it. That bound is unknown in practice; the
  released code does not check it, and neither does fedbench.
- Test time: CFL has no rule for an unseen client (002 App. I.3). Each test client predicts with the ensemble of
  the cluster models, each weighted by its number of clients (`Assignment.size_weighted`, 002 App. I.3).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig, NoClientState, sample_counts, warn_if_phase_covers_run
from fedbench.algorithms.capabilities import Assignment, RoundReport
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload
from fedbench.training import average_weights

CLUSTERS = "cfl_clusters"
"""Round metric: the number of clusters after this round's splits."""
SPLITS = "cfl_splits"
"""Round metric: how many clusters split this round (0: none)."""
MEAN_NORM = "cfl_mean_update_norm"
"""Round metric: the norm of the mean update of this round's largest cluster (compare with eps1); absent while
every cluster is a single client."""
MAX_NORM = "cfl_max_update_norm"
"""Round metric: the largest client update norm in this round's largest cluster (compare with eps2)."""
CLUSTER_OF = "cfl_cluster_of_{}"
"""Round metric, one per client: the index of its cluster after this round (clusters ordered by smallest member)."""


def inner_products(
    rows: Sequence[Arrays], cols: Sequence[Arrays], names: Sequence[str], origin: Arrays | None = None
) -> np.ndarray:
    """[len(rows), len(cols)] inner products of the models' `names` arrays, flattened in float64, each minus
    `origin` (None: the models themselves). Computed one array at a time, so no model is ever copied whole, by
    einsum rather than BLAS: on a busy machine OpenBLAS's thread pool made these small products take seconds."""
    out = np.zeros((len(rows), len(cols)))
    for name in names:
        shift = 0.0 if origin is None else np.asarray(origin[name], np.float64).ravel()
        a = np.stack([np.asarray(m[name], np.float64).ravel() - shift for m in rows])
        b = np.stack([np.asarray(m[name], np.float64).ravel() - shift for m in cols])
        out += np.einsum("ik,jk->ij", a, b)
    return out


def update_norms(gram: np.ndarray, weights: Sequence[float]) -> tuple[float, float]:
    """(norm of the weighted mean update, largest update norm) from the updates' Gram matrix."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    return float(np.sqrt(max(w @ gram @ w, 0.0))), float(np.sqrt(max(np.max(np.diag(gram)), 0.0)))


def cosine_similarities(gram: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities of the updates (the released code's 1e-12 guards a zero update)."""
    norms = np.sqrt(np.maximum(np.diag(gram), 0.0))
    return gram / (np.outer(norms, norms) + 1e-12)


def bipartition(similarity: np.ndarray, linkage: Literal["single", "complete"]) -> tuple[list[int], list[int]]:
    """The two groups of row indices that hierarchical clustering of `similarity` leaves at two clusters.

    `single` is the paper's Algorithm 1: merging the most similar pairs until two clusters remain, which gives
    the bipartition with the smallest maximum cross-cluster similarity. `complete` is the released code's.
    The distance is 1 - similarity. Each group is ascending, and the group holding row 0 comes first.
    """
    from scipy.cluster import hierarchy  # scipy only where clusters are split, not when the method is registered
    from scipy.spatial.distance import squareform

    distance = 1.0 - (similarity + similarity.T) / 2
    np.fill_diagonal(distance, 0.0)
    tree = hierarchy.linkage(squareform(np.maximum(distance, 0.0), checks=False), method=linkage)
    labels = hierarchy.cut_tree(tree, n_clusters=2).ravel()
    first = [i for i in range(len(labels)) if labels[i] == labels[0]]
    return first, [i for i in range(len(labels)) if labels[i] != labels[0]]


@dataclass(frozen=True)
class CFLState:
    """The clusters and their models, and what this round's splitting saw."""

    clusters: tuple[tuple[int, ...], ...]
    """Each cluster's client ids, ascending; the clusters ordered by their smallest member."""
    models: tuple[Payload, ...]
    """One model per cluster, in the order of `clusters`."""
    splits: int = 0
    """How many clusters split this round."""
    norms: tuple[float, float] = (math.nan, math.nan)
    """(mean update norm, largest client update norm) of this round's largest cluster; NaN where it had a single
    client."""


@register_algorithm("cfl")
class CFL(FedAvg["CFL.Config", CFLState, NoClientState], RoundReport[CFLState]):
    """FedAvg within clusters that split in two by their members' update similarities."""

    State = CFLState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        variant: Literal["paper", "released", "fedrc"] = "paper"
        """paper: Algorithm 1's bipartition and sample-weighted updates; released: the authors' notebook
        (complete linkage, plain means, more than two clients to split, a warm-up); fedrc: the code 002 ran
        (FedRC's `clustered`: as released without the warm-up, eps2 0.6). See the module docstring."""
        eps1: float = 0.4
        """eps_1: a cluster splits only while the norm of its mean update is below this (its federation is
        near a stationary point). The default is the released notebook's EPS_1; Algorithm 2 leaves it to the
        user. It depends on the learning rate, the local epochs and the model size."""
        eps2: float | None = None
        """eps_2: ... and some member's update norm is above this (that client is not near a stationary point).
        None: the variant's, 1.6 (the released notebook's EPS_2, for paper and released) or 0.6 (FedRC's
        `tol_2`, for fedrc)."""
        warmup_rounds: int | None = None
        """Rounds of plain FedAvg before the first split may happen. None: the variant's, 0 for paper
        (Algorithm 2 waits only for eps1) and fedrc (FedRC's code checks every round), 20 for released (the
        notebook splits from round 21)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.client_fraction != 1.0:
                raise ConfigError(
                    "client_fraction",
                    self.client_fraction,
                    "1.0: CFL compares the updates of all of a cluster's clients every round (Algorithm 2)",
                )
            if not self.eps1 > 0:
                raise ConfigError("eps1", self.eps1, "a number > 0")
            eps2 = self.eps2 if self.eps2 is not None else 0.6 if self.variant == "fedrc" else 1.6
            object.__setattr__(self, "eps2", eps2)
            if not eps2 > 0:
                raise ConfigError("eps2", eps2, "a number > 0, or null for the variant's")
            warmup = self.warmup_rounds if self.warmup_rounds is not None else 20 if self.variant == "released" else 0
            object.__setattr__(self, "warmup_rounds", warmup)
            if warmup < 0:
                raise ConfigError("warmup_rounds", warmup, "an integer >= 0, or null for the variant's")

        def check_run(self, spec: RunSpec) -> None:
            """Warn when the warm-up covers the whole run: no cluster can split, so the run is FedAvg."""
            assert self.warmup_rounds is not None  # `__post_init__` fills in the variant's
            warn_if_phase_covers_run(
                "warmup_rounds", self.warmup_rounds, spec, "CFL never splits a cluster, so this run is FedAvg"
            )

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> CFLState:
        return CFLState((tuple(range(self.num_clients)),), (Payload(self.initial_weights()),))

    def configure(self, round: int, state: CFLState, sampled: Sequence[int]) -> dict[int, Payload]:
        return self.cluster_models(state, sampled)

    def aggregate(self, round: int, state: CFLState, results: Sequence[ClientResult]) -> CFLState:
        uplinks = {r.client_id: r for r in results}
        clusters, models, splits, norms = [], [], 0, {}
        for members, model in zip(state.clusters, state.models, strict=True):
            group = [uplinks[c] for c in members]
            halves = [group]
            if len(group) >= 2:
                updates = [r.uplink.weights for r in group]
                gram = inner_products(updates, updates, self.parameter_names, origin=model.weights)
                mean_norm, max_norm = norms[members] = update_norms(gram, self._norm_weights(group))
                assert self.config.eps2 is not None  # `Config.__post_init__` fills in the variant's
                if self._may_split(round, len(group)) and mean_norm < self.config.eps1 and max_norm > self.config.eps2:
                    linkage: Literal["single", "complete"] = "single" if self.config.variant == "paper" else "complete"
                    halves = [[group[i] for i in half] for half in bipartition(cosine_similarities(gram), linkage)]
                    splits += 1
            for half in halves:
                clusters.append(tuple(r.client_id for r in half))
                models.append(Payload(average_weights([r.uplink.weights for r in half], self._model_weights(half))))
        order = sorted(range(len(clusters)), key=lambda k: clusters[k][0])
        largest = max(state.clusters, key=len)
        return dataclasses.replace(
            state,
            clusters=tuple(clusters[k] for k in order),
            models=tuple(models[k] for k in order),
            splits=splits,
            norms=norms.get(largest, (math.nan, math.nan)),
        )

    def round_metrics(self, state: CFLState) -> Metrics:
        metrics = {CLUSTERS: float(len(state.clusters)), SPLITS: float(state.splits)}
        if not np.isnan(state.norms[0]):  # no norms where every cluster is a single client
            metrics.update({MEAN_NORM: state.norms[0], MAX_NORM: state.norms[1]})
        for k, members in enumerate(state.clusters):
            metrics.update({CLUSTER_OF.format(c): float(k) for c in members})
        return metrics

    def evaluation_payloads(self, state: CFLState, clients: Sequence[int]) -> dict[int, Payload]:
        return self.cluster_models(state, clients)

    def assign(self, state: CFLState, descriptions: dict[int, Payload]) -> Assignment:
        """The cluster models' ensemble, each weighted by its number of clients (002 App. I.3)."""
        sizes = {k: float(len(members)) for k, members in enumerate(state.clusters)}
        models = {k: state.models[k] for k in sizes if sizes[k] > 0}
        return Assignment.size_weighted(models, {k: sizes[k] for k in models}, list(descriptions))

    # -- helpers -------------------------------------------------------------------------------------
    def cluster_models(self, state: CFLState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's cluster model (the same object for a cluster's members, so it ships once)."""
        model_of = {c: state.models[k] for k, members in enumerate(state.clusters) for c in members}
        return {cid: model_of[cid] for cid in clients}

    def _norm_weights(self, group: Sequence[ClientResult]) -> list[float]:
        """Weights of the mean update whose norm meets eps1: sample counts (paper, |D_i| / |D_c|), else equal."""
        return [float(n) for n in sample_counts(group)] if self.config.variant == "paper" else [1.0] * len(group)

    def _model_weights(self, group: Sequence[ClientResult]) -> list[float]:
        """Weights of a cluster's model average: sample counts (paper; fedrc's `clients_weights`), equal (released)."""
        return [1.0] * len(group) if self.config.variant == "released" else [float(n) for n in sample_counts(group)]

    def _may_split(self, round: int, size: int) -> bool:
        """Past the warm-up, and enough clients: 2 for the paper's bipartition, more than 2 in the released code
        and FedRC's."""
        assert self.config.warmup_rounds is not None  # `Config.__post_init__` fills in the variant's
        return round > self.config.warmup_rounds and size >= (2 if self.config.variant == "paper" else 3)

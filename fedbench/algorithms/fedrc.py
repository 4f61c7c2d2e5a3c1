"""FedRC (Guo, Tang, Lin 2024, "FedRC: Tackling Diverse Distribution Shifts Challenge in Federated Learning by
Robust Clustering", ICML; arXiv 2301.12379; github LINs-lab/FedRC, the code 002 ran its FedRC baseline from).

Soft clustering with K cluster models, like FedEM, but with the robust objective sum_ij log sum_k omega_ik
I(x_ij, y_ij; theta_k), where I = P(y|x; theta_k) / P(y; theta_k) ~ exp(-loss_k(x, y)) / P_k(y): dividing by
cluster k's label marginal P_k(y) keeps clients that differ only in their labels (label shift) together, so
clusters separate concepts (different P(y|x)) rather than label sets. Each round a sampled client

1. downloads all K models and the K x C label marginals P_k(y) (not in round 1: uniform until the server has
   statistics);
2. E-step on its training rows, with the models as received and its omega_i from its last round (uniform at
   first): gamma_jk = softmax_k(log omega_ik - loss_k(x_j, y_j) - log P_k(y_j)), then omega_ik = mean_j gamma_jk;
3. trains each model k from the received one with the run's local training, each row's cross-entropy
   weighted by gamma_jk (mean over the batch of gamma * loss, as the released `Learner.fit_epoch`);
4. uploads the K models, its sample count and its gamma-weighted label counts sum_j gamma_jk 1{y_j = c}
   (K x C floats), from which the server forms P_k(y) for the next round: the counts summed over every
   client's latest report, each entry at least 1e-8 (the released code's floor, which keeps log P finite for
   a label no cluster weight reaches), normalised over classes.

The server averages each model k over the round's uploads by sample count (FedAvg's weights; the gammas already
scale each client's updates, as in the paper's M-step (1/N) sum_ij gamma_ijk grad loss_k).

This is the released client `FedRC` (client.py: `update_sample_weights`, `update_learners_weights`,
`update_learner_labels_weights`) with the label marginal the released `run_experiment.py` aggregates after each
round; its weight update is the paper's Eq. (3) with I approximated as above, so no `variant` is offered
(docs/methods.md). omega_i stays on the client; the server can read it off the label counts all the same
(their sums over classes are N_i omega_i), and does so for system accuracy and test time.

Choices where the paper is silent or fedbench differs:
- K (`clusters`) defaults to the scenario's number of training distributions, the true K (FedRC assumes it
  known, 002 Sec. 2 and App. A; 001 Sec. IV-C gives its clustering baselines the true K).
- Initial models: cluster 0 is the run's initial model (so K = 1 is FedAvg), cluster k > 0 is drawn from seed
  `derive_seed(seed, "fedrc", k)` (the released code seeds learner k with seed + k).
- Where every gamma of a model is exactly 1 (K = 1) it trains with the plain cross-entropy, which is the same
  loss without the last-bit difference of (loss * 1).mean(); a model whose gammas are all 0 is not trained
  (the released `fit_epochs` skips a learner of weight 0), and goes back unchanged.
- A client's losses for the E-step are per-row cross-entropies over its whole training split, the models in
  eval mode (the released `gather_losses` on its unshuffled training loader).
- Local accuracy: each client predicts with the omega-weighted average of the K models' class probabilities
  (the released `LearnersEnsemble.evaluate_iterator`), or with the model of its largest omega under
  `prediction: argmax` (the released `--hard_cluster`); a client never sampled with uniform omega. System
  accuracy votes over these predictors, which the server holds (the models and each client's omega).
- Test time: the released code lets a test client compute its omega from its own labelled data; 002's test
  clients have no labels, so, as 002 App. I.3 does for baselines without a rule, each test client predicts with
  the ensemble of the cluster models weighted by how many training clients have it as their largest omega.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedbench.algorithms.base import Algorithm, AlgorithmConfig, counted, sample_counts
from fedbench.algorithms.capabilities import Assignment, RoundReport, SystemVote, TestTimeAssignment
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import ClientResult, Metrics, Payload, RoundContext
from fedbench.training import (
    ClientData,
    TrainHooks,
    average_weights,
    get_weights,
    probabilities,
    train_local,
    training_losses,
)

MARGINAL = "fedrc_label_marginal"
"""Downlink section `{"p": float32 [K, C]}`: P_k(y), each cluster's label distribution (from round 2 on)."""
LABELS = "fedrc_label_counts"
"""Uplink section `{"counts": float32 [K, C]}`: sum_j gamma_jk 1{y_j = c} over the client's training rows."""
MIXTURE = "fedrc_mixture"
"""System-accuracy payload section `{"omega": float64 [K]}`: the owner's cluster weights."""
SIZE = "fedrc_cluster_size_{}"
"""Round metric, one per cluster k: this round's clients whose largest omega is k (ties to the smallest k)."""
ENTROPY = "fedrc_omega_entropy"
"""Round metric: mean over this round's clients of the entropy of omega_i in nats (0: hard clusters, log K:
uniform)."""
FLOOR = 1e-8
"""Least label count per cluster and class before normalising (the released run_experiment.py's floor)."""


def responsibilities(
    losses: torch.Tensor, labels: torch.Tensor, omega: np.ndarray, marginal: np.ndarray | None
) -> torch.Tensor:
    """FedRC's E-step: gamma [n, K] = softmax_k(log omega_k - losses[:, k] - log P_k(y)), P uniform when None.

    Args:
        losses: float64 [n, K], each row's loss under each cluster model.
        labels: int64 [n].
        omega: float64 [K], the client's cluster weights before this step.
        marginal: float32 [K, C], P_k(y), or None before the server has any.
    """
    scores = torch.log(torch.tensor(omega, dtype=torch.float64))[None, :] - losses  # omega_k = 0: gamma_k = 0
    if marginal is not None:
        scores = scores - torch.log(torch.tensor(marginal, dtype=torch.float64)).T[labels]
    return torch.softmax(scores, dim=1)


def label_counts(gamma: torch.Tensor, labels: torch.Tensor, num_classes: int) -> np.ndarray:
    """float32 [K, C]: sum over rows j of gamma[j, k] 1{labels[j] = c}."""
    onehot = F.one_hot(labels, num_classes).double()
    return (gamma.T @ onehot).numpy().astype(np.float32)


def rows_weighted_by(weights: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """`weights` (one per training row) as a `sample_weight` hook: each batch's rows' weights, on its device."""
    return lambda x, y, rows: weights[rows].to(x.device)


def mixture_of(counts: np.ndarray) -> np.ndarray | None:
    """omega [K] (float64) from a client's label counts: their sums over classes over the total (N_i omega_ik / N_i);
    None for a client without training rows."""
    per_cluster = counts.astype(np.float64).sum(axis=1)
    total = per_cluster.sum()
    return per_cluster / total if total > 0 else None


def label_marginal(reports: Sequence[np.ndarray]) -> np.ndarray:
    """P_k(y) float32 [K, C]: the clients' label counts summed, floored at `FLOOR`, normalised over classes."""
    total = np.maximum(np.sum([r.astype(np.float64) for r in reports], axis=0), FLOOR)
    return (total / total.sum(axis=1, keepdims=True)).astype(np.float32)


def entropy(omega: np.ndarray) -> float:
    positive = omega[omega > 0]
    return float(-(positive * np.log(positive)).sum())


@dataclass(frozen=True)
class FedRCState:
    """The K cluster models, what the clients' label counts say (the marginals, each client's omega), and this
    round's cluster sizes and omega entropy."""

    models: tuple[Payload, ...]
    labels: dict[int, np.ndarray] = field(default_factory=dict)
    """Each client that reported: its latest label counts (float32 [K, C])."""
    omega: dict[int, np.ndarray] = field(default_factory=dict)
    """Each client that reported: its omega (float64 [K]) read off its label counts."""
    marginal: np.ndarray | None = None
    """P_k(y) (float32 [K, C]); None before round 1's reports."""
    sizes: tuple[int, ...] = ()
    """This round's clients whose largest omega is each cluster."""
    entropy: float = math.nan
    """Mean entropy of this round's clients' omega; NaN where none reported."""


@dataclass(frozen=True)
class FedRCClientState:
    """A client's omega (float64 [K]) from its last E-step; None until it has one."""

    omega: np.ndarray | None = None


@register_algorithm("fedrc")
class FedRC(
    Algorithm["FedRC.Config", FedRCState, FedRCClientState],
    RoundReport[FedRCState],
    TestTimeAssignment[FedRCState],
    SystemVote[FedRCState, FedRCClientState],
):
    """K cluster models; each client weighs them by its rows' responsibilities, its label marginals taken out.
    Cluster k's model travels as `Payload.models[k]` (downlink, uplink, and the vote's predictors)."""

    State = FedRCState
    ClientState = FedRCClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        clusters: int | None = None
        """K, the number of cluster models. None: the scenario's number of training distributions, the true K
        (FedRC takes K as given, 002 Sec. 2 and App. A; 001 Sec. IV-C gives its clustering baselines the true
        K; the released code's `--n_learners` defaults to 3, the number of concepts of its CIFAR-10-C runs)."""
        prediction: str = "mixture"
        """How a client predicts: `mixture`, the omega-weighted average of the K models' probabilities (the
        released `LearnersEnsemble.evaluate_iterator`, its default); `argmax`, the model of its largest
        omega (the released `--hard_cluster` flag)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.clusters is not None and self.clusters < 1:
                raise ConfigError(
                    "clusters", self.clusters, "an integer >= 1, or null for the scenario's number of distributions"
                )
            if self.prediction not in ("mixture", "argmax"):
                raise ConfigError("prediction", self.prediction, "mixture or argmax")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clusters = self.resolve_clusters(self.config.clusters)

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> FedRCState:
        models = tuple(Payload(weights) for weights in self.initial_models(self.clusters, "fedrc"))
        return FedRCState(models, sizes=(0,) * self.clusters)

    def configure(self, round: int, state: FedRCState, sampled: Sequence[int]) -> dict[int, Payload]:
        """All K models and, once the server has label counts, the label marginals: one payload for everyone."""
        offer = self.models_payload(state)
        if state.marginal is not None:
            offer = offer.replace({MARGINAL: {"p": state.marginal}})
        return {cid: offer for cid in sampled}

    def aggregate(self, round: int, state: FedRCState, results: Sequence[ClientResult]) -> FedRCState:
        counts = sample_counts(results)
        models = tuple(
            Payload(average_weights([r.uplink.models[k].weights for r in results], counts))
            for k in range(self.clusters)
        )
        reported = {
            r.client_id: r.uplink[LABELS]["counts"]
            for r in results
            if mixture_of(r.uplink[LABELS]["counts"]) is not None
        }
        labels = {**state.labels, **reported}
        now = {cid: w for cid, c in reported.items() if (w := mixture_of(c)) is not None}  # all are, as filtered
        picks = Counter(int(np.argmax(w)) for w in now.values())
        return dataclasses.replace(
            state,
            models=models,
            labels=labels,
            omega={**state.omega, **now},
            marginal=label_marginal(list(labels.values())) if labels else state.marginal,
            sizes=tuple(picks[k] for k in range(self.clusters)),
            entropy=float(np.mean([entropy(w) for w in now.values()])) if now else math.nan,
        )

    def round_metrics(self, state: FedRCState) -> Metrics:
        return {ENTROPY: state.entropy, **{SIZE.format(k): float(n) for k, n in enumerate(state.sizes)}}

    def evaluation_payloads(self, state: FedRCState, clients: Sequence[int]) -> dict[int, Payload]:
        """The K models (each client keeps its omega)."""
        models = self.models_payload(state)
        return {cid: models for cid in clients}

    def system_payloads(self, state: FedRCState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's predictor: the K models (shared arrays, shipped once in the vote's bundle) and its
        omega as read off its label counts (uniform for a client never sampled)."""
        models = self.models_payload(state)
        return {cid: models.replace({MIXTURE: {"omega": state.omega.get(cid, self.uniform())}}) for cid in clients}

    def assign(self, state: FedRCState, descriptions: dict[int, Payload]) -> Assignment:
        """The cluster models, each weighted by the clients whose largest omega it is (002 App. I.3)."""
        counts = Counter(int(np.argmax(w)) for w in state.omega.values())
        models = {k: state.models[k] for k in sorted(counts)}
        return Assignment.size_weighted(models, {k: float(counts[k]) for k in models}, list(descriptions))

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FedRCClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FedRCClientState, Metrics]:
        models = [payload.models[k].weights for k in range(self.clusters)]
        marginal = payload[MARGINAL]["p"] if MARGINAL in payload else None
        losses = torch.stack([training_losses(self.model_with(m), data, ctx.device) for m in models], dim=1)
        gamma = responsibilities(losses, data.train_y.cpu(), self.omega_of(state), marginal)
        counts = label_counts(gamma, data.train_y.cpu(), ctx.num_classes)
        omega = mixture_of(counts)
        uplink, loss, steps = {}, 0.0, 0.0
        for k, weights in enumerate(models):
            model = self.model_with(weights)
            column = gamma[:, k].float()
            if column.any():
                weighted = TrainHooks(sample_weight=rows_weighted_by(column))
                metrics = train_local(model, data, ctx, TrainHooks() if bool((column == 1).all()) else weighted)
                loss, steps = loss + metrics[M.TRAIN_LOSS], steps + metrics[M.TRAIN_STEPS]
            uplink[k] = Payload(get_weights(model))
        new_state = state if omega is None else dataclasses.replace(state, omega=omega)
        metrics = {M.TRAIN_LOSS: loss, M.TRAIN_STEPS: steps, M.TRAIN_SAMPLES: float(data.num_train)}
        sent = counted(None, data.num_train, {LABELS: {"counts": counts}}).merged(Payload(models=uplink))
        return sent, new_state, metrics

    def client_evaluate(
        self, payload: Payload, state: FedRCClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        """Accuracy and cross-entropy of the client's predictor (its omega, uniform if never sampled)."""
        mixture = self.mixture(payload, self.omega_of(state), data, ctx)
        labels = data.test_y.numpy()
        n = len(labels)
        if not n:
            return {M.ACCURACY: float("nan"), M.LOSS: float("nan"), M.TEST_SAMPLES: 0.0}
        picked = np.maximum(mixture[np.arange(n), labels], 1e-12)
        return {
            M.ACCURACY: float((mixture.argmax(axis=1) == labels).mean()),
            M.LOSS: float(-np.log(picked).mean()),
            M.TEST_SAMPLES: float(n),
        }

    def client_predict(
        self, payload: Payload, state: FedRCClientState, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        """The classes the payload's owner's predictor gives this client's test rows (its omega travels with it)."""
        mixture = self.mixture(payload, payload[MIXTURE]["omega"], data, ctx)
        return {M.PRED: mixture.argmax(axis=1).astype(np.int64) if len(mixture) else np.zeros(0, dtype=np.int64)}

    # -- helpers -------------------------------------------------------------------------------------
    def uniform(self) -> np.ndarray:
        return np.full(self.clusters, 1.0 / self.clusters)

    def omega_of(self, state: FedRCClientState) -> np.ndarray:
        """The client's omega; uniform for a client that has none yet."""
        return state.omega if state.omega is not None else self.uniform()

    def models_payload(self, state: FedRCState) -> Payload:
        """One payload with the K models, cluster k's as `models[k]`."""
        return Payload(models=dict(enumerate(state.models)))

    def mixture(self, payload: Payload, omega: np.ndarray, data: ClientData, ctx: RoundContext) -> np.ndarray:
        """float64 [n_test, C]: the omega-weighted class probabilities of the K models on the test split (under
        `prediction: argmax`, the probabilities of the model of largest omega)."""
        if self.config.prediction == "argmax":
            omega = np.eye(self.clusters)[int(np.argmax(omega))]
        parts = [
            w * probabilities(self.model_with(payload.models[k].weights), data, device=ctx.device).numpy()
            for k, w in enumerate(omega)
            if w > 0
        ]
        return np.sum(parts, axis=0)

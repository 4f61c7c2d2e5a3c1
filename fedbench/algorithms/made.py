"""MADE density-ratio reweighting (seed 003 Sec. II-D; the FedDisk method of arXiv 2401.02586; docs/methods.md).

Each client i weights its loss by alpha_i(x) ~ p(x) / q_i(x), the ratio of the global data density to its
own, so that locally over-represented samples count less and locally rare ones more (003 Sec. IV).

The run's rounds hold two phases (a run needs `rounds > density_rounds` for the task model to train):

1. Density phase, rounds 1..density_rounds: the global MADE p(x) is trained by FedAvg (003 Sec. II-D b:
   broadcast it, a few local epochs, average with weights N_i / N). Its weights travel like any model's
   and are metered; the task model does not train yet (evaluations report the untrained model).
2. Task phase, the remaining rounds: the server sends the final global MADE once to each client with the
   task model. The client then trains its local MADE q_i(x) (003 Sec. II-D a) and a classifier h telling
   the local MADE's feature vectors (label 0) from the global MADE's (label 1) on its own images, keeps
   both in its client state, and trains the task model by FedAvg on the weighted loss (003's re-weighted
   objective) through the training loop's `sample_weight` hook, which computes each batch's weights from x.

Choices the papers leave open (003 gives no formula past alpha = h/(1-h); FedDisk's code fills some in):

- Features u: the MADE's log-conditionals log q(x_d | x_<d), d = 1..D (`features="log_conditionals"`),
  whose sum is 003's u_i(x) = log q_i(x); `"outputs"` uses the sigmoid outputs q(x_d = 1 | x_<d), as
  FedDisk's code does. The weight of x is h applied to the *local* MADE's features of x (003: h(u) with
  u = u_i(x); FedDisk's code likewise predicts on the local MADE's outputs).
- Rescaling to [0, 2] (docs/methods.md): `mean_clip` divides the ratio by its mean over the client's training
  set (a density ratio has mean 1 under the local distribution, so the loss keeps its scale) and clips to
  [0, 2]; `minmax` maps the client's smallest ratio to 0 and largest to 2, as FedDisk's code normalises.
- The local MADE starts from the global MADE's initial weights and follows its schedule (density_rounds
  blocks of made_epochs, a fresh Adam each; FedDisk trains both for made_iters epochs), so the two differ
  by the data they saw, not by initialisation or training. Without this the classifier separates the two
  MADEs even on IID data (measured: mean raw ratio 0.2-0.3 instead of ~1).
- Each client's density phase works on its data as of its first density round (a snapshot in its client
  state), so the phase is a function of the federation at its start; under drift the weights therefore
  describe that first stage.

Cache. The density phase depends on the federation's images, the MADE settings and the seed, not on the
task model, so a sweep over task-model settings would retrain the same MADEs in every run. Phases are
cached on disk under `cache_dir()/made` (env `FEDBENCH_CACHE`, else ~/.cache/fedbench: fedbench's one
writable folder, at an absolute path, so workers and Tune trials that change directory find it; the
results folder is relative to the working directory and belongs to tracking, which algorithms do not
import). The key is content-derived, as the algorithm never sees the scenario: the server's average after
round 1, to which every client contributed (so cached only when every client takes part in every round,
client_fraction = 1), plus the density settings and the seed. On a hit the server replays the cached final
global MADE in rounds 2..density_rounds in the payload's `DENSITY` section; clients echo it without training and
report their cached losses, so every payload has the bytes it had when the phase was computed (identical
communication totals) and the run's numbers are identical; only round 1 is recomputed. Each client's local
MADE and classifier are cached by (final global MADE, its images, its id, the weighting settings). The
cache folder must be one the driver and all workers see (one machine, or a shared file system).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    GlobalModelAtTestTime,
    GlobalState,
    ModelBuilder,
    average_uplinks,
    counted,
)
from fedbench.algorithms.capabilities import SystemVote
from fedbench.algorithms.made_cache import DensityCache, Weighting, digest
from fedbench.core import metrics as M
from fedbench.core.cache import cache_dir
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, ClientResult, Metrics, OptimizerSpec, Payload, RoundContext, derive_seed
from fedbench.models.made import MADE
from fedbench.training import ClientData, TrainHooks, get_weights, set_weights, train_local

DENSITY = "density_model"
"""Payload section of the final global MADE (a replayed cached phase, or the one-time send after the phase);
while the density phase trains it, the global MADE is the payload's `weights`, averaged like any model."""
FEATURE_CHUNK = 1024


# ----------------------------------------------------------------------------------------------- helpers


def all_inputs(data: ClientData, device: str) -> torch.Tensor:
    """The client's training images as the models see them, in row order."""
    return torch.cat(
        [
            data.train_batch(torch.arange(s, min(s + FEATURE_CHUNK, data.num_train)), device)[0]
            for s in range(0, data.num_train, FEATURE_CHUNK)
        ]
    )


def image_digest(data: ClientData) -> str:
    """Identity of a client's training images after its transform (stochastic transforms drawn with a fixed
    seed), which is all the density models see: labels do not enter the density phase."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return digest(all_inputs(data, "cpu"))


def adam_job(ctx: RoundContext, epochs: int, batch_size: int, lr: float) -> RoundContext:
    """`ctx` with an auxiliary model's training settings: `epochs` of Adam at `lr` (FedDisk's optimiser)."""
    return replace(
        ctx, local_epochs=epochs, local_steps=None, batch_size=batch_size, optimizer=OptimizerSpec(name="adam", lr=lr)
    )


def nll_per_pixel(made: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The `loss` hook of a MADE: negative log-likelihood per pixel, averaged over the batch (labels unused)."""
    model = cast(MADE, made)  # the loop types its model as any module
    return model.nll(x).mean() / model.dim


def train_made(made: MADE, data: ClientData, epochs: int, lr: float, batch_size: int, ctx: RoundContext) -> float:
    """Fit `made` to the client's images with Adam by `train_local` on the negative log-likelihood per pixel;
    returns the mean batch loss. `ctx` seeds the shuffling (its seed, round and client) and names the device."""
    return train_local(made, data, adam_job(ctx, epochs, batch_size, lr), TrainHooks(loss=nll_per_pixel))[M.TRAIN_LOSS]


def made_features(made: MADE, x: torch.Tensor, kind: str) -> torch.Tensor:
    """The MADE feature vector u of each sample: log-conditionals or sigmoid outputs, [B, D]."""
    with torch.no_grad():
        return made.log_conditionals(x) if kind == "log_conditionals" else made(x)


class RatioClassifier(nn.Module):
    """h(u) = P(global | u) as a logit: standardised features, then logistic regression (`hidden = 0`) or
    one ReLU hidden layer. The standardisation is a buffer, so it is saved with the weights."""

    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.register_buffer("shift", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))
        if hidden == 0:
            self.net: nn.Module = nn.Linear(dim, 1)
        else:
            self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.net((u - self.shift) / self.scale).squeeze(1)


def features_as_given(u: torch.Tensor, source_y: torch.Tensor) -> torch.Tensor:
    """The `prepare` step of the classifier's data: MADE feature vectors are already what it sees."""
    return u


def binary_cross_entropy(clf: nn.Module, u: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The `loss` hook of the ratio classifier: binary cross-entropy of its logit against the 0/1 target."""
    return F.binary_cross_entropy_with_logits(clf(u), target.float())


def fit_classifier(
    u_local: torch.Tensor, u_global: torch.Tensor, hidden: int, epochs: int, batch_size: int, ctx: RoundContext
) -> RatioClassifier:
    """Train h to tell local-MADE features (label 0) from global-MADE features (label 1) by `train_local`:
    Adam, lr 1e-3, binary cross-entropy (FedDisk's shallow classifier: Keras Adam defaults, batch 32).
    `ctx` seeds the initial weights and the shuffling and names the device."""
    u = torch.cat([u_local, u_global])
    target = torch.cat([torch.zeros(len(u_local)), torch.ones(len(u_global))]).to(device=u.device, dtype=torch.int64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ctx.rng_seed("init") % (2**31))
        clf = RatioClassifier(u.shape[1], hidden).to(u.device)
    clf.shift.copy_(u.mean(0))
    clf.scale.copy_(u.std(0).clamp_min(1e-6))
    data = ClientData(u, target, u[:0], target[:0], target, target[:0], prepare=features_as_given)
    train_local(clf, data, adam_job(ctx, epochs, batch_size, 1e-3), TrainHooks(loss=binary_cross_entropy))
    return clf.eval()


# ------------------------------------------------------------------------------------------ the algorithm


class SampleWeights:
    """The `sample_weight` hook: alpha(x) = h(u)/(1 - h(u)) on the local MADE's features of x, rescaled."""

    def __init__(self, local_made: MADE, classifier: RatioClassifier, features: str, rescale: str, scale: np.ndarray):
        self.local_made, self.classifier = local_made, classifier
        self.features, self.rescale, self.scale = features, rescale, [float(s) for s in scale]

    def ratio(self, x: torch.Tensor) -> torch.Tensor:
        """h/(1 - h) = exp(logit h), before rescaling."""
        with torch.no_grad():
            return torch.exp(self.classifier(made_features(self.local_made, x, self.features)).clamp(-30.0, 30.0))

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor | None = None, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        r = self.ratio(x)
        if self.rescale == "mean_clip":
            return (r / self.scale[0]).clamp(0.0, 2.0)
        low, high = self.scale
        return (2.0 * (r - low) / (high - low)).clamp(0.0, 2.0) if high > low else torch.ones_like(r)


@dataclass(frozen=True)
class MADEState(GlobalState):
    """The task model (`global_model`), the global MADE and the density phase's bookkeeping."""

    made: Arrays
    """The global MADE: FedAvg's average during the density phase, its final weights after it."""
    losses: dict[tuple[int, int], float] = field(default_factory=dict)
    """Each density job's MADE loss by (round, client), which the cache stores for a replay."""
    phase_key: str | None = None
    """The density phase's cache key (from round 1 on); None where the phase is not cached."""
    replay: bool = False
    """Whether the density phase is a cached one being replayed."""
    made_sent: frozenset[int] = frozenset()
    """The clients that received the final global MADE (in a task-phase downlink)."""


@dataclass(frozen=True)
class MADEClientState:
    """A client's data for the density phase until its weighting is fitted, then its weighting."""

    phase_data: ClientData | None = None
    """Its data as of its first density round; dropped once its weighting is fitted."""
    weighting: Weighting | None = None
    """Its local MADE, classifier and rescaling constants, fitted in its first task-phase job."""


@register_algorithm("made")
class MADEReweighting(
    Algorithm["MADEReweighting.Config", MADEState, MADEClientState],
    GlobalModelAtTestTime[MADEState],
    SystemVote[MADEState, MADEClientState],
):
    """FedAvg on a density-ratio-weighted loss, after a FedAvg-trained global MADE (module docstring)."""

    State = MADEState
    ClientState = MADEClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        density_rounds: int = 5
        """Rounds of FedAvg on the global MADE before the task model trains (003 Sec. III runs T = 5 rounds and
        gives the MADE phase no count of its own; FedDisk's code: made_iters rounds of 1 epoch)."""
        made_epochs: int = 1
        """Local epochs on the global MADE per density round (FedDisk's code: 1; 003: 'a few local steps')."""
        made_hidden: tuple[int, ...] = (500,)
        """MADE hidden widths (Germain et al. 2015, Fig. 2: one layer of 500 units; 003 gives none)."""
        made_lr: float = 1e-3
        """Adam learning rate of both MADEs (FedDisk's code: 0.001)."""
        made_batch_size: int = 128
        """Batch size of both MADEs (FedDisk's code: made_batch 128)."""
        features: Literal["log_conditionals", "outputs"] = "log_conditionals"
        """MADE feature vector u the classifier sees (003 Sec. II-D: u_i(x) = log q_i(x); FedDisk: outputs)."""
        classifier_hidden: int = 0
        """Hidden units of h; 0 is logistic regression (003 gives no architecture; FedDisk's code a shallow net)."""
        classifier_epochs: int = 40
        """Epochs of h (FedDisk's code: shallow_iters 40, batch 32)."""
        classifier_batch_size: int = 32
        """Batch size of h (FedDisk's code: 32)."""
        rescale: Literal["mean_clip", "minmax"] = "mean_clip"
        """How ratios become weights in [0, 2] (docs/methods.md; module docstring): divide by the client mean and clip,
        or FedDisk's min-max map."""
        cache: bool = True
        """Reuse density phases and weightings cached on disk (fedbench; results are identical either way)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            positive = {
                "density_rounds": self.density_rounds,
                "made_epochs": self.made_epochs,
                "classifier_epochs": self.classifier_epochs,
                "made_batch_size": self.made_batch_size,
                "classifier_batch_size": self.classifier_batch_size,
            }
            for name, value in positive.items():
                if value < 1:
                    raise ConfigError(name, value, "an integer >= 1")
            if not self.made_hidden or any(h < 1 for h in self.made_hidden):
                raise ConfigError("made_hidden", list(self.made_hidden), "a non-empty list of positive integers")
            if self.made_lr <= 0:
                raise ConfigError("made_lr", self.made_lr, "a number > 0")
            if self.classifier_hidden < 0:
                raise ConfigError(
                    "classifier_hidden", self.classifier_hidden, "an integer >= 0 (0: logistic regression)"
                )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        masks = derive_seed(self.seed, "made-masks") % (2**31)  # shared by every party, so MADEs can be averaged
        self.made_builder = ModelBuilder(
            "made",
            self.builder.input_shape,
            self.builder.num_classes,
            (("hidden", self.config.made_hidden), ("seed", masks)),
        )
        self._mades: dict[str, MADE] = {}
        self._classifier: RatioClassifier | None = None

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> MADEState:
        return MADEState(Payload(self.initial_weights()), self._initial_made())

    def configure(self, round: int, state: MADEState, sampled: Sequence[int]) -> dict[int, Payload]:
        if round <= self.config.density_rounds:
            payload = Payload(extras={DENSITY: state.made}) if state.replay else Payload(state.made)
            return {cid: payload for cid in sampled}
        task = state.global_model
        with_made = task.replace({DENSITY: state.made})
        return {cid: task if cid in state.made_sent else with_made for cid in sampled}

    def aggregate(self, round: int, state: MADEState, results: Sequence[ClientResult]) -> MADEState:
        if round > self.config.density_rounds:
            sent = state.made_sent | {r.client_id for r in results}
            return replace(state, global_model=Payload(average_uplinks(results)), made_sent=sent)
        losses = {**state.losses, **{(round, r.client_id): r.metrics[M.TRAIN_LOSS] for r in results}}
        if state.replay:
            return replace(state, losses=losses)
        made = average_uplinks(results)
        phase_key, replay = state.phase_key, False
        if round == 1 and self.config.cache and self.config.client_fraction == 1.0:
            phase_key = digest("made-phase", made, self._phase_settings())
            found = self._cache().find_phase(phase_key)
            if found is not None:
                made, replay = found[1], True
        if round == self.config.density_rounds and phase_key is not None and not replay:
            self._cache().put_phase(phase_key, self._final_id(made), made, losses)
        return replace(state, made=made, losses=losses, phase_key=phase_key, replay=replay)

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: MADEClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, MADEClientState, Metrics]:
        if ctx.round <= self.config.density_rounds:
            return self._density_round(payload, state, data, ctx)
        if state.weighting is None:
            state = self._fit_weighting(payload.sections.get(DENSITY, {}), state, data, ctx)
        assert state.weighting is not None  # fitted above, or in an earlier job
        hook = self.sample_weights(state.weighting, ctx.device)
        model = self.model_with(payload.weights)
        metrics = train_local(model, data, ctx, TrainHooks(sample_weight=hook))
        return counted(get_weights(model), data.num_train), state, metrics

    def _density_round(
        self, payload: Payload, state: MADEClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, MADEClientState, Metrics]:
        phase_data = data if state.phase_data is None else state.phase_data
        state = replace(state, phase_data=phase_data)
        if DENSITY in payload:  # a cached phase is being replayed: echo the final MADE, report the loss this round had
            final = payload[DENSITY]
            loss = self._cache().losses(self._final_id(final))[(ctx.round, ctx.client_id)]
            return counted(final, phase_data.num_train), state, {M.TRAIN_LOSS: loss}
        made = self._made("global", payload.weights)
        c = self.config
        loss = train_made(made, phase_data, c.made_epochs, c.made_lr, c.made_batch_size, ctx)
        return counted(get_weights(made), phase_data.num_train), state, {M.TRAIN_LOSS: loss}

    def _fit_weighting(
        self, final: Arrays, state: MADEClientState, data: ClientData, ctx: RoundContext
    ) -> MADEClientState:
        """Local MADE, classifier and rescaling constants of this client (cached; see the module docstring).

        Seeded from (run seed, client) alone, so the result does not depend on the round it happens in.
        """
        if not final:
            raise RuntimeError(f"made: client {ctx.client_id} has no weighting and its payload carries no global MADE")
        phase_data = data if state.phase_data is None else state.phase_data
        weighting = None
        if self.config.cache:
            final_id = self._final_id(final)
            key = digest(image_digest(phase_data), ctx.client_id, self._weighting_settings())
            weighting = self._cache().find_weighting(final_id, key)
        if weighting is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(self.seed, ctx.client_id, "made-weighting") % (2**31))
                weighting = self.fit_weighting(final, phase_data, ctx)
            if self.config.cache:
                self._cache().put_weighting(final_id, key, weighting)
        return replace(state, phase_data=None, weighting=weighting)

    def fit_weighting(self, final: Arrays, data: ClientData, ctx: RoundContext) -> Weighting:
        """Train the local MADE from the global MADE's initial weights, then the classifier on both MADEs'
        features of the client's images, then the rescaling constants over those images.

        Of the job's `ctx` only the client and the device matter: the training jobs run under contexts from
        `_weighting_job`, which do not depend on the job's round.
        """
        c = self.config
        local = self._made("local", self._initial_made())
        for r in range(1, c.density_rounds + 1):  # the global MADE's schedule: a fresh optimiser every round
            job = self._weighting_job(ctx, "made-local", r)
            train_made(local, data, c.made_epochs, c.made_lr, c.made_batch_size, job)
        glob = self._made("global", final).to(ctx.device).eval()
        x = all_inputs(data, ctx.device)
        u_local = made_features(local.eval(), x, c.features)
        clf = fit_classifier(
            u_local,
            made_features(glob, x, c.features),
            c.classifier_hidden,
            c.classifier_epochs,
            c.classifier_batch_size,
            self._weighting_job(ctx, "made-classifier", 0),
        )
        with torch.no_grad():
            ratio = torch.exp(clf(u_local).clamp(-30.0, 30.0))
        scale = [ratio.mean().item()] if c.rescale == "mean_clip" else [ratio.min().item(), ratio.max().item()]
        return Weighting(get_weights(local), get_weights(clf), np.array(scale))

    def sample_weights(self, weighting: Weighting, device: str) -> SampleWeights:
        """The weight function of a client's fitted weighting, on `device`."""
        local = self._made("local", weighting.local).to(device).eval()
        if self._classifier is None:  # the MADE's dimension is fixed per run
            with torch.random.fork_rng(devices=[]):
                self._classifier = RatioClassifier(local.dim, self.config.classifier_hidden)
        set_weights(self._classifier, weighting.classifier)
        clf = self._classifier.to(device).eval()
        return SampleWeights(local, clf, self.config.features, self.config.rescale, weighting.scale)

    # -- helpers ---------------------------------------------------------------------------------------
    def _weighting_job(self, ctx: RoundContext, purpose: str, block: int) -> RoundContext:
        """The context of one training job of a client's weighting: seeded from (run seed, `purpose`, `block`,
        client) alone, so a weighting does not depend on the round it is fitted in (the cache relies on this).
        `block` stands in for the round, also in a divergence error's message."""
        return replace(ctx, seed=derive_seed(self.seed, purpose), round=block)

    def _made(self, role: str, weights: Arrays) -> MADE:
        """This process's MADE for `role` (global or local) with `weights` loaded."""
        if role not in self._mades:
            with torch.random.fork_rng(devices=[]):
                self._mades[role] = cast(MADE, self.made_builder())
        set_weights(self._mades[role], weights)
        return self._mades[role]

    def _initial_made(self) -> Arrays:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.seed, "made-init") % (2**31))
            return get_weights(self.made_builder())

    def _phase_settings(self) -> tuple:
        c = self.config
        return (
            c.density_rounds,
            c.made_epochs,
            c.made_hidden,
            c.made_lr,
            c.made_batch_size,
            self.num_clients,
            self.seed,
        )

    def _weighting_settings(self) -> tuple:
        c = self.config
        return (c.features, c.classifier_hidden, c.classifier_epochs, c.classifier_batch_size, c.rescale, self.seed)

    def _final_id(self, made: Arrays) -> str:
        return digest("made-final", made, self._phase_settings())

    def _cache(self) -> DensityCache:
        return DensityCache(cache_dir() / "made")

"""FEROMA (002; 000 for the short version): federated learning with distribution profile mapping.

Rounds 1..W are FedAvg (warm-up). The round-W global model is then frozen as every client's profile
extractor (kept in the client state once received, never re-sent). From then on each client describes its
data by a small profile (`feroma_profile`, DPE S1-S4), and the server gives client i the average of the
models returned by the clients, each weighted by how close i's current profile is to the profile of the data
that model was trained on (DPM, 002 eq. 3-5). Whether that is clustered, personalized or global aggregation
emerges from the weights; the counts are reported every round (`round_metrics`).

Round timing. A mapping round has the paper's two exchanges (002 Sec. 3.2, Algorithm 1; the released code runs
two Flower fit calls per round), which the runtime runs as a `DescribedRound`:

    describe t:   every sampled client profiles the data it holds in round t with the frozen extractor
    map t:        for every client i, weights from i's profile to the profile of the data each model returned
                  in round t-1 was trained on, average -> the model built for i's round-t data
    fit t:        client i trains that model on its round-t data and returns it

so every model is built for the data it then trains on, in the same round, drifts included. Round W+1 has only
the warm-up's global model to map from (uniform weights); profile-based weights start at round W+2 (the
released code's round 7). A run of R rounds does R - W mapping trainings. Local evaluation uses each client's
model trained on its current data; test time (002 Sec. 3.3) matches a test client's profile to the profiles
of the final round's training data and hands over the model trained on that data.

Profiles describe a client's training split (the released code profiles its 20% validation split, which here
is the client's local test split, kept for evaluation); DP sensitivities use that split's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from fedbench.algorithms import feroma_profile as dpe
from fedbench.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    GlobalState,
    average_uplinks,
    counted,
    samples_of,
    warn_if_phase_covers_run,
)
from fedbench.algorithms.capabilities import (
    Assignment,
    DescribedRound,
    RoundReport,
    SystemVote,
    TestTimeAssignment,
    TrainedOn,
)
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.runspec import RunSpec
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext, derive_seed
from fedbench.training import ClientData, average_weights, get_weights, train_local

EXTRACTOR = "extractor"
"""Downlink section: the frozen extractor's weights, sent once to each client and to each test client."""
BOUNDS = "extractor_bounds"
"""Downlink section `{"box": float64 [2]}`: [lower, upper] of the frozen latent box (S1), sent with the extractor."""
LATENTS = "latent_range"
"""Uplink section `{"min_max": [2]}` of the last warm-up round: the range of the client's latents (S1)."""
PROFILE = "profile"
"""Uplink section of a profile: `FULL` from a training client; `MARGINAL`, and `CONDITIONAL` where it has
labelled samples, from a test client."""
FULL = "full"
MARGINAL = "marginal"
CONDITIONAL = "conditional"
BATCH = 256


@dataclass(frozen=True)
class FeromaConfig(AlgorithmConfig):
    """FEROMA's hyperparameters; defaults reproduce the paper (002 Sec. 3, App. B.3-B.4, I.8-I.10)."""

    warmup_rounds: int = 5
    """FedAvg rounds before profiles are used; the round-W global model is the frozen extractor (002 App. B.5;
    docs/methods.md)."""
    variant: Literal["paper", "released"] = "paper"
    """paper: Bernoulli masks, softmax(-cosine) weights; released: pooled 50% subsets, 1/(D+1e-8) Euclidean
    weights times data size, per-block min-max scaling of profiles (docs/methods.md)."""
    masks: int = 3
    """M: Bernoulli masks averaged (paper) or subsets pooled (released) per profile (002 B.4 S3, I.8; released: 3)."""
    mask_prob: float = 0.5
    """p: Bernoulli probability (paper) or subset fraction (released: exact 50% splits) (002 B.4 S3)."""
    epsilon: float | None = None
    """Laplace DP budget per profile; None: no noise (released default off, 10 when on; 002 B.4 S4, App. F)."""
    tau: float | Literal["mean"] | None = None
    """Threshold zeroing association weights below it; "mean": 1/|A_{t-1}| as in 002 I.9; None: off (002 eq. 4)."""
    size_weighting: bool | None = None
    """Multiply weights by the sender's sample count (002 Sec. 3.2.1); None: the variant's own (paper off, released
    on)."""
    bound_margin: float = 1.02
    """Upper latent bound = margin x the clients' largest latent (002 B.4 S1; released 1.02)."""
    pca_points: int = 200
    """Synthetic uniform points the shared PCA is fitted on (002 B.4 S2)."""
    sentinel: float = -1.0
    """Value of a class moment estimated on fewer than 2 samples (released code: -1; docs/methods.md)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup_rounds < 1:
            raise ConfigError("warmup_rounds", self.warmup_rounds, "an integer >= 1")
        if self.masks < 1:
            raise ConfigError("masks", self.masks, "an integer >= 1")
        if not 0.0 < self.mask_prob <= 1.0:
            raise ConfigError("mask_prob", self.mask_prob, "a number in (0, 1]")
        if self.epsilon is not None and not self.epsilon > 0:
            raise ConfigError("epsilon", self.epsilon, "a number > 0 (null: no noise)")
        if self.tau is not None and self.tau != "mean" and not 0.0 <= self.tau <= 1.0:
            raise ConfigError("tau", self.tau, "a number in [0, 1], \"mean\" or null")
        if self.bound_margin < 1.0:
            raise ConfigError("bound_margin", self.bound_margin, "a number >= 1")
        if self.pca_points < 2:
            raise ConfigError("pca_points", self.pca_points, "an integer >= 2")

    def check_run(self, spec: RunSpec) -> None:
        """Warn when the warm-up covers the whole run: its profile mapping never starts, it is FedAvg."""
        warn_if_phase_covers_run(
            "warmup_rounds", self.warmup_rounds, spec, "FEROMA never leaves its FedAvg warm-up, so this run is FedAvg"
        )


@dataclass(frozen=True)
class FrozenExtractor:
    """The round-W global model frozen as every client's profile extractor, and the latent box of S1."""

    weights: Arrays
    bounds: np.ndarray
    """float64 [2]: [lower, upper] of the frozen latent box."""

    @classmethod
    def sent_in(cls, payload: Payload) -> FrozenExtractor:
        """The extractor a downlink brings (`payload`)."""
        return cls(payload[EXTRACTOR], payload[BOUNDS]["box"])

    def payload(self) -> Payload:
        """The downlink that brings it: its weights and the box."""
        return Payload(extras={EXTRACTOR: self.weights, BOUNDS: {"box": self.bounds}})


@dataclass(frozen=True)
class TrainedModel:
    """A model a client trained locally, the profile of the data it was trained on, the round of that data and
    how many samples it had: what the next round maps from, and test time's candidates."""

    profile: np.ndarray
    model: Payload
    round: int = 0
    samples: int = 1


@dataclass(frozen=True)
class FeromaState(GlobalState):
    """The global model (FedAvg's during the warm-up, then the size-weighted average of the returned models),
    what this round's participants got, and, once the warm-up is over, what the mapping keeps."""

    kinds: tuple[str, ...] = ()
    """Per participant of the last round: "clustered", "personalized" or "global" (`association_weights`)."""
    extractor: FrozenExtractor | None = None
    """None until the warm-up's last round."""
    profiles: dict[int, np.ndarray] = field(default_factory=dict)
    """Each client's latest profile: that of the data it holds in the round it described."""
    personal: dict[int, Payload] = field(default_factory=dict)
    """Each client's model built for its latest profile (what it trains in that round)."""
    trained: dict[int, TrainedModel] = field(default_factory=dict)
    """Each client's latest locally trained model."""
    returned: tuple[int, ...] = ()
    """The clients whose trained models came back in the last round: the models the next round maps from."""
    equipped: tuple[int, ...] = ()
    """The clients holding the frozen extractor (sent once, with a client's first profile request)."""
    scaler: dpe.BlockScaler | None = None
    """The released variant's profile scaling, fitted in the first mapping round; None before and in the paper's."""


@dataclass(frozen=True)
class FeromaClientState:
    """What a client keeps between mapping rounds; empty during the warm-up."""

    extractor: FrozenExtractor | None = None
    """Its copy of the frozen extractor, kept from its first mapping round on (never sent again)."""


def distances(current: np.ndarray, previous: np.ndarray, metric: Literal["cosine", "euclidean"]) -> np.ndarray:
    """[a, b] distances between rows of `current` [a, d] and `previous` [b, d]; cosine distance is
    1 - cos, and 1 where a vector is zero (orthogonal to everything)."""
    a, b = np.asarray(current, dtype=np.float64), np.asarray(previous, dtype=np.float64)
    if metric == "euclidean":
        return np.linalg.norm(a[:, None, :] - b[None, :, :], axis=2)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    denom = np.outer(na, nb)
    cos = np.divide(a @ b.T, denom, out=np.zeros((len(a), len(b))), where=denom > 0)
    return 1.0 - cos


def association_weights(
    current: np.ndarray,
    previous: np.ndarray,
    sizes: np.ndarray,
    variant: Literal["paper", "released"],
    tau: float | Literal["mean"] | None,
    size_weighting: bool,
) -> tuple[np.ndarray, list[str]]:
    """DPM (002 eq. 3-4): the weight of each previous-round model in each client's new model.

    Args:
        current: [a, d] the clients' current profiles.
        previous: [b, d] the profiles of the data each returned model was trained on.
        sizes: [b] those models' sample counts.
        variant: paper: softmax(-cosine distance); released: 1 / (Euclidean distance + 1e-8), normalised.
        tau: weights below it are zeroed and the rest renormalised; "mean" is 1/b; None keeps all.
        size_weighting: multiply by `sizes` after thresholding (FedAvg-style), then renormalise.

    Returns:
        [a, b] rows summing to 1, and per row what it amounts to: "personalized" (one weight survives),
        "clustered" (several, not all), "global" (all survive, or none and the row falls back to the plain
        average). Without tau every weight is positive, so every row is a similarity-weighted global one.
    """
    b = previous.shape[0]
    if variant == "paper":
        logits = -distances(current, previous, "cosine")
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
    else:
        w = 1.0 / (distances(current, previous, "euclidean") + 1e-8)
    w = w / w.sum(axis=1, keepdims=True)
    keep = np.ones_like(w, dtype=bool)
    if tau is not None:
        threshold = 1.0 / b if tau == "mean" else float(tau)
        keep = w >= threshold * (1.0 - 1e-9)  # equal weights at exactly 1/b must all survive rounding
    survivors = keep.sum(axis=1)
    kinds = ["global" if s in (0, b) else "personalized" if s == 1 else "clustered" for s in survivors]
    w = np.where(survivors[:, None] == 0, 1.0, w * keep)  # none survive: the plain average
    if size_weighting:
        sized = w * np.asarray(sizes, dtype=np.float64)[None, :]
        w = np.where(sized.sum(axis=1, keepdims=True) > 0, sized, w)  # only empty senders left: ignore sizes
    return w / w.sum(axis=1, keepdims=True), kinds


def _train_inputs(data: ClientData, device: str) -> Iterator[torch.Tensor]:
    for start in range(0, data.num_train, BATCH):
        yield data.train_batch(torch.arange(start, min(start + BATCH, data.num_train)), device)[0]


@register_algorithm("feroma")
class Feroma(
    Algorithm[FeromaConfig, FeromaState, FeromaClientState],
    DescribedRound[FeromaState, FeromaClientState],
    RoundReport[FeromaState],
    TestTimeAssignment[FeromaState],
    SystemVote[FeromaState, FeromaClientState],
):
    """Profile-mapped aggregation after a FedAvg warm-up; nearest-profile model assignment at test time."""

    Config = FeromaConfig
    State = FeromaState
    ClientState = FeromaClientState
    picks_by_description = True  # a test client's profile is matched to the training profiles
    config: FeromaConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.config
        self.size_weighting = (
            config.size_weighting if config.size_weighting is not None else config.variant == "released"
        )
        self._projections: dict[tuple, dpe.Projection] = {}

    # -- server half ---------------------------------------------------------------------------------
    def round_describe_payloads(self, round: int, state: FeromaState, sampled: Sequence[int]) -> dict[int, Payload]:
        """After the warm-up, every sampled client profiles its data; one that does not hold the frozen extractor
        yet gets it (and the box) with the request, one shared payload shipped once."""
        if round <= self.config.warmup_rounds:
            return {}
        assert state.extractor is not None, "frozen when the warm-up ended"
        intro, known = state.extractor.payload(), Payload()
        return {cid: known if cid in state.equipped else intro for cid in sampled}

    def receive_descriptions(self, round: int, state: FeromaState, descriptions: Sequence[ClientResult]) -> FeromaState:
        """DPM (002 eq. 3-5): each described client's model for this round's data, from the models returned last
        round, by the distance of its profile to the profiles of the data they were trained on."""
        current = {r.client_id: r.uplink[PROFILE][FULL].astype(np.float64) for r in descriptions}
        scaler = state.scaler
        if scaler is None and self.config.variant == "released":  # fitted once, on the first mapping round
            profiles = np.stack(list(current.values()))
            scaler = dpe.BlockScaler.fit(profiles, dpe.components_of(profiles.shape[1], self.builder.num_classes))
        personal = dict(state.personal)
        if not state.returned:  # round W+1: only the warm-up's global model to map from (uniform weights)
            personal.update({cid: state.global_model for cid in current})
            kinds = ["global"] * len(current)
        else:
            sources = [state.trained[j] for j in state.returned]
            previous = np.stack([m.profile for m in sources])
            sizes = np.array([m.samples for m in sources], dtype=np.float64)
            receivers = sorted(current)
            now = np.stack([current[i] for i in receivers])
            if scaler is not None:
                previous, now = scaler(previous), scaler(now)
            c = self.config
            weights, kinds = association_weights(now, previous, sizes, c.variant, c.tau, self.size_weighting)
            for i, row in zip(receivers, weights, strict=True):
                used = np.flatnonzero(row > 0)
                personal[i] = Payload(average_weights([sources[j].model.weights for j in used], row[used]))
        return dataclasses.replace(
            state,
            personal=personal,
            profiles={**state.profiles, **current},
            scaler=scaler,
            kinds=tuple(kinds),
            equipped=tuple(sorted({*state.equipped, *current})),
        )

    def configure(self, round: int, state: FeromaState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Warm-up: the global model. After it: the model built for the client's profile of this round."""
        if round <= self.config.warmup_rounds:
            return {cid: state.global_model for cid in sampled}
        return {cid: state.personal[cid] for cid in sampled}

    def aggregate(self, round: int, state: FeromaState, results: Sequence[ClientResult]) -> FeromaState:
        if round <= self.config.warmup_rounds:
            averaged, extractor = Payload(average_uplinks(results)), state.extractor
            if round == self.config.warmup_rounds:  # freeze the extractor and the latent box (S1)
                ranges = [r.uplink[LATENTS]["min_max"] for r in results]
                lower, upper = dpe.global_bounds(ranges, self.config.bound_margin)
                extractor = FrozenExtractor(averaged.weights, np.array([lower, upper]))
            kinds = ("global",) * len(results)
            return dataclasses.replace(state, global_model=averaged, kinds=kinds, extractor=extractor)
        trained = dict(state.trained)
        for r in results:  # each trained on its client's data of this round, which it profiled
            trained[r.client_id] = TrainedModel(
                state.profiles[r.client_id], Payload(r.uplink.weights), round, samples_of(r.uplink)
            )
        return dataclasses.replace(
            state,
            global_model=Payload(average_uplinks(results)),
            trained=trained,
            returned=tuple(r.client_id for r in results),
        )

    def round_metrics(self, state: FeromaState) -> Metrics:
        """How many of this round's participants got a clustered, personalized or global model (`kinds`)."""
        return {f"feroma_{kind}": float(state.kinds.count(kind)) for kind in ("clustered", "personalized", "global")}

    def evaluation_payloads(self, state: FeromaState, clients: Sequence[int]) -> dict[int, Payload]:
        """Each client's latest locally trained model (trained on its current data where it took part this round);
        the global model for a client that has not trained one since the warm-up."""
        return {cid: state.trained[cid].model if cid in state.trained else state.global_model for cid in clients}

    def describe_payloads(self, state: FeromaState, test_clients: Sequence[int]) -> dict[int, Payload]:
        """The frozen extractor and bounds (the projection is rebuilt locally from the shared seed); nothing
        when the run ended before the extractor was frozen."""
        if state.extractor is None:
            return {}
        payload = state.extractor.payload()
        return {tid: payload for tid in test_clients}

    def assign(self, state: FeromaState, descriptions: dict[int, Payload]) -> Assignment:
        """Each test client gets the locally trained model whose training-data profile is nearest to its own
        (Euclidean, 002 I.10 "C.E."), compared on the parts it sent: the label-free part, plus the
        class-conditional part when it had labelled samples (002 App. E). Without trained models (a run that
        ended in warm-up) or without a profile, the global model."""
        trained, scaler = state.trained, state.scaler
        ids = sorted(trained)
        payloads: dict[int, Payload] = {}
        matched: dict[int, TrainedOn] = {}
        if ids:
            profiles = np.stack([trained[j].profile for j in ids])
            if scaler is not None:
                profiles = scaler(profiles)
        for tid, description in descriptions.items():
            if not ids or PROFILE not in description:
                payloads[tid] = state.global_model
                continue
            profile = description[PROFILE]
            query = np.asarray(profile[MARGINAL], dtype=np.float64)
            if CONDITIONAL in profile:
                query = np.concatenate([query, np.asarray(profile[CONDITIONAL], dtype=np.float64)])
            if scaler is not None:
                query = scaler(query[None])[0]
            best = ids[int(np.argmin(distances(query[None], profiles[:, : len(query)], "euclidean")[0]))]
            payloads[tid] = trained[best].model
            matched[tid] = TrainedOn(best, trained[best].round)
        return Assignment(payloads, matched)

    # -- client half ---------------------------------------------------------------------------------
    def client_describe_round(
        self, payload: Payload, state: FeromaClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FeromaClientState]:
        """The full profile of this round's training data; the extractor, when it comes with the request, is kept."""
        if EXTRACTOR in payload:  # the first profile request: keep the extractor, it is never sent again
            state = dataclasses.replace(state, extractor=FrozenExtractor.sent_in(payload))
        assert state.extractor is not None, "sent with the first profile request"
        labels = data.train_y.numpy()
        full = self._describe(state.extractor, _train_inputs(data, ctx.device), labels, data.num_train, ctx, "profile")
        return Payload(extras={PROFILE: {FULL: full}}), state

    def client_update(
        self, payload: Payload, state: FeromaClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FeromaClientState, Metrics]:
        """Train the received model (the global one in the warm-up, then the one built for this round's profile) on
        this round's data; the warm-up's last round also sends the range of the client's latents (S1)."""
        model = self.model_with(payload.weights)
        metrics = train_local(model, data, ctx)
        uplink = counted(get_weights(model), data.num_train)
        if ctx.round == self.config.warmup_rounds:  # S1, on the client's own round-W model as released
            # (the frozen extractor is the average of these models and does not exist yet)
            latents = dpe.extract_latents(model, _train_inputs(data, ctx.device))
            uplink = uplink.replace({LATENTS: {"min_max": dpe.latent_range(latents)}})
        return uplink, state, metrics

    def client_describe(self, payload: Payload, data: ClientData, ctx: RoundContext) -> Payload:
        """The label-free profile of all the test client's inputs (labels of `data.test` are never read),
        plus the class-conditional part from its labelled samples `data.train` when it has any (002 App. E)."""
        if EXTRACTOR not in payload:
            return Payload()
        extractor = FrozenExtractor.sent_in(payload)
        inputs = (x for x, _ in data.test_batches(BATCH, ctx.device))
        profile = {MARGINAL: self._describe(extractor, inputs, None, data.num_test, ctx, "test_profile")}
        if data.num_train > 0:
            labelled = _train_inputs(data, ctx.device)
            profile[CONDITIONAL] = self._describe(
                extractor, labelled, data.train_y.numpy(), data.num_train, ctx, "test_profile_labelled", marginal=False
            )
        return Payload(extras={PROFILE: profile})

    def _describe(
        self,
        extractor: FrozenExtractor,
        inputs: Iterable[torch.Tensor],
        labels: np.ndarray | None,
        n: int,
        ctx: RoundContext,
        purpose: str,
        marginal: bool = True,
    ) -> np.ndarray:
        """S2-S4 with the frozen `extractor`: a float32 profile (or part) of `n` samples."""
        lower, upper = (float(v) for v in extractor.bounds)
        model = self.model_with(extractor.weights).to(ctx.device)
        latents = dpe.extract_latents(model, inputs)
        if latents.size == 0:  # no samples: the latent width from one blank input
            blank = torch.zeros(1, *self.builder.input_shape, device=ctx.device)
            latents = np.zeros((0, dpe.extract_latents(model, [blank]).shape[1]))
        projection = self._projection(lower, upper, latents.shape[1])
        rng = np.random.default_rng(ctx.rng_seed(purpose))
        c = self.config
        scale = dpe.laplace_scale(lower, upper, n, c.epsilon)
        vector = dpe.describe(
            projection(latents),
            labels,
            self.builder.num_classes,
            c.variant,
            c.masks,
            c.mask_prob,
            c.sentinel,
            scale,
            rng,
            marginal=marginal,
        )
        return vector.astype(np.float32)

    def _projection(self, lower: float, upper: float, dim: int) -> dpe.Projection:
        """The shared PCA (S2), from a seed every process of the run derives the same way; cached per process."""
        key = (lower, upper, dim)
        if key not in self._projections:
            seed = derive_seed(self.seed, "feroma", "pca")
            self._projections[key] = dpe.shared_projection(
                lower, upper, dim, self.builder.num_classes, seed, self.config.pca_points
            )
        return self._projections[key]

"""FEROMA's distribution profile extractor (DPE, 002 App. B.4, steps S1-S4) as pure functions.

A client maps its data to a profile vector in four steps:

- S1 alignment: every client sends the range of its latents (the flattened input of the first fully
  connected layer); the server widens the largest maximum by a margin and freezes the box [lower, upper].
- S2 shared projection: PCA with k = number of classes, fitted on `points` samples drawn uniformly in
  [lower, upper]^D from a seed every process knows, so every client gets the same projection and no data
  leaves a client.
- S3 moments: marginal mean and std of the projected latents (2k values), then per-class means and per-class
  stds (2Ck values), estimated on random subsets of the client's samples (controlled stochasticity, R3).
- S4 privacy: Laplace noise per coordinate, scale = sensitivity / epsilon, sensitivity = (upper - lower) / n.

Profile layout, everywhere: [marginal mean (k) | marginal std (k) | class means (C x k, class-major) |
class stds (C x k)], so the label-free part (R2) is the first 2k values. Numbers are float64 here; the
algorithm sends profiles as float32.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from fedbench.models.base import FedModel

Variant = Literal["paper", "released"]

MIN_SAMPLES = 2
"""A moment estimated on fewer samples than this is replaced by the sentinel (released code: `shape[0] > 1`)."""


@dataclass(frozen=True)
class Projection:
    """A shared PCA map R^D -> R^k: z = (clip(x, lower, upper) - mean) @ components.T."""

    lower: float
    upper: float
    mean: np.ndarray
    """[D] mean of the synthetic reference points."""
    components: np.ndarray
    """[k, D] principal axes, each signed so that its largest-magnitude entry is positive."""

    @property
    def k(self) -> int:
        return self.components.shape[0]

    def __call__(self, latents: np.ndarray) -> np.ndarray:
        """Project [n, D] latents to [n, k]; latents are clipped into the frozen box first (S1), which is what
        makes (upper - lower) / n a bound on how much one sample moves a mean (S4)."""
        x = np.clip(np.asarray(latents, dtype=np.float64), self.lower, self.upper)
        return (x - self.mean) @ self.components.T


@torch.no_grad()
def extract_latents(model: nn.Module, batches: Iterable[torch.Tensor]) -> np.ndarray:
    """`model.fc_input` of every input batch, stacked as float64 [n, D] (FEROMA's latents, 002 App. B.4)."""
    model.eval()
    fed = cast("FedModel", model)  # the run's model, whose `fc_input` FEROMA's latents are
    parts = [fed.fc_input(x).detach().cpu().double().numpy() for x in batches]
    return np.concatenate(parts) if parts else np.zeros((0, 0))


def latent_range(latents: np.ndarray) -> np.ndarray:
    """S1's uplink: [min, max] of a client's latents (2 floats; [0, 0] for a client without samples)."""
    if latents.size == 0:
        return np.zeros(2)
    return np.array([latents.min(), latents.max()], dtype=np.float64)


def global_bounds(ranges: Iterable[np.ndarray], margin: float) -> tuple[float, float]:
    """The frozen box from the clients' [min, max] pairs: upper = margin x the largest maximum (002 S1,
    released: 1.02); lower = 0 for non-negative latents (post-ReLU features, images), else margin x the
    smallest minimum, so latents that can be negative (an MLP's raw vector input) are not clipped away."""
    stacked = np.array([np.asarray(r, dtype=np.float64) for r in ranges])
    lower = min(0.0, margin * float(stacked[:, 0].min()))
    upper = margin * float(stacked[:, 1].max())
    if upper <= lower:  # every latent was 0 (a dead extractor): any non-empty box keeps the maths defined
        upper = lower + 1.0
    return lower, upper


def shared_projection(lower: float, upper: float, dim: int, k: int, seed: int, points: int = 200) -> Projection:
    """S2: PCA on `points` seeded uniform samples in [lower, upper]^dim; identical on every process.

    Uses an SVD of the centred points. Signs of singular vectors are arbitrary, so each axis is flipped to
    make its largest-magnitude entry positive (scikit-learn's `svd_flip` convention): two processes that
    compute the same decomposition then agree on the projection exactly.
    """
    k = min(k, dim, points)
    rng = np.random.default_rng(seed)
    synthetic = rng.uniform(lower, upper, size=(points, dim))
    mean = synthetic.mean(axis=0)
    _, _, vt = np.linalg.svd(synthetic - mean, full_matrices=False)
    components = vt[:k]
    signs = np.sign(components[np.arange(k), np.abs(components).argmax(axis=1)])
    return Projection(float(lower), float(upper), mean, components * signs[:, None])


def sample_weights(n: int, variant: Variant, masks: int, prob: float, rng: np.random.Generator) -> np.ndarray:
    """S3's randomness as per-sample multiplicities [rows, n].

    paper: `masks` independent Bernoulli(prob) masks, one row each; moments are averaged over rows.
    released: `masks` subsets of exactly round(prob x n) samples drawn without replacement, pooled into one
    row of counts (a sample in two subsets counts twice), moments computed once on the pool.
    """
    if variant == "paper":
        return (rng.random((masks, n)) < prob).astype(np.float64)
    size = max(1, int(round(prob * n))) if n else 0
    counts = np.zeros(n)
    for _ in range(masks):
        counts[rng.choice(n, size=size, replace=False)] += 1.0
    return counts[None, :]


def _weighted_mean_std(z: np.ndarray, weights: np.ndarray, sentinel: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (population) std of z [n, k] under each row of weights [rows, n], averaged over the rows
    that weigh at least MIN_SAMPLES samples; the sentinel where no row does."""
    k = z.shape[1]
    count = weights.sum(axis=1)
    valid = count >= MIN_SAMPLES
    if not valid.any():
        return np.full(k, sentinel), np.full(k, sentinel)
    w, c = weights[valid], count[valid][:, None]
    mean = w @ z / c
    var = np.einsum("rn,rnk->rk", w, (z[None, :, :] - mean[:, None, :]) ** 2) / c
    return mean.mean(axis=0), np.sqrt(np.maximum(var, 0.0)).mean(axis=0)


def marginal_moments(z: np.ndarray, weights: np.ndarray, sentinel: float) -> np.ndarray:
    """The label-free part (R2): [mean (k) | std (k)] of the projected latents."""
    mean, std = _weighted_mean_std(z, weights, sentinel)
    return np.concatenate([mean, std])


def conditional_moments(
    z: np.ndarray, labels: np.ndarray, weights: np.ndarray, num_classes: int, sentinel: float
) -> np.ndarray:
    """The class-conditional part: [means (C x k) | stds (C x k)]; a class with fewer than MIN_SAMPLES
    samples gets the sentinel for its mean and std (released code: -1)."""
    means, stds = [], []
    for c in range(num_classes):
        mean, std = _weighted_mean_std(z, weights * (labels == c)[None, :], sentinel)
        means.append(mean)
        stds.append(std)
    return np.concatenate([np.concatenate(means), np.concatenate(stds)])


def laplace_scale(lower: float, upper: float, n: int, epsilon: float | None) -> float:
    """S4: b = sensitivity / epsilon with sensitivity = (upper - lower) / n (002 App. B.4, S4); 0 without DP.

    This is the paper's calibration of a mean or std coordinate over latents in the box. After the
    projection a coordinate can span up to ||axis||_1 x (upper - lower), so it is the paper's bound, not a
    proof of epsilon-DP in the projected space.
    """
    if epsilon is None or not np.isfinite(epsilon) or n == 0:
        return 0.0
    return (upper - lower) / n / epsilon


def privatize(values: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Independent Laplace(0, scale) noise on every coordinate (variance 2 scale^2); unchanged at scale 0."""
    if scale == 0.0:
        return np.asarray(values, dtype=np.float64)
    return values + rng.laplace(0.0, scale, size=np.shape(values))


def profile_size(num_classes: int, k: int) -> int:
    """Values in a full profile: 2k + 2Ck (2C + 2C^2 with k = C: 220 for 10 classes)."""
    return 2 * k + 2 * num_classes * k


def components_of(size: int, num_classes: int) -> int:
    """k from a full profile's length (the inverse of `profile_size`)."""
    return size // (2 * (num_classes + 1))


@dataclass(frozen=True)
class BlockScaler:
    """Released code's server-side scaling: one min-max scaler per k-sized block of the profile, each
    fitted on every value of its block in the first mapping round's profiles and reused afterwards,
    test time included (scikit-learn MinMaxScaler on the block's values reshaped to one column)."""

    low: np.ndarray
    """[blocks] minimum of each block."""
    span: np.ndarray
    """[blocks] max - min of each block (1 where a block is constant, as scikit-learn does)."""
    k: int

    @classmethod
    def fit(cls, profiles: np.ndarray, k: int) -> BlockScaler:
        blocks = np.asarray(profiles, dtype=np.float64).reshape(len(profiles), -1, k)
        low, high = blocks.min(axis=(0, 2)), blocks.max(axis=(0, 2))
        span = high - low
        return cls(low, np.where(span > 0, span, 1.0), k)

    def __call__(self, profiles: np.ndarray) -> np.ndarray:
        """Scale [n, m*k] profiles or their first m blocks (a label-free part scales with the first 2)."""
        p = np.asarray(profiles, dtype=np.float64)
        blocks = p.reshape(len(p), -1, self.k)
        m = blocks.shape[1]
        return ((blocks - self.low[None, :m, None]) / self.span[None, :m, None]).reshape(p.shape)


def describe(
    z: np.ndarray,
    labels: np.ndarray | None,
    num_classes: int,
    variant: Variant,
    masks: int,
    prob: float,
    sentinel: float,
    noise_scale: float,
    rng: np.random.Generator,
    marginal: bool = True,
) -> np.ndarray:
    """S3 + S4 on projected latents z [n, k], in profile order: the marginal part (unless `marginal` is
    False), then the class-conditional part when labels are given. One draw of subsets serves both parts."""
    weights = sample_weights(len(z), variant, masks, prob, rng)
    parts = [marginal_moments(z, weights, sentinel)] if marginal else []
    if labels is not None:
        parts.append(conditional_moments(z, np.asarray(labels), weights, num_classes, sentinel))
    return privatize(np.concatenate(parts), noise_scale, rng)

"""Client statistics of Client-Conditional FL (001 Sec. III-A): pure functions, no federation in sight.

A client's statistics vector s_i is the top-l eigenvalues of the sample covariance of
Z_i = [phi(x) || onehot(y)] over its training data (001 eq. 1), normalised for use as a network input.
Every client runs the same deterministic procedure (same phi, same random test matrix), so s_i is
comparable across clients without anything leaving a client.

phi: the identity on flattened inputs for small inputs (001: 28x28 MNIST / Fashion-MNIST), and for larger
images a fixed random convolutional encoder to 128 dimensions. 001 uses a "cross-trained" encoder for
CIFAR, which would need data from several clients; its Sec. VI says any fixed extractor the federation
agrees on will do, and a random one built from the run seed is the only one available without training
or downloads. Its weights come from a generator seeded with the run's derived seed, so every client
builds the same encoder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Normalization = Literal["log1p", "raw"]

IDENTITY_MAX_DIM = 1024
"""Inputs with at most this many values use phi = identity (28x28 = 784, digits 8x8 = 64, feature vectors);
larger ones (CIFAR's 3 x 32 x 32 = 3072) go through the random encoder (001 Sec. III-A)."""


class _Centre(nn.Module):
    """x - 0.5: images in [0, 1] centred, so a zero-mean random filter responds with both signs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.5


def random_conv_encoder(channels: int, seed: int) -> nn.Module:
    """A fixed, untrained conv encoder [B, channels, H, W] -> [B, 128] (H, W >= 4), identical for a given seed.

    Conv(C->32, 3x3) ReLU MaxPool2 -> Conv(32->32, 3x3) ReLU MaxPool2 -> AdaptiveAvgPool(2x2) -> flatten:
    32 x 2 x 2 = 128 values, whatever the image size. Weights are He-normal from `torch.Generator(seed)`,
    biases zero, and inputs are centred (x - 0.5) so that ReLUs see both signs; no gradient ever flows.
    """
    generator = torch.Generator().manual_seed(seed % (2**63))
    encoder = nn.Sequential(
        _Centre(),
        nn.Conv2d(channels, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
    )
    with torch.no_grad():
        for layer in encoder:
            if isinstance(layer, nn.Conv2d):
                fan_in = layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * math.sqrt(2.0 / fan_in))
                assert layer.bias is not None  # nn.Conv2d's default bias=True
                layer.bias.zero_()
    encoder.requires_grad_(False)
    return encoder.eval()


def joint_matrix(features: torch.Tensor, labels: torch.Tensor | None, num_classes: int) -> torch.Tensor:
    """Z = [phi(x) || onehot(y)] (001 eq. 1), float64 [n, f + C]; `labels` None gives an all-zero label block."""
    flat = features.reshape(len(features), -1).to(torch.float64)
    if labels is None:
        onehot = torch.zeros(len(features), num_classes, dtype=torch.float64, device=features.device)
    else:
        onehot = F.one_hot(labels.long(), num_classes).to(torch.float64)
    return torch.cat([flat, onehot], dim=1)


def top_eigenvalues(z: torch.Tensor, k: int, seed: int, power_iterations: int = 4) -> torch.Tensor:
    """The k largest eigenvalues of the sample covariance of the rows of `z`, float64 [k], descending.

    Randomized SVD of the centred matrix (Halko, Martinsson & Tropp 2011, Alg. 4.4: subspace iteration with
    re-orthonormalisation) with a 2k-wide Gaussian test matrix, O(n d k) per iteration as 001 Sec. III-A
    suggests; on a Fashion-MNIST client (2,400 x 794) the top 32 are within 0.02% of the exact ones
    (4 iterations; 10 extra columns instead of k gave 1%). The test matrix comes from `torch.Generator(seed)`,
    the same on every client. Eigenvalues = singular values^2 / (n - 1).

    Zero padding: the covariance of n samples in d dimensions has rank at most min(n - 1, d); below k, the
    missing eigenvalues are 0 and come back as 0 (to rounding error), so a client with fewer than k + 1
    samples or dimensions still gets a length-k vector; fewer than 2 samples give all zeros.
    """
    out = torch.zeros(k, dtype=torch.float64)
    n, d = z.shape
    if n < 2:
        return out
    centred = z.to(torch.float64) - z.to(torch.float64).mean(dim=0)
    width = min(2 * k, n, d)
    generator = torch.Generator().manual_seed(seed % (2**63))
    omega = torch.randn(d, width, generator=generator, dtype=torch.float64).to(centred.device)
    basis = torch.linalg.qr(centred @ omega).Q
    for _ in range(power_iterations):
        basis = torch.linalg.qr(centred.T @ basis).Q
        basis = torch.linalg.qr(centred @ basis).Q
    singular = torch.linalg.svdvals(basis.T @ centred)[:k]
    out[: len(singular)] = (singular**2 / (n - 1)).cpu()
    return out


def normalize(eigenvalues: torch.Tensor, mode: Normalization) -> torch.Tensor:
    """Eigenvalues as a network input (001 does not say whether it normalises them).

    `log1p` (the default): s_k = log(1 + lambda_k), lambda in the units of phi (fedbench's inputs are floats
    in [0, 1]; the random encoder's scale is fixed). Why, measured on Fashion-MNIST E1 (K = 5 rich: 2,400
    samples per client; K = 2 super sparse: 300), separation = smallest distance between clusters / largest
    within a cluster:
    - raw eigenvalues span two orders of magnitude (about 20-34 for the first, 0.1 for the 32nd), so the
      first few dominate: s has norm about 24, four times the conv features it is concatenated to (about
      5.6 for cnn_mnist at initialisation), and the top eigenvalues are the noisiest on small clients
      (separation 0.37 at 300 samples: clusters overlap). log1p compresses the top (to about 3.5) and
      leaves the tail almost linear: norm about 5, separation 3.9 rich and 1.25 super sparse (raw 4.5).
    - no division by the trace: dividing by it would make s scale-invariant but drops the total variance,
      which tells E1's clusters apart (separation 2.0 rich, 0.79 super sparse); fedbench fixes the
      input scale, so scale invariance buys nothing here.
    - zero padding stays exactly 0, and the order of the eigenvalues is kept.
    `raw`: the eigenvalues unchanged.
    """
    return eigenvalues.clone() if mode == "raw" else torch.log1p(eigenvalues)


def client_statistics(
    features: torch.Tensor, labels: torch.Tensor | None, num_classes: int, k: int, seed: int, mode: Normalization
) -> torch.Tensor:
    """s_i from phi(x) [n, f] and labels [n] (001 eq. 1 and Sec. III-A), float32 [k].

    `labels` None: the label block is all zeros (inputs only; used for a first guess when no label is known).
    """
    return normalize(top_eigenvalues(joint_matrix(features, labels, num_classes), k, seed), mode).to(torch.float32)


def encode_all(batches: Iterable[torch.Tensor], phi: nn.Module | None) -> torch.Tensor:
    """phi (None: identity) over a client's non-empty sequence of input batches, flattened and concatenated:
    float32 [n, f] on the batches' device."""
    with torch.no_grad():
        return torch.cat([(x if phi is None else phi(x)).reshape(len(x), -1).float() for x in batches])

"""MADE, the masked autoencoder for distribution estimation (Germain et al. 2015): a density model.

MADE is not a classifier, so it is not a `FedModel` (it has no features/body/head split and its output is
one Bernoulli mean per input dimension, not class logits). It is registered in the model zoo so that
`build_model("made", input_shape, num_classes, hidden=...)` builds it like any model (`num_classes` is
accepted for the common signature and ignored); the MADE density-ratio method (seed 003, docs/methods.md) uses
it as its auxiliary density model, while the task model stays whatever the run's `model` says.

Inputs are flattened to D = prod(input_shape) values in [0, 1] (pixels scaled as `to_float_batch` does);
each output d is sigmoid(logit_d) = q(x_d = 1 | x_<d), the conditional of an autoregressive factorisation
in the natural pixel order. The loss is the Bernoulli negative log-likelihood with the pixel intensity as a
soft target, summed over pixels (what FedDisk's `logx_loss` computes for grey images).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model


class MaskedLinear(nn.Linear):
    """A linear layer whose weight is multiplied by a fixed 0/1 mask (the connectivity constraint).

    The mask is a non-persistent buffer: it is not in the state dict, so it never travels in a Payload;
    every party rebuilds it from the model's mask seed.
    """

    def __init__(self, in_features: int, out_features: int, mask: torch.Tensor):
        super().__init__(in_features, out_features)
        self.register_buffer("mask", mask.to(torch.float32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.mask, self.bias)


def made_degrees(dim: int, hidden: tuple[int, ...], seed: int) -> list[np.ndarray]:
    """Connectivity degrees m^l (Germain et al. 2015, Sec. 4): inputs 1..D in natural order; hidden unit k of
    layer l gets m^l(k) uniform in [min m^{l-1}, D - 1], drawn from a generator seeded by `seed`."""
    rng = np.random.default_rng(seed)
    degrees = [np.arange(1, dim + 1)]
    for width in hidden:
        low = min(int(degrees[-1].min()), dim - 1)
        degrees.append(rng.integers(low, dim, size=width))  # upper bound exclusive: values in [low, D-1]
    return degrees


def made_masks(dim: int, hidden: tuple[int, ...], seed: int) -> list[torch.Tensor]:
    """Masks [out, in] per layer: hidden M[k, k'] = 1 iff m^l(k) >= m^{l-1}(k'); output M[d, k] = 1 iff
    d > m^L(k) (Germain et al. 2015, eq. 12-13), so output d depends on inputs 1..d-1 only."""
    degrees = made_degrees(dim, hidden, seed)
    masks = [
        torch.from_numpy((out[:, None] >= inp[None, :]).astype(np.float32))
        for inp, out in zip(degrees, degrees[1:], strict=False)
    ]
    masks.append(torch.from_numpy((degrees[0][:, None] > degrees[-1][None, :]).astype(np.float32)))
    return masks


class MADE(nn.Module):
    """Masked MLP over D flattened inputs: ReLU hidden layers, D sigmoid outputs.

    Args:
        dim: number of input dimensions D.
        hidden: widths of the hidden layers.
        seed: seeds the connectivity (the masks); parties that average MADEs must share it.
    """

    def __init__(self, dim: int, hidden: tuple[int, ...], seed: int):
        super().__init__()
        self.dim = dim
        masks = made_masks(dim, hidden, seed)
        widths = [dim, *hidden, dim]
        self.layers = nn.ModuleList(MaskedLinear(a, b, m) for a, b, m in zip(widths, widths[1:], masks, strict=False))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-sigmoid outputs [B, D] for inputs [B, ...] (flattened here)."""
        h = x.flatten(1)
        for layer in self.layers[:-1]:
            h = F.relu(layer(h))
        return self.layers[-1](h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Conditional means q(x_d = 1 | x_<d), [B, D]."""
        return torch.sigmoid(self.logits(x))

    def log_conditionals(self, x: torch.Tensor) -> torch.Tensor:
        """log q(x_d | x_<d) per dimension, [B, D], with intensities in [0, 1] as soft Bernoulli targets;
        the row sums are log q(x)."""
        target = x.flatten(1).clamp(0.0, 1.0)
        return -F.binary_cross_entropy_with_logits(self.logits(x), target, reduction="none")

    def nll(self, x: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood -log q(x) per sample, [B]."""
        return -self.log_conditionals(x).sum(dim=1)


@register_model("made")
def made(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (500,), seed: int = 0) -> MADE:
    """MADE over prod(input_shape) inputs (a density model: `num_classes` is ignored).

    Args:
        hidden: hidden layer widths (default one layer of 500 units, the single-mask MADE of Germain et al.
            2015, Fig. 2, on binarized MNIST).
        seed: seed of the connectivity masks (weights still come from torch's generator, as for every model).
    """
    if not hidden or any(h < 1 for h in hidden):
        raise ConfigError("model.hidden", list(hidden), "a non-empty list of positive integers")
    dim = math.prod(input_shape)
    if dim < 2:
        raise ConfigError("model.name", "made", f"inputs of at least 2 dimensions (got shape {tuple(input_shape)})")
    return MADE(dim, tuple(hidden), seed)

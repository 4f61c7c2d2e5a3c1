"""Model weights <-> named numpy arrays (the wire format of a Payload section) and sample-weighted averaging."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from fedbench.core.types import Arrays


def get_weights(model: nn.Module) -> Arrays:
    """The model's state (parameters and buffers) as fresh numpy arrays, keyed by state_dict name."""
    return {name: t.detach().cpu().numpy().copy() for name, t in model.state_dict().items()}


def set_weights(model: nn.Module, weights: Arrays) -> None:
    """Load weights into the model (copies: arrays from Ray's object store are read-only)."""
    state = {name: torch.from_numpy(np.array(weights[name], copy=True)) for name in model.state_dict()}
    model.load_state_dict(state)


def average_weights(weights: Sequence[Arrays], sample_counts: Sequence[float]) -> Arrays:
    """Sample-weighted average of models (McMahan et al. 2017, eq. of FedAvg: sum_k n_k/n w_k).

    Floating-point tensors are averaged in float64 and cast back; integer buffers (BatchNorm's
    `num_batches_tracked`) are taken from the first model. Callers pass models in client-id order, so
    the summation order, and therefore the result, is the same on every backend.
    """
    coeffs = np.asarray(sample_counts, dtype=np.float64)
    coeffs = coeffs / coeffs.sum()
    averaged: Arrays = {}
    for name, first in weights[0].items():
        if not np.issubdtype(first.dtype, np.floating):
            averaged[name] = np.array(first, copy=True)
            continue
        total = np.zeros(first.shape, dtype=np.float64)
        for c, w in zip(coeffs, weights):
            total += c * w[name]
        averaged[name] = total.astype(first.dtype)
    return averaged

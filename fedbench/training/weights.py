"""Model weights <-> named numpy arrays (the wire format of a Payload section) and sample-weighted averaging."""

from __future__ import annotations

from collections.abc import Sequence

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
    average = RunningAverage(sample_counts)
    for w in weights:
        average.add(w)
    return average.result()


class RunningAverage:
    """`average_weights` one model at a time, so that a round never holds every client's model at once.

    The counts, known before the models arrive, give the coefficients n_k / n up front; each model is
    added into float64 sums as it comes, in the order of `sample_counts`. Every element sees the same
    additions in the same order as summing a list, so the numbers are the same bit for bit.
    """

    def __init__(self, sample_counts: Sequence[float]):
        coeffs = np.asarray(sample_counts, dtype=np.float64)
        self.coeffs = coeffs / coeffs.sum()
        self.added = 0
        self._sums: Arrays = {}
        self._dtypes: dict[str, np.dtype] = {}

    def add(self, weights: Arrays) -> None:
        """Add the next model (the `added`-th of `sample_counts`); nothing of it is kept afterwards."""
        if self.added == len(self.coeffs):
            raise ValueError(f"all {len(self.coeffs)} models of the average were already added")
        c = self.coeffs[self.added]
        if self.added == 0:
            for name, first in weights.items():
                self._dtypes[name] = first.dtype
                floating = np.issubdtype(first.dtype, np.floating)
                self._sums[name] = np.zeros(first.shape, dtype=np.float64) if floating else np.array(first, copy=True)
        for name, total in self._sums.items():
            if np.issubdtype(self._dtypes[name], np.floating):
                total += c * weights[name]
        self.added += 1

    def result(self) -> Arrays:
        """The average, each tensor cast back to its own dtype."""
        if self.added != len(self.coeffs):
            raise ValueError(f"{self.added} of the average's {len(self.coeffs)} models were added")
        return {
            name: total.astype(self._dtypes[name]) if np.issubdtype(self._dtypes[name], np.floating) else total
            for name, total in self._sums.items()
        }

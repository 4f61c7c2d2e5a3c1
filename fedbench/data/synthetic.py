"""Synthetic(alpha, beta): the procedurally generated benchmark of FedProx (Li et al. 2020, Sec. 5.1).

Each generating device has its own softmax-regression model and its own feature distribution, so the
dataset carries a natural client id (meta['device']) and works offline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, require, with_facts

DIM, NUM_CLASSES = 60, 10


def _facts(
    alpha: float, beta: float, num_devices: int, samples_per_device: int | None, seed: int, test_fraction: float
) -> DatasetFacts:
    """Synthetic's facts (10 classes, 60 features, 'device' column); also where its options are checked."""
    require(alpha >= 0, "alpha", alpha, "a number >= 0")
    require(beta >= 0, "beta", beta, "a number >= 0")
    require(num_devices >= 1, "num_devices", num_devices, "an integer >= 1")
    fixed_ok = samples_per_device is None or samples_per_device >= 2
    require(fixed_ok, "samples_per_device", samples_per_device, "null or an integer >= 2")
    require(0.0 < test_fraction < 1.0, "test_fraction", test_fraction, "a number in (0, 1)")
    counts = _device_counts(np.random.default_rng(seed), num_devices, samples_per_device)
    train = sum(_train_rows(n, test_fraction) for n in counts)
    return DatasetFacts(
        num_classes=NUM_CLASSES,
        channels=None,
        image_size=None,
        features=DIM,
        meta_columns=("device",),
        train_size=int(train),
        test_size=int(counts.sum() - train),
    )


def _device_counts(rng: np.random.Generator, num_devices: int, samples_per_device: int | None) -> np.ndarray:
    """Samples per device: lognormal(4, 2) + 50 (FedProx's power law), or a fixed count; the generator's first draw."""
    if samples_per_device is None:
        return rng.lognormal(4, 2, num_devices).astype(int) + 50
    return np.full(num_devices, samples_per_device)


def _train_rows(n: int, test_fraction: float) -> int:
    """A device's 'train' rows: the rest are 'test', at least one of each."""
    return n - min(max(round(test_fraction * n), 1), n - 1)


@register_dataset("synthetic")
@with_facts(_facts)
def synthetic(
    root: Path,
    alpha: float = 1.0,
    beta: float = 1.0,
    num_devices: int = 30,
    samples_per_device: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> BaseDataset:
    """float32 [N, 60] features, 10 classes, generated device by device (FedProx Sec. 5.1).

    For device k: u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k (10x60) and b_k have entries ~ N(u_k, 1);
    v_k has entries ~ N(B_k, 1); x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2; and
    y = argmax(softmax(W_k x + b_k)). As in FedProx's generator, alpha and beta are standard deviations
    (the paper writes N(0, alpha)) and a device holds lognormal(4, 2) + 50 samples.

    alpha controls model heterogeneity (how far each device's labelling model is from the others'), beta
    data heterogeneity (how far apart the devices' feature distributions are). Beware, as in the
    reference generator u_k shifts every class's logit by the same u_k * (1 + sum(x)), which cancels in the
    argmax: alpha changes the sampled models but not which labels they produce.

    Args:
        root: unused; the data is generated.
        alpha: standard deviation of the devices' model means u_k.
        beta: standard deviation of the devices' feature means B_k.
        num_devices: number of generating devices (FedProx uses 30).
        samples_per_device: a fixed count per device instead of the power law (for small tests).
        seed: seed of the one generator all draws come from; same seed, same data.
        test_fraction: share of each device's samples marked 'test' in meta['split'].
    """
    _facts(alpha, beta, num_devices, samples_per_device, seed, test_fraction)
    rng = np.random.default_rng(seed)
    counts = _device_counts(rng, num_devices, samples_per_device)
    u = rng.normal(0, alpha, num_devices)
    v = rng.normal(rng.normal(0, beta, num_devices)[:, None], 1, (num_devices, DIM))
    scale = np.arange(1, DIM + 1) ** -0.6  # the square root of Sigma's diagonal j^-1.2
    train, test = [], []
    for k, n in enumerate(counts):
        w = rng.normal(u[k], 1, (NUM_CLASSES, DIM))
        b = rng.normal(u[k], 1, NUM_CLASSES)
        x = v[k] + rng.standard_normal((n, DIM)) * scale
        y = np.argmax(x @ w.T + b, axis=1)  # softmax is monotone: its argmax is the logits' argmax
        rows = {"x": x.astype(np.float32), "y": y, "device": np.full(n, k)}
        n_train = _train_rows(n, test_fraction)
        train.append({key: a[:n_train] for key, a in rows.items()})
        test.append({key: a[n_train:] for key, a in rows.items()})
    return BaseDataset.from_splits("synthetic", tuple(map(str, range(NUM_CLASSES))), _stack(train), _stack(test))


def _stack(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

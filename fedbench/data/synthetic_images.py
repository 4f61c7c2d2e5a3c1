"""Class-conditional random images of any shape: stand-ins for MNIST or CIFAR where their files are absent.

Each class has a fixed random prototype image; a sample is its class prototype plus Gaussian pixel noise,
clipped to uint8. The task is learnable (so training curves mean something) and costs exactly what the
real dataset of that shape costs per batch, which is what benchmarks and CIFAR code-path tests need.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, require, with_facts


def _facts(
    channels: int, size: int, num_classes: int, train_samples: int, test_samples: int, noise: float, seed: int
) -> DatasetFacts:
    """The facts its options describe; also where they are checked, so that a task fails when it is loaded."""
    require(channels in (1, 3), "channels", channels, "1 or 3")
    require(size >= 8, "size", size, "an integer >= 8")
    require(num_classes >= 2, "num_classes", num_classes, "an integer >= 2")
    require(train_samples >= 1, "train_samples", train_samples, "an integer >= 1")
    require(test_samples >= 0, "test_samples", test_samples, "an integer >= 0")
    return DatasetFacts(
        num_classes=num_classes,
        channels=channels,
        image_size=(size, size),
        train_size=train_samples,
        test_size=test_samples,
    )


@register_dataset("synthetic_images")
@with_facts(_facts)
def load_synthetic_images(
    root: Path,
    channels: int = 1,
    size: int = 28,
    num_classes: int = 10,
    train_samples: int = 60000,
    test_samples: int = 10000,
    noise: float = 60.0,
    seed: int = 0,
) -> BaseDataset:
    """Images of shape [channels, size, size] (defaults: MNIST's 60000 + 10000 at 1x28x28).

    Args:
        root: unused (nothing is read from disk).
        channels: 1 for MNIST-like, 3 for CIFAR-like data.
        size: image height and width (28 for MNIST, 32 for CIFAR).
        num_classes: number of classes (and prototypes).
        train_samples: rows of the 'train' split.
        test_samples: rows of the 'test' split.
        noise: standard deviation of the pixel noise, in uint8 units.
        seed: seed of the prototypes, labels and noise.
    """
    _facts(channels, size, num_classes, train_samples, test_samples, noise, seed)
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0, 255, size=(num_classes, channels, size, size)).astype(np.float32)

    def draw(n: int) -> dict[str, np.ndarray]:
        y = rng.integers(0, num_classes, size=n)
        x = np.empty((n, channels, size, size), dtype=np.uint8)
        for start in range(0, n, 4096):  # chunks keep the float32 temporaries small
            stop = min(start + 4096, n)
            noisy = prototypes[y[start:stop]] + rng.normal(0, noise, size=(stop - start, channels, size, size))
            x[start:stop] = np.clip(noisy, 0, 255).astype(np.uint8)
        return {"x": x, "y": y}

    classes = [f"class_{c}" for c in range(num_classes)]
    return BaseDataset.from_splits("synthetic_images", classes, draw(train_samples), draw(test_samples))

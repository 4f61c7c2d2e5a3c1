"""Your own dataset, outside the fedbench package: scikit-learn's two interleaving half-moons, 2-D points in 2
classes. A task names it by `module:attribute`, no registration needed:

    dataset: {name: examples.my_dataset:moons, samples: 2000, noise: 0.2}

A loader takes the data root (the folder `FEDBENCH_DATA` or the task's `dataset.data_root` names, where your files
would be: `np.load(root / "my_data" / "train.npz")`) and its options, and returns a `BaseDataset` built by
`BaseDataset.from_splits` from a train and a test split (`x`, `y`, and any further array as a column a partition
may read). `@with_facts` tells fedbench what the data is before any is loaded: the classes, the length of a row
(or the channels and size of an image) and the sizes of the splits. A task is checked against them when it
loads (a federation with more clients than samples, a model that cannot take the rows), and the facts function
checks the options the way the loader would, so a bad option fails then, naming the field, not rounds later.
`python examples/my_dataset.py` loads it as fedbench does; `examples/my_dataset_and_model.py` runs it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedbench.data.base import BaseDataset, DatasetFacts, require, with_facts

CLASSES = ("upper moon", "lower moon")


def moons_facts(samples: int = 2000, noise: float = 0.2, test_fraction: float = 0.25) -> DatasetFacts:
    """What `moons` loads, from its options alone; also where those are checked."""
    require(samples >= 20, "samples", samples, "an integer >= 20")
    require(noise >= 0, "noise", noise, "a number >= 0")
    require(0.0 < test_fraction < 1.0, "test_fraction", test_fraction, "a number in (0, 1)")
    test = math.ceil(test_fraction * samples)
    return DatasetFacts(
        num_classes=len(CLASSES), channels=None, image_size=None, features=2, train_size=samples - test, test_size=test
    )


@with_facts(moons_facts)
def moons(root: Path, samples: int = 2000, noise: float = 0.2, test_fraction: float = 0.25) -> BaseDataset:
    """`samples` points of two half-moons with Gaussian `noise`, the last `test_fraction` of them the test split.

    Args:
        root: where files would be read from; unused (the points are generated, always the same ones).
        samples: points in all.
        noise: standard deviation of the noise added to each point.
        test_fraction: share of the points in the test split.
    """
    from sklearn.datasets import make_moons

    test = moons_facts(samples, noise, test_fraction).test_size
    x, y = make_moons(n_samples=samples, noise=noise, random_state=0)
    x = x.astype(np.float32)
    cut = samples - int(test or 0)
    return BaseDataset.from_splits("moons", CLASSES, {"x": x[:cut], "y": y[:cut]}, {"x": x[cut:], "y": y[cut:]})


if __name__ == "__main__":  # python examples/my_dataset.py: what the loader gives, as fedbench loads it
    from fedbench.data import load_dataset

    data = load_dataset("examples.my_dataset:moons", noise=0.2)
    train = int((data.meta["split"] == "train").sum())
    test, features = len(data) - train, data.x.shape[1]
    print(f"moons: {train} train + {test} test points of {features} features, {data.num_classes} classes")

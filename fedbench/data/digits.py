"""scikit-learn's bundled 8x8 handwritten digits: a dataset that works offline, for quick runs and tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedbench.core.fields import added_later
from fedbench.core.registry import register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, require, with_facts
from fedbench.data.colourise import colour_facts, colourised
from fedbench.data.mnist_family import DIGITS

DIGITS_SAMPLES = 1797
"""Images in scikit-learn's digits (the UCI test set's 8x8 reductions)."""


def _facts(test_fraction: float, colourise: bool = False, colour_seed: int = 0) -> DatasetFacts:
    """Digits' facts; also where its options are checked, so that a task fails when it is loaded."""
    require(0.0 < test_fraction < 1.0, "test_fraction", test_fraction, "a number in (0, 1)")
    test_size = math.ceil(test_fraction * DIGITS_SAMPLES)  # as scikit-learn's train_test_split rounds
    gray = DatasetFacts(
        num_classes=10, channels=1, image_size=(8, 8), train_size=DIGITS_SAMPLES - test_size, test_size=test_size
    )
    return colour_facts(gray, colourise, colour_seed)


@register_dataset("digits")
@added_later("colourise", "colour_seed")
@with_facts(_facts)
def digits(root: Path, test_fraction: float = 0.2, colourise: bool = False, colour_seed: int = 0) -> BaseDataset:
    """The 1797 UCI digits as uint8 [N, 1, 8, 8] images (values 0..16 rescaled to 0..255), 10 classes.

    There is no official split, so a stratified one with a fixed seed stands in for it: every run and
    process sees the same train and test rows.

    Args:
        root: unused; the data ships with scikit-learn.
        test_fraction: share of each class marked 'test' in meta['split'].
        colourise: RGB images, each tinted with a base colour drawn from `colour_seed` (`fedbench.data.colourise`).
        colour_seed: seeds the colours.
    """
    from sklearn.datasets import load_digits  # scikit-learn only when digits are loaded, not when registered
    from sklearn.model_selection import train_test_split

    _facts(test_fraction, colourise, colour_seed)
    bunch = load_digits()
    x = np.round(bunch.images * 255 / 16).astype(np.uint8)[:, None]
    y = bunch.target
    train, test = train_test_split(np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=0)
    train, test = np.sort(train), np.sort(test)
    data = BaseDataset.from_splits("digits", DIGITS, {"x": x[train], "y": y[train]}, {"x": x[test], "y": y[test]})
    return colourised(data, colourise, colour_seed)
